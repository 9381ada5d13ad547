"""Run a parser's extraction in a child process under CPU-time, memory and wall-clock limits.

A hostile document can make a parser loop or allocate without end. In a child process
with `setrlimit` applied before the document is read, that costs the child its life and
the user a clear message, never the server its CPU or memory.

Run as `python -m reports.parsers.sandbox <news_fd> [module ...]`: the child imports the
modules named (the reader the last parse of this process used), then waits. Its stdin
brings one line of JSON (`entry`, a dotted path to a function of bytes, `cpu_s` and
`memory_mb`), then the document; it applies the limits, calls `entry` and writes its
result, or the message of the ParseError it raised, as JSON on stdout. Each document
still gets a process of its own, but the next one is started as the last parse ends (the
spare): the interpreter's start and the reader's imports, most of a markdown document's
parse, are then off the path to the report's first text.

A slow reader (OCR, reports/parsers/ocr.py) says how far it has come with `tell`, one JSON
line on the pipe `news_fd`: words for the user, which reach whoever started the parse under
`told_to`, and the extra wall-clock time the work ahead needs, granted up to the parse's
`Limits.extra_wall_s`. Programs the child starts (Tesseract) inherit its rlimits and
niceness, and share its process group, which is killed whole.

A parse nobody waits for any more (its task was cancelled, or its lease lost) is ended at
once: whoever started it under a `Stop` (see `stopped_by`) can kill its child, and every
program the child started, from any thread, and `run` then raises `Stopped`.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
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
# What the child may `tell`: a line of at most NEWS_CHARS, its label cut to LABEL_CHARS.
NEWS_CHARS = 4096
LABEL_CHARS = 200


@dataclass(frozen=True)
class Limits:
    cpu_s: int  # each process: the child, and each program it starts
    memory_mb: int  # each process, as for cpu_s
    wall_s: float
    extra_wall_s: float = 0.0  # the most the child may add to wall_s by `tell`

    def with_extra_wall(self, extra_wall_s: float) -> Limits:
        return dataclasses.replace(self, extra_wall_s=extra_wall_s)

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
                _kill(child)

    def _watch(self, child: subprocess.Popen) -> None:
        with self._lock:
            if self.stopped:
                _kill(child)
            self._children.add(child)

    def _forget(self, child: subprocess.Popen) -> None:
        with self._lock:
            self._children.discard(child)


def _kill(child: subprocess.Popen) -> None:
    """Kill the child and the programs it started: its process group (its own, see `run`)."""
    # The group outlives the child while a program it started lives, and its id is not
    # given to another process meanwhile.
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGKILL)


_stop: contextvars.ContextVar[Stop | None] = contextvars.ContextVar("sandbox_stop", default=None)
_told: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "sandbox_told", default=None
)


@contextlib.contextmanager
def stopped_by(stop: Stop | None) -> Iterator[None]:
    """Start the parses of this block (in this thread or context) under `stop`."""
    token = _stop.set(stop)
    try:
        yield
    finally:
        _stop.reset(token)


@contextlib.contextmanager
def told_to(listener: Callable[[str], None] | None) -> Iterator[None]:
    """Give what the parses of this block `tell` to `listener` (called on another thread)."""
    token = _told.set(listener)
    try:
        yield
    finally:
        _told.reset(token)


# In the child: the pipe `tell` writes to (set by `_child`).
_news: int | None = None


def tell(label: str, more_wall_s: float = 0.0) -> None:
    """Say, from the child, what it is reading (`label`, for the user), and that the work
    from here on needs `more_wall_s` seconds more than the parse's wall-clock limit."""
    if _news is not None:
        line = json.dumps({"label": label, "more_wall_s": more_wall_s}) + "\n"
        os.write(_news, line.encode())


class _Deadline:
    """The parse's wall-clock limit: wall_s from its start, plus what the child asked for
    by `tell` (the most it asked at once, never above extra_wall_s)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.start = time.monotonic()
        self.extra = 0.0

    def grant(self, more_wall_s: float) -> None:
        # Only ever later: a child cannot take back what it asked for, nor go past the cap.
        self.extra = max(self.extra, min(float(more_wall_s), self.limits.extra_wall_s))

    def left(self) -> float:
        return self.start + self.limits.wall_s + self.extra - time.monotonic()

    def words(self) -> str:
        return f"{self.limits.wall_s + self.extra:g} s"


def _listen(news: int, deadline: _Deadline, listener: Callable[[str], None] | None) -> None:
    """Read the child's `tell` lines until it closes the pipe; pass them on."""
    with os.fdopen(news, "rb") as pipe:
        # A line longer than NEWS_CHARS is read in pieces, none of them JSON: ignored.
        while line := pipe.readline(NEWS_CHARS):
            try:
                said = json.loads(line)
                label, more = str(said["label"])[:LABEL_CHARS], float(said["more_wall_s"])
            except (ValueError, KeyError, TypeError):
                continue  # not ours to trust: the wall-clock limit stands
            deadline.grant(more)
            if listener is not None:
                listener(label)


