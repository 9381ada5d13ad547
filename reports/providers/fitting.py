"""The tokenizer's truth: fit a request to the model's context by the model's own count.

The prepare stage cuts input at CHARS_PER_TOKEN characters a token, a guess that a
byte-level vocabulary (about one token a byte) or a text in another script beats. Before
a request is sent, the provider checks it again with the best count it has
(docs/providers-tested.md):

1. the server's own tokenizer where it offers one: llama-cpp-python's
   `POST /extras/tokenize`, llama.cpp's `llama-server` and vLLM's `POST /tokenize`
   (found once per server, then remembered, and so is a server that has none);
2. otherwise the characters a token that the provider's usage showed on the latest
   requests of this model (their median, never more than CHARS_PER_TOKEN);
3. otherwise CHARS_PER_TOKEN, as the prepare stage cut.

No count is needed when the prompt's UTF-8 bytes fit: no tokenizer here makes more
tokens of a text than it has bytes. A context window the server names in an overflow
error replaces the configured one for that model (`Overflow`).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
import statistics

import httpx2

from reports.providers.base import GenerationRequest
from reports.providers.prompts import CHARS_PER_TOKEN, build_messages, fit_to_context

# Room for what a chat template wraps round the messages (role markers, BOS): tokens the
# tokenizer endpoints, given the bare text, do not count.
TEMPLATE_TOKENS = 64
# A cut aims this far under the ratio measured, so that the shorter text's own ratio
# (its share of costlier characters may differ) still fits.
SAFETY = 0.95
REFITS = 3
LEARNED_FROM = 25  # the latest prompts whose usage teaches the characters a token
TOKENIZE_TIMEOUT_S = 10.0
# Answers that mean "this server has no such endpoint" (not "try again later").
ABSENT = frozenset({400, 404, 405, 422, 501})


@dataclasses.dataclass(frozen=True)
class Overflow:
    """What a context-overflow error says: the window and the prompt's size, in tokens."""

    window: int | None
    prompt_tokens: int | None


# How servers word a context overflow: OpenAI and vLLM answer 400 with
# "context_length_exceeded" / "maximum context length is N tokens … (M in the messages";
# llama-server answers 400 with "exceed_context_size_error" and the numbers as fields;
# llama-cpp-python fails inside a 200 stream with "Requested tokens (M) exceed context
# window of N".
_OVERFLOW = re.compile(
    r"context_length_exceeded|exceed_context_size|maximum context length|context window"
    r"|exceeds the available context size",
    re.IGNORECASE,
)
_WINDOW = (
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
    re.compile(r"context window of (\d+)", re.IGNORECASE),
)
_PROMPT = (
    re.compile(r"\((\d+) in the messages", re.IGNORECASE),
    re.compile(r"request has (\d+) input tokens", re.IGNORECASE),
    re.compile(r"requested tokens \((\d+)\)", re.IGNORECASE),
)


def overflow_in(message: str, body: object = None) -> Overflow | None:
    """Return the overflow an error describes, or None when it is some other error."""
    fields = body if isinstance(body, dict) else {}
    text = f"{message} {fields.get('type', '')} {fields.get('code', '')}"
    if not _OVERFLOW.search(text):
        return None
    window = _int(fields.get("n_ctx")) or _first(_WINDOW, text)
    prompt = _int(fields.get("n_prompt_tokens")) or _first(_PROMPT, text)
    return Overflow(window, prompt)


def _first(patterns, text: str) -> int | None:
    for pattern in patterns:
        if match := pattern.search(text):
            return int(match[1])
    return None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def prompt_text(request: GenerationRequest) -> str:
    return "\n".join(message["content"] for message in build_messages(request))


@dataclasses.dataclass
class ContextFitter:
    """What one provider knows of its model's tokens; kept for the worker's life."""

    root_url: str  # the server's root: its tokenizer endpoints are not under /v1
    model: str
    tokenize_path: str | None = None
    probed: bool = False
    # The characters a token of the latest prompts, from the usage the provider reported.
    ratios: collections.deque = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=LEARNED_FROM)
    )
    window: int | None = None  # named by the server in an overflow error

    def context_tokens(self, configured: int) -> int:
        return min(configured, self.window) if self.window else configured

    @property
    def chars_per_token(self) -> float | None:
        """Return the median of the ratios learned, never more than CHARS_PER_TOKEN.

        The median, so that one user's documents in a costly script (a few tokens a
        character) cannot make everyone else's input be cut short.
        """
        if not self.ratios:
            return None
        return min(statistics.median(self.ratios), CHARS_PER_TOKEN)

    def learn_usage(self, request: GenerationRequest, input_tokens: int | None) -> None:
        """Remember the characters a token that the provider's reported usage shows."""
        if input_tokens:
            self.ratios.append(len(prompt_text(request)) / input_tokens)

    def learn_window(self, window: int) -> None:
        self.window = min(window, self.window or window)

    def budget(self, request: GenerationRequest, configured: int) -> int:
        """Return the prompt tokens the context leaves after the output cap and template."""
        window = self.context_tokens(configured)
        return window - request.max_output_tokens - TEMPLATE_TOKENS

    def may_overflow(self, request: GenerationRequest, configured: int) -> bool:
        """Whether the prompt might not fit: its bytes exceed the budget."""
        return len(prompt_text(request).encode()) > self.budget(request, configured)

    async def fit(
        self, client: httpx2.AsyncClient, request: GenerationRequest, configured: int
    ) -> GenerationRequest:
        """Return `request` with its documents cut so the prompt fits the context."""
        budget = self.budget(request, configured)
        for _ in range(REFITS):
            text = prompt_text(request)
            if len(text.encode()) <= budget:
                return request
            tokens = await self.count(client, text)
            if tokens is None:
                if self.chars_per_token is None:
                    return request  # the prepare stage's cut is the best there is
                tokens = math.ceil(len(text) / self.chars_per_token)
            if tokens <= budget:
                return request
            request = refit(request, budget, len(text) / tokens)
        return request

    async def count(self, client: httpx2.AsyncClient, text: str) -> int | None:
        """Return the server's own token count of `text`, or None when it offers none."""
        paths = [self.tokenize_path] if self.probed else ["/extras/tokenize", "/tokenize"]
        for path in filter(None, paths):
            try:
                response = await client.post(
                    self.root_url + path,
                    json={"input": text, "content": text, "prompt": text, "model": self.model},
                    timeout=TOKENIZE_TIMEOUT_S,
                )
            except httpx2.HTTPError:
                return None  # not now; the overflow error is the safety net
            if response.status_code in ABSENT:
                continue
            tokens = _tokens_of(response)
            if tokens is not None:
                self.tokenize_path, self.probed = path, True
                return tokens
            return None
        self.tokenize_path, self.probed = None, True
        return None


def _tokens_of(response: httpx2.Response) -> int | None:
    if response.status_code != 200:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("count"), int):  # vLLM
        return body["count"]
    tokens = body.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None


def refit(request: GenerationRequest, budget_tokens: int, chars_per_token: float):
    """Return `request` with its documents cut to `budget_tokens` at `chars_per_token`."""
    documents = fit_to_context(
        request.documents,
        request.instructions,
        context_tokens=budget_tokens,
        max_output_tokens=0,
        chars_per_token=chars_per_token * SAFETY,
    )
    return dataclasses.replace(request, documents=documents)
