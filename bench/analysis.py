"""What a run of streams delivered: lost, duplicated or reordered text, and the lag from
the provider's emit to the client's receipt of each provider delta."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from reports.providers import pacing


def read_probe(path: Path) -> tuple[dict, dict, list]:
    """Return {(key, attempt): t0}, {key: [(start, seconds)]} of chunk flushes and
    [(chunks, start, seconds)] of database writes, from a probe file."""
    starts, flushes, writes = {}, defaultdict(list), []
    if path.exists():
        for line in path.read_text().splitlines():
            kind, key, *rest = line.split()
            if kind == "stream":
                starts[(key, int(rest[0]))] = float(rest[1])
            elif kind == "flush":
                flushes[key].append((float(rest[0]), float(rest[1])))
            elif kind == "write":
                writes.append((int(key), float(rest[0]), float(rest[1])))
    return starts, flushes, writes


def received(stream: dict) -> list[tuple[float, int, str]]:
    """Return every delta the client got, in arrival order: (received_at, seq, text)."""
    return [(at, seq, text) for at, _, deltas in stream["messages"] for seq, text in deltas]


def correctness(stream: dict, expected_text: str, expected_seqs: list[int]) -> dict:
    got = received(stream)
    seqs = [seq for _, seq, _ in got]
    seen, first, reordered = set(), [], 0
    for at, seq, text in got:
        if seq in seen:
            continue
        if first and seq < first[-1][1]:
            reordered += 1
        seen.add(seq)
        first.append((at, seq, text))
    text = "".join(t for _, _, t in first)
    return {
        "delivered": len(seen),
        "gaps": len(set(expected_seqs) - seen),
        "duplicates": len(seqs) - len(seen),
        "reordered": reordered,
        "text_ok": text == expected_text,
        "finished": stream["close_codes"][-1:] == [1000] and not stream["error"],
    }


def lags(stream: dict, text: str, t0: float, profile: str, seed: int, key: str) -> list[float]:
    """Return, per provider delta, seconds from its (scheduled) emit to its receipt."""
    schedule = pacing.plan(pacing.profile_named(profile), text, seed=seed, key=key)
    first_due = t0 + schedule.ttft_s
    arrivals, end = [], 0
    seen = set()
    for at, seq, piece in received(stream):
        if seq not in seen:
            seen.add(seq)
            end += len(piece)
            arrivals.append((end, at))
    out, i, end = [], 0, 0
    for offset, chunk in schedule.chunks:
        end += len(chunk)
        while i < len(arrivals) and arrivals[i][0] < end:
            i += 1
        if i == len(arrivals):
            break  # never arrived: counted as lost, not as lag
        out.append(arrivals[i][1] - (first_due + offset))
    return out
