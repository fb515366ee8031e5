"""Deadlines on one connection: heartbeats, silence, the handshake, an unfinished frame.

Why: TCP tells nobody when a peer loses power, a cable is pulled or a firewall drops
the flow; without a heartbeat a link stays "up" for the whole outage, and a
connection that sends half a frame or no Hello holds its buffer forever. One task
per connection sleeps until the nearest deadline; the receive loop only records
what it heard (`Liveness.heard`), so nothing is added to the per-message path.

When the peer has been quiet for `heartbeat_interval_s` the watchdog sends a Ping
(and again every interval while it stays quiet); any bytes count as life, a Pong
included. When a deadline passes, `watch` returns why, and the caller closes the
connection (a link then goes down: LINK_DOWN and the UMAs take over).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from mrs.config.guards import Guards

_nonces = itertools.count(1)


@dataclass(eq=False)
class Liveness:
    """What the watchdog knows of a connection; its receive loop keeps it current."""

    opened_at: float = field(default_factory=trio.current_time)
    heard_at: float = field(default_factory=trio.current_time)
    pinged_at: float = float("-inf")
    frame_started_at: float | None = None
    """When the frame still unfinished in the receive buffer began to arrive."""
    handshake_done: bool = False

    def heard(self, buffered_bytes: int, frames: int) -> None:
        """Bytes arrived; `frames` complete frames were parsed, `buffered_bytes` wait."""
        now = trio.current_time()
        self.heard_at = now
        if buffered_bytes == 0:
            self.frame_started_at = None
        elif frames or self.frame_started_at is None:
            self.frame_started_at = now


def next_nonce() -> int:
    return next(_nonces)


async def watch(
    liveness: Liveness,
    guards: Guards,
    silence_s_max: float,
    send_ping: Callable[[], None],
) -> str:
    """Sleep until a deadline passes; return why the connection must close.

    silence_s_max: a client's idle limit or a link's silence limit; send_ping is called
    after each heartbeat interval of silence.
    """
    interval_s = guards.heartbeat_interval_s
    while True:
        now = trio.current_time()
        wake_at = [liveness.heard_at + silence_s_max]
        if now >= wake_at[0]:
            return (
                f"nothing heard for {now - liveness.heard_at:.1f} s "
                f"(silence limit {silence_s_max:g} s)"
            )
        if not liveness.handshake_done:
            due = liveness.opened_at + guards.handshake_s_max
            if now >= due:
                return f"no handshake within handshake_s_max={guards.handshake_s_max:g} s"
            wake_at.append(due)
        if liveness.frame_started_at is not None:
            due = liveness.frame_started_at + guards.frame_s_max
            if now >= due:
                return f"a frame stayed unfinished for frame_s_max={guards.frame_s_max:g} s"
            wake_at.append(due)
        if liveness.handshake_done:
            ping_at = max(liveness.heard_at, liveness.pinged_at) + interval_s
            if now >= ping_at:
                send_ping()
                liveness.pinged_at = now
                ping_at = now + interval_s
            wake_at.append(ping_at)
        await trio.sleep_until(min(wake_at))
