"""Who holds a lease, said precisely enough to know, on the same host, that it is dead.

A worker's id is `host:pid:random:place.start`: `place` names the kernel boot and the
PID namespace the process lives in, `start` its start time (clock ticks since boot, from
/proc). A PID is reused, but never with the same start time in the same boot, so a
worker on the same host, in the same boot and PID namespace, can tell for certain that
a lease's holder is gone: no process with that PID, or one that started at another
time. Anywhere else (another host or container, no /proc) nothing is known, and the
lease is left to expire.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
import uuid
from pathlib import Path

PROC = Path("/proc")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def start_time(pid: int, proc: Path = PROC) -> str | None:
    """Return the start time of process `pid` (ticks since boot), or None when there is
    none: no such process, or one that has ended and waits only to be collected (a zombie)."""
    stat = _read(proc / str(pid) / "stat")
    if stat is None:
        return None
    # The command name, in parentheses, may hold spaces and parentheses itself.
    fields = stat.rpartition(")")[2].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


@functools.cache
def place(proc: Path = PROC) -> str:
    """Return a short name of this boot and PID namespace, or "" when unknown."""
    boot = _read(proc / "sys" / "kernel" / "random" / "boot_id")
    try:
        namespace = os.readlink(proc / "self" / "ns" / "pid")
    except OSError:
        return ""
    if boot is None:
        return ""
    return hashlib.sha256(f"{boot.strip()} {namespace}".encode()).hexdigest()[:8]


def host() -> str:
    return socket.gethostname()[:60]  # the id fits its column (100 characters)


def new_worker_id() -> str:
    """Return a new id for a worker in this process."""
    pid = os.getpid()
    return f"{host()}:{pid}:{uuid.uuid4().hex[:6]}:{place()}.{start_time(pid) or ''}"


def holder_prefix() -> str:
    """Return the start shared by the ids of workers whose death this process could see."""
    return f"{host()}:"


def known_dead(worker_id: str) -> bool:
    """Return whether the worker `worker_id` is certainly gone (see the module docstring)."""
    parts = worker_id.split(":")
    if len(parts) != 4 or parts[0] != host() or not place():
        return False
    worker_place, _, started = parts[3].partition(".")
    if worker_place != place() or not started or not parts[1].isdigit():
        return False
    return start_time(int(parts[1])) != started
