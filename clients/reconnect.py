"""How a client waits between reconnect attempts: capped, jittered exponential backoff.

Jitter spreads the clients of a restarted server over time, so they do not all dial
in the same instant; the cap keeps a client that was down for an hour from waiting
an hour after the server came back.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from mrs.errors import BadParameter
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
        """BadParameter (BADPARAM, as every other bad argument of the library) naming
        the field. Why each check: a bare ValueError was raised where callers catch
        the library's errors, `multiplier=nan` passed every comparison (the waits
        then became NaN), and an infinite or non-number value raised TypeError or
        waited for ever."""
        problem = _policy_problem(self)
        if problem is not None:
            raise BadParameter(Status.BADPARAM, f"Reconnect: {problem}")

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The waits before each attempt, in seconds (finite if attempts_max is set)."""
        rng = rng or random.Random(self.seed)
        step = self.delay_s_initial
        attempt = 0
        while self.attempts_max is None or attempt < self.attempts_max:
            attempt += 1
            yield rng.uniform((1 - self.jitter) * step, step)
            step = min(self.delay_s_max, step * self.multiplier)


def _finite(value: object) -> bool:
    """A real number (not a bool) that is neither NaN nor infinite."""
    return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]


def _policy_problem(policy: Reconnect) -> str | None:
    """What is wrong with `policy`'s values, in one line; None when they are fine."""
    initial, cap = policy.delay_s_initial, policy.delay_s_max
    if not (_finite(initial) and _finite(cap) and 0 < initial <= cap):  # type: ignore[operator]
        return f"need finite numbers 0 < delay_s_initial <= delay_s_max, got {initial!r}, {cap!r}"
    if not _finite(policy.multiplier) or policy.multiplier < 1:
        return f"multiplier must be a finite number >= 1, got {policy.multiplier!r}"
    if not _finite(policy.jitter) or not 0 <= policy.jitter <= 1:
        return f"jitter must be a number in 0..1, got {policy.jitter!r}"
    attempts = policy.attempts_max
    if attempts is not None and (type(attempts) is not int or attempts < 1):
        return f"attempts_max must be an int >= 1 or None, got {attempts!r}"
    return None