class _Spare:
    """The next child, started and warmed before it is needed; one per process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.child: tuple[subprocess.Popen, int] | None = None
        self.warm: tuple[str, ...] = ()  # what the next child imports as it starts

    def take(self) -> tuple[subprocess.Popen, int]:
        with self.lock:
            spare, self.child = self.child, None
        if spare is not None and spare[0].poll() is None:
            return spare
        if spare is not None:  # it died waiting (killed from outside): start afresh
            _discard(spare)
        return _start(self.warm)

    def refill(self, used: str) -> None:
        """Have a child waiting, warmed with `used` (the module of the entry just run)."""
        with self.lock:
            if self.child is not None and self.warm == (used,):
                return
            self.warm = (used,)
            stale, self.child = self.child, None
        if stale is not None:  # warmed for another reader
            _discard(stale)
        self.fill()

    def fill(self) -> None:
        """Have a child waiting, warmed as the last parse (or `keep_a_child_ready`) asked."""
        with self.lock:
            if self.child is not None:
                return
        started = _start(self.warm)
        with self.lock:
            if self.child is None:
                self.child = started
                return
        _discard(started)


def _start(warm: tuple[str, ...]) -> tuple[subprocess.Popen, int]:
    news_read, news_write = os.pipe()
    try:
        # Its own process group (start_new_session), so that a kill reaches the programs it
        # starts too; signals to the worker's group (a drain's SIGTERM) do not reach it.
        child = subprocess.Popen(
            [sys.executable, "-m", "reports.parsers.sandbox", str(news_write), *warm],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(news_write,),
            start_new_session=True,
        )
    except BaseException:
        os.close(news_read)
        raise
    finally:
        os.close(news_write)
    return child, news_read


def _discard(spare: tuple[subprocess.Popen, int]) -> None:
    child, news_read = spare
    with child:
        _kill(child)
        child.communicate()
    os.close(news_read)


_spare = _Spare()


def keep_a_child_ready(readers: tuple[str, ...]) -> None:
    """Start the spare child before this process's first parse, warmed with `readers`
    (modules; a worker does this as it starts): the first report after a start or a
    deploy would otherwise wait for an interpreter and its reader, about 100 ms, before
    its document is read. Once a parse has run, its reader decides the warming."""
    with _spare.lock:
        if _spare.child is None and not _spare.warm:
            _spare.warm = readers
    _spare.fill()


def run(entry: str, data: bytes, limits: Limits):
    """Return entry(data) computed in a limited child; raise ParseError when it fails,
    Stopped when the block's `Stop` ended it."""
    try:
        return _run(entry, data, limits)
    finally:
        _spare.refill(entry.rpartition(".")[0])


def _run(entry: str, data: bytes, limits: Limits):
    child, news_read = _spare.take()
    header = {"entry": entry, "cpu_s": limits.cpu_s, "memory_mb": limits.memory_mb}
    data = json.dumps(header).encode() + b"\n" + data
    stop = _stop.get() or Stop()
    deadline = _Deadline(limits)
    listening = threading.Thread(
        target=_listen, args=(news_read, deadline, _told.get()), daemon=True
    )
    listening.start()
    with child:  # its pipes closed and the child waited for on the way out
        stop._watch(child)
        try:
            stdout = _answer(child, data, deadline)
        except BaseException:
            _kill(child)
            child.communicate()
            raise
        finally:
            stop._forget(child)
        if stdout is None:
            _kill(child)
            child.communicate()
    listening.join()
    if stop.stopped:
        raise Stopped
    if stdout is None:
        raise ParseError(TOO_SLOW.format(limit=deadline.words()))
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


def _answer(child: subprocess.Popen, data: bytes, deadline: _Deadline) -> bytes | None:
    """Return what the child wrote on stdout, or None when the deadline passed first."""
    given = data
    while True:
        try:
            stdout, _ = child.communicate(given, timeout=max(deadline.left(), 0))
            return stdout
        except subprocess.TimeoutExpired:
            if deadline.left() <= 0:
                return None
            given = None  # the input goes on being written where it was


def _limit_self(cpu_s: int, memory_mb: int) -> None:
    import resource

    # Over the soft CPU limit the kernel sends SIGXCPU (which ends the process), a second
    # later SIGKILL; over the address-space limit, allocations fail with MemoryError. The
    # CPU limit counts from the process's start: the warming imports are not the document's.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s += math.ceil(usage.ru_utime + usage.ru_stime)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * MB, memory_mb * MB))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.nice(NICENESS)
    # A SIGTERM or Ctrl-C is the worker's to handle (its own process group does not get
    # them, but a signal sent to this process could): its drain lets the parse end at its
    # limits, or kills it (SIGKILL) when nobody waits for it. Dying of it here would blame
    # the document ("could not be read").
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _child(news: str, *warm: str) -> None:
    # This file runs as __main__ here; the entry's module imports it by its name.
    from reports.parsers import sandbox

    for module in warm:
        __import__(module)
    line = sys.stdin.buffer.readline()
    if not line:  # the process that started it ended: no document will come
        return
    header = json.loads(line)
    _limit_self(int(header["cpu_s"]), int(header["memory_mb"]))
    sandbox._news = int(news)
    data = sys.stdin.buffer.read()
    module, _, name = header["entry"].rpartition(".")
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
