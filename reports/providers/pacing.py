"""How a simulated model paces its stream: profiles modelled on real providers.

A profile says how long the first text takes and then how big each delta is and how far
apart deltas come. `Pacing.plan` turns a text into a deterministic schedule: the same
seed, task and attempt always give the same chunks at the same offsets, so a benchmark's
baseline can replay exactly what the provider sent.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    ttft_s: tuple[float, float]  # time to first text, drawn once per stream
    chunk_chars: tuple[int, int]  # characters per delta, drawn per delta
    interval_s: tuple[float, float]  # gap before each following delta, drawn per delta


PROFILES: dict[str, Profile] = {
    # ~4-character chunks every 13-20 ms after 450 ms (OpenAI-style token streaming).
    "openai": Profile(ttft_s=(0.45, 0.45), chunk_chars=(3, 5), interval_s=(0.013, 0.020)),
    # 8-20-character deltas after 0.75-2 s (Anthropic-style text deltas).
    "claude": Profile(ttft_s=(0.75, 2.0), chunk_chars=(8, 20), interval_s=(0.03, 0.06)),
    # 150 characters every ~550 ms (a proxy or gateway that buffers).
    "bursty": Profile(ttft_s=(0.45, 0.45), chunk_chars=(150, 150), interval_s=(0.5, 0.6)),
    # ~4-character chunks every 4-5 ms: a fast local model, to stress the path.
    "stress": Profile(ttft_s=(0.45, 0.45), chunk_chars=(3, 5), interval_s=(0.004, 0.005)),
}


@dataclass(frozen=True)
class Schedule:
    ttft_s: float
    chunks: tuple[tuple[float, str], ...]  # (seconds after the first text, text)

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.chunks)


def profile_named(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(PROFILES)
        raise ValueError(f"Unknown simulated profile {name!r}; known: {known}.") from None


def plan(profile: Profile, text: str, *, seed: int, key: str) -> Schedule:
    """Return the schedule `profile` streams `text` on, for stream `key` under `seed`."""
    rng = random.Random(f"{seed}:{key}")
    ttft = rng.uniform(*profile.ttft_s)
    chunks: list[tuple[float, str]] = []
    offset, at = 0.0, 0
    while at < len(text):
        size = rng.randint(*profile.chunk_chars)
        chunks.append((offset, text[at : at + size]))
        at += size
        offset += rng.uniform(*profile.interval_s)
    return Schedule(ttft, tuple(chunks))


def steady(tokens: list[str], ttft_s: float, tokens_per_s: float) -> Schedule:
    """Return the schedule of `tokens` at a steady rate (no profile chosen)."""
    return Schedule(ttft_s, tuple((i / tokens_per_s, t) for i, t in enumerate(tokens)))
