"""A rate cap for jplay: at most N sends per second, on trio's clock.

Why a scheduler of slots rather than a sleep per message: many tasks share one
cap, and a sleep of 1/N after each send drifts (every sleep overshoots a little),
so a "500/s" replay would run at 450/s. Each caller instead reserves the next slot
on an absolute timeline and sleeps until it. A caller that finds the timeline far
behind (the server was slow) may catch up by at most `burst` slots, so in any
window of T seconds at most N*T + burst sends start.
"""

from __future__ import annotations

import math
import re

import trio

_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:/\s*(s|sec|m|min|h))?\s*")
_PER_SECOND = {None: 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_rate(text: str) -> float:
    """'500', '500/s', '30/m', '2/h' -> sends per second; ValueError if not > 0."""
    match = _RATE.fullmatch(text)
    if not match:
        raise ValueError(f"--rate: {text!r} is not a rate (use e.g. 500/s, 500, 30/m)")
    rate = float(match.group(1)) / _PER_SECOND[match.group(2)]
    if rate <= 0:
        raise ValueError(f"--rate: {text!r} must be more than zero")
    if not math.isfinite(rate):  # 400 digits read as infinity: the Pacer's int(inf)
        # raised OverflowError once connected, an unexpected error after the checks
        raise ValueError(
            f"--rate: a number of {len(text)} characters is too large (leave --rate out: no cap)"
        )
    return rate


class Pacer:
    """Hands out send slots `1/rate` seconds apart."""

    def __init__(self, rate_per_s: float, burst: int | None = None) -> None:
        self.interval = 1.0 / rate_per_s
        self.burst = burst if burst is not None else max(1, int(rate_per_s / 50))
        self._next: float | None = None

    async def wait(self) -> None:
        now = trio.current_time()
        if self._next is None or self._next < now - self.burst * self.interval:
            self._next = now
        slot = self._next
        self._next = slot + self.interval
        if slot > now:
            await trio.sleep_until(slot)
        else:
            await trio.lowlevel.checkpoint()
