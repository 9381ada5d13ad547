"""Run a parser's extraction in a child process under CPU-time, memory and wall-clock limits.

A hostile document can make a parser loop or allocate without end. In a child process
with `setrlimit` applied before the document is read, that costs the child its life and
the user a clear message, never the server its CPU or memory.

Run as `python -m reports.parsers.sandbox <entry> <cpu_s> <memory_mb>`: the child reads the
document on stdin, calls `entry` (a dotted path to a function of bytes) and writes its
result, or the message of the ParseError it raised, as JSON on stdout.

A parse nobody waits for any more (its task was cancelled, or its lease lost) is ended at
once: whoever started it under a `Stop` (see `stopped_by`) can kill its child from any
thread, and `run` then raises `Stopped`.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from reports.parsers.base import ParseError

MB = 1024 * 1024
OUT_OF_MEMORY_EXIT = 3
# The child runs at a lower CPU priority than the servers: a burst of documents to read
# takes the cores only when the event loops that carry every stream leave them free.
NICENESS = 10
TOO_SLOW = (
    "The document took too long to read ({limit}); it may be malformed or built to stall readers."
)
TOO_BIG = (
    "The document needs too much memory to read; it may be malformed or built to exhaust readers."
)
CRASHED = "The document could not be read; it may be damaged. Try saving or exporting it again."


@dataclass(frozen=True)
class Limits:
    cpu_s: int
    memory_mb: int
    wall_s: float

    @classmethod
    def from_settings(cls) -> Limits:
        from django.conf import settings

        return cls(
            cpu_s=settings.REPORTS_PARSE_CPU_S,
            memory_mb=settings.REPORTS_PARSE_MEMORY_MB,
            wall_s=settings.REPORTS_PARSE_TIMEOUT_S,
        )


class Stopped(Exception):
    """The parse was ended by its `Stop`: nobody waits for its answer (not the document's
    fault, so not a ParseError)."""


class Stop:
    """Ends, from any thread, the children started under it: the ones running and any to come."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._children: set[subprocess.Popen] = set()
        self.stopped = False

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            for child in self._children:
                with contextlib.suppress(OSError):
                    child.kill()

    def _watch(self, child: subprocess.Popen) -> None:
        with self._lock:
            if self.stopped:
                child.kill()
            self._children.add(child)

    def _forget(self, child: subprocess.Popen) -> None:
        with self._lock:
            self._children.discard(child)


_stop: contextvars.ContextVar[Stop | None] = contextvars.ContextVar("sandbox_stop", default=None)


@contextlib.contextmanager
def stopped_by(stop: Stop | None) -> Iterator[None]:
    """Start the parses of this block (in this thread or context) under `stop`."""
    token = _stop.set(stop)
    try:
        yield
    finally:
        _stop.reset(token)


def run(entry: str, data: bytes, limits: Limits):
    """Return entry(data) computed in a limited child; raise ParseError when it fails,
    Stopped when the block's `Stop` ended it."""
    command = [
        sys.executable,
        "-m",
        "reports.parsers.sandbox",
        entry,
        str(limits.cpu_s),
        str(limits.memory_mb),
    ]
    stop = _stop.get() or Stop()
    child = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    with child:  # its pipes closed and the child waited for on the way out
        stop._watch(child)
        try:
            stdout, _ = child.communicate(data, timeout=limits.wall_s)
        except BaseException as exc:
            child.kill()
            child.communicate()
            if not isinstance(exc, subprocess.TimeoutExpired):
                raise
            stdout = None
        finally:
            stop._forget(child)
    if stop.stopped:
        raise Stopped
    if stdout is None:
        raise ParseError(TOO_SLOW.format(limit=f"{limits.wall_s:g} s"))
    if child.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        raise ParseError(TOO_SLOW.format(limit=f"{limits.cpu_s} s of CPU time"))
    if child.returncode == OUT_OF_MEMORY_EXIT:
        raise ParseError(TOO_BIG)
    if child.returncode != 0:
        raise ParseError(CRASHED)
    try:
        answer = json.loads(stdout)
    except ValueError:  # a parser library wrote to stdout: the answer cannot be trusted
        raise ParseError(CRASHED) from None
    if "error" in answer:
        raise ParseError(answer["error"])
    return answer["result"]


def _limit_self(cpu_s: int, memory_mb: int) -> None:
    import resource

    # Over the soft CPU limit the kernel sends SIGXCPU (which ends the process), a second
    # later SIGKILL; over the address-space limit, allocations fail with MemoryError.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * MB, memory_mb * MB))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.nice(NICENESS)
    # A SIGTERM or Ctrl-C sent to the worker's whole process group is the worker's to
    # handle: its drain lets the parse end at its limits, or kills it (SIGKILL) when nobody
    # waits for it. Dying of it here would blame the document ("could not be read").
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _child(entry: str, cpu_s: str, memory_mb: str) -> None:
    _limit_self(int(cpu_s), int(memory_mb))
    data = sys.stdin.buffer.read()
    module, _, name = entry.rpartition(".")
    try:
        function = getattr(__import__(module, fromlist=[name]), name)
        answer = {"result": function(data)}
    except MemoryError:
        os._exit(OUT_OF_MEMORY_EXIT)
    except ParseError as exc:
        answer = {"error": str(exc)}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    _child(*sys.argv[1:])
