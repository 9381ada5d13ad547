"""What the provider learns of its model's tokens: overflow errors in every dialect, and
the characters a token that reported usage teaches."""

from __future__ import annotations

from reports.providers.base import GenerationRequest, SourceDocument
from reports.providers.fitting import ContextFitter, Overflow, overflow_in, prompt_text
from reports.providers.prompts import CHARS_PER_TOKEN


def test_an_overflow_is_recognised_in_every_dialect_with_its_numbers():
    openai = (
        "This model's maximum context length is 4096 tokens. However, you requested 8168 "
        "tokens (7168 in the messages, 1000 in the completion)."
    )
    assert overflow_in(openai) == Overflow(4096, 7168)
    vllm = (
        "'max_tokens' is too large: 1000. This model's maximum context length is 4096 "
        "tokens and your request has 7168 input tokens (1000 > 4096 - 7168)."
    )
    assert overflow_in(vllm) == Overflow(4096, 7168)
    llama_server = {
        "code": 400,
        "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 7168,
        "n_ctx": 4096,
    }
    assert overflow_in(llama_server["message"], llama_server) == Overflow(4096, 7168)
    llama_cpp_python = "Requested tokens (7168) exceed context window of 4096"
    assert overflow_in(llama_cpp_python) == Overflow(4096, 7168)
    assert overflow_in("", {"code": "context_length_exceeded"}) == Overflow(None, None)


def test_other_errors_are_not_overflows():
    assert overflow_in("Invalid value for 'messages'.", {"code": "invalid_value"}) is None
    assert overflow_in("The server had an error.") is None


def test_one_users_costly_script_does_not_cut_everyone_elses_input():
    fitter = ContextFitter("http://127.0.0.1:1", "m")
    assert fitter.chars_per_token is None  # nothing learned: the prepare stage's cut stands
    english = GenerationRequest("t", 1, (SourceDocument("a.md", "Tides turn. " * 100),))
    chars = len(prompt_text(english))
    for _ in range(12):
        fitter.learn_usage(english, chars // 4)  # four characters a token
    emoji = GenerationRequest("t", 1, (SourceDocument("b.md", "🌊" * 3000),))
    for _ in range(5):
        fitter.learn_usage(emoji, len(prompt_text(emoji)) * 3)  # three tokens a character
    assert fitter.chars_per_token == CHARS_PER_TOKEN  # never less cautious than the start
    for _ in range(20):
        fitter.learn_usage(english, chars)  # a byte-level model: a token a character
    assert fitter.chars_per_token == 1.0
