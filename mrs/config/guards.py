"""The `[group.guards]` table: heartbeats, idle and frame deadlines, memory and flood bounds.

Why a table of its own: these limits protect the server from its peers (a dead link
that never sends FIN, a client that parks a million gets, a flood of junk
connections), not messages from each other as `[group.limits]` does. Each key has a
default that a normal bus never reaches, is validated here when the config is
loaded, and is documented in docs/configuration.md. What each limit answers when it
is hit (a status and one log line) lives with the code that enforces it:
`mrs.transport.watchdog` (time), `mrs.transport.admission` (accepts) and
`mrs.server.group_server` (per connection).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from mrs.config.keys import unknown_key_problem
from mrs.limits import GUARD_BYTES_MAX, GUARD_COUNT_MAX, GUARD_SECONDS_MAX, GUARD_SECONDS_MIN


@dataclass(frozen=True, slots=True)
class Guards:
    """Per-group protection limits (all optional in the config file)."""

    heartbeat_interval_s: float = 5.0
    """After this long without a byte from the peer, send it a Ping (it answers Pong)."""
    link_silence_s_max: float = 15.0
    """A link that has heard nothing for this long is declared down (LINK_DOWN, UMAs)."""
    client_idle_s_max: float = 60.0
    """A client connection that has sent nothing, not even a Pong, for this long is closed."""
    handshake_s_max: float = 10.0
    """A connection must complete its Hello within this long of being accepted."""
    handshakes_max: int = 4096
    """Connections of all peers still at their handshake (authentication, Hello) at
    once; at the bound the oldest gives way to the new one (mrs.transport.handshake_slots)."""
    frame_s_max: float = 30.0
    """A frame that has begun to arrive must be complete within this long."""
    queue_bytes_max: int = 256 * 1024 * 1024
    """Bodies of nonrecoverable messages waiting in one queue's memory."""
    connection_bytes_max: int = 256 * 1024 * 1024
    """Bodies one connection has in the server's memory: unanswered puts and its
    nonrecoverable messages still waiting in queues."""
    partial_frames_bytes_max: int = 64 * 1024 * 1024
    """Bytes of unfinished frames of all connections together (at least two maximal
    frames); beyond it the connection stalled longest is closed (mrs.transport.partial_frames)."""
    answers_unread_bytes_max: int = 256 * 1024 * 1024
    """Bytes of answers all connections together leave unread; beyond it the
    connection holding most is closed (mrs.transport.unread_answers)."""
    parked_gets_max: int = 1000
    """Gets of one connection waiting for a message at once."""
    requests_in_flight_max: int = 10_000
    """Requests of one connection not yet answered (WF puts, parked gets, confirms)."""
    accepts_per_s: float = 100.0
    """New connections per second from one peer address (a token bucket)..."""
    accept_burst: int = 500
    """...with room for this many at once."""
    connections_per_peer_max: int = 1000
    """Open connections from one peer address."""


_FLOAT_KEYS = frozenset(f.name for f in fields(Guards) if f.type in ("float", float))
GUARD_KEYS = frozenset(f.name for f in fields(Guards))


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"{type(value).__name__} {value}"
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    if isinstance(value, list | dict):  # as TOML names them, as every other table says
        return "an array" if isinstance(value, list) else "a table"
    return type(value).__name__


def _seconds_problem(key: str, value: float) -> str | None:
    """Why a number is no value for `key`, or None. `accepts_per_s` is a rate, so any
    positive one; the others are deadlines and intervals: GUARD_SECONDS_MIN..a day
    (a microsecond silence limit loaded, and the group closed every link and client
    as silent the moment it opened)."""
    if key == "accepts_per_s":
        if not 0 < value <= GUARD_COUNT_MAX:
            return f"must be > 0 and <= {GUARD_COUNT_MAX:g}, got {value}"
        return None
    if not 0 < value <= GUARD_SECONDS_MAX:
        return f"must be > 0 and <= {GUARD_SECONDS_MAX:g}, got {value}"
    if value < GUARD_SECONDS_MIN:
        return (
            f"must be at least {GUARD_SECONDS_MIN:g} s (a loaded host's scheduling delay "
            f"alone is longer), got {value:g}"
        )
    return None


def parse_guards(raw: Any) -> Guards | tuple[str, str]:
    """Guards from the TOML table, or (key, problem) for the first fault found.

    The caller (mrs.config.bus) turns a problem into its one-line ConfigError.
    """
    if raw is None:
        return Guards()
    if not isinstance(raw, dict):
        return "", f"must be a table ([group.guards]), got {_describe(raw)}"
    for key in raw:
        if key not in GUARD_KEYS:
            return key, unknown_key_problem(key, GUARD_KEYS)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _FLOAT_KEYS:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return key, f"must be a number, got {_describe(value)}"
            problem = _seconds_problem(key, value)
            if problem is not None:
                return key, problem
            values[key] = float(value)
        else:
            high = GUARD_BYTES_MAX if key.endswith("_bytes_max") else GUARD_COUNT_MAX
            if isinstance(value, bool) or not isinstance(value, int):
                return key, f"must be an integer, got {_describe(value)}"
            if not 1 <= value <= high:
                return key, f"must be in 1..{high}, got {value}"
            values[key] = value
    guards = Guards(**values)
    for key in ("link_silence_s_max", "client_idle_s_max"):
        if getattr(guards, key) <= guards.heartbeat_interval_s:
            return key, (
                f"must be longer than heartbeat_interval_s ({guards.heartbeat_interval_s:g}), "
                f"got {getattr(guards, key):g}: a live peer gets a Ping before it is given up"
            )
    return guards
