"""How a client waits between reconnect attempts: capped, jittered exponential backoff.

Jitter spreads the clients of a restarted server over time, so they do not all dial
in the same instant; the cap keeps a client that was down for an hour from waiting
an hour after the server came back.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from mrs.model import Status

PASSING_REFUSALS = frozenset(
    {
        Status.TIMEOUT,
        Status.SHUTTING_DOWN,
        Status.SERVER_ERROR,
        Status.JOURNAL_FAIL,
        Status.QUEUE_BUSY,
        Status.LINK_DOWN,
        Status.EXCEEDQUOTA,
    }
)
"""Refusals that heal by waiting: the server is stopping or overloaded, holds a
killed predecessor's connection (QUEUE_BUSY), or is over a per-connection or admission
bound (EXCEEDQUOTA). A reconnect tries again after one, and a drained SAF record
refused with one stays in the journal; any other refusal (NOSUCHQUEUE, NOTAUTHORIZED,
...) cannot heal by waiting."""


@dataclass(frozen=True, slots=True)
class Reconnect:
    """Reconnect policy. Pass `reconnect=None` to `connect` to switch reconnecting off."""

    delay_s_initial: float = 0.05
    delay_s_max: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.5
    """Each delay is drawn from [(1 - jitter) * d, d], d the capped exponential step."""
    attempts_max: int | None = None
    """Give up (the client stays broken) after this many failed attempts; None = never."""
    seed: float | None = None
    """Seed the jitter (deterministic simulation); None = fresh randomness."""

    def __post_init__(self) -> None:
        if not 0 < self.delay_s_initial <= self.delay_s_max:
            raise ValueError("need 0 < delay_s_initial <= delay_s_max")
        if self.multiplier < 1:
            raise ValueError("multiplier must be >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be in 0..1")
        if self.attempts_max is not None and self.attempts_max < 1:
            raise ValueError("attempts_max must be >= 1 or None")

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The waits before each attempt, in seconds (finite if attempts_max is set)."""
        rng = rng or random.Random(self.seed)
        step = self.delay_s_initial
        attempt = 0
        while self.attempts_max is None or attempt < self.attempts_max:
            attempt += 1
            yield rng.uniform((1 - self.jitter) * step, step)
            step = min(self.delay_s_max, step * self.multiplier)
