"""llama.cpp in the loop: llama-cpp-python's OpenAI-compatible server, run for real with
the tiny models scripts/make_tiny_model.py writes (nothing is downloaded).

It serves two models from one process: `reportline-tiny` writes "abc…xyz0…9" and stops,
`reportline-tiny-endless` writes the same over and over until the output cap. Both have
a byte-level vocabulary (about one token a byte); the first a 4,096-token context, the
second room for a long stream.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parents[2]
MAKE_MODEL = ROOT / "scripts" / "make_tiny_model.py"
MODEL, ENDLESS = "reportline-tiny", "reportline-tiny-endless"
CONTEXT = 4096
ENDLESS_CONTEXT = 32768
WALK = "abcdefghijklmnopqrstuvwxyz0123456789"  # what `reportline-tiny` writes
START_TIMEOUT_S = 60.0


def installed() -> bool:
    try:
        import gguf  # noqa: F401
        import llama_cpp.server  # noqa: F401
    except ImportError:
        return False
    return True


class LlamaServer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.log = folder / "server.log"
        self.port = _free_port()
        self._process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LlamaServer:
        models = []
        for alias, context, extra in (
            (MODEL, CONTEXT, []),
            (ENDLESS, ENDLESS_CONTEXT, ["--endless"]),
        ):
            path = self.folder / f"{alias}.gguf"
            command = [sys.executable, MAKE_MODEL, path, "--context", str(context), *extra]
            subprocess.run(command, check=True)
            models.append(
                {"model": str(path), "model_alias": alias, "n_ctx": context, "n_threads": 1}
            )
        config = self.folder / "server.json"
        config.write_text(json.dumps({"host": "127.0.0.1", "port": self.port, "models": models}))
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "llama_cpp.server", "--config_file", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self._wait_until_ready()
        return self

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"llama-cpp-python's server exited:\n{self.log_text()}")
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{self.base_url}/models", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"llama-cpp-python's server did not start:\n{self.log_text()}")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_log(self, text: str, *, seen: int = 0, timeout_s: float = 10.0) -> bool:
        """Return whether `text` appears in the server's output more than `seen` times
        within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.log_text().count(text) > seen:
                return True
            time.sleep(0.05)
        return self.log_text().count(text) > seen


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
