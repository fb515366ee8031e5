"""Who may open a connection: a token bucket and a connection cap per peer address.

Why: a flood of junk connections from one address costs the server an accept, a
task and a buffer each; unbounded, it took a well-behaved producer from 8.7k to
2.3k puts/s. A peer that opens connections faster than `accepts_per_s` (after a
burst of `accept_burst`), or holds more than `connections_per_peer_max` open, has
the new connection closed at once, and a log line. Other peers are not affected.
All peers together hold at most the server's descriptors less those it keeps for
itself, and one peer at most half of that (mrs.transport.open_files): one address
can no longer take every descriptor from the others and from the server's own files.

The refused connection is told why with a Fatal frame (EXCEEDQUOTA) at most once
per `ADMISSION_ANSWER_INTERVAL_S` per peer, and otherwise just closed: measured under a flood,
writing that frame cost several times more than accepting and closing the
connection, so answering every junk connection would do the flood's work for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mrs.config.guards import Guards
from mrs.limits import ADMISSION_ANSWER_INTERVAL_S, ADMISSION_PEERS_MAX, OPEN_FILES_KEPT_MIN
from mrs.transport.open_files import connections_max


@dataclass(slots=True)
class _Peer:
    tokens: float
    refilled_at: float
    open: int = 0
    answered_at: float = float("-inf")


class Admission:
    """Decides per accepted connection; `release` when it closes."""

    def __init__(
        self,
        guards: Guards,
        clock_s: Callable[[], float],
        connections_max: Callable[[], int] = connections_max,
    ) -> None:
        self.guards = guards
        self.clock_s = clock_s
        self.connections_max = connections_max
        self.open = 0
        """Connections admitted and not yet released, of all peers."""
        self._peers: dict[str, _Peer] = {}

    def admit(self, host: str) -> str | None:
        """None to admit a connection from `host` (then call release), or why not."""
        guards = self.guards
        now = self.clock_s()
        peer = self._peers.get(host)
        if peer is None:
            if len(self._peers) >= ADMISSION_PEERS_MAX:
                self._forget_idle()
            peer = self._peers[host] = _Peer(float(guards.accept_burst), now)
        else:
            self._refill(peer)
        if (full := self._full(peer, host)) is not None:
            return full
        if peer.tokens < 1.0:
            return (
                f"connections from {host} arrive faster than accepts_per_s="
                f"{guards.accepts_per_s:g} (accept_burst={guards.accept_burst})"
            )
        peer.tokens -= 1.0
        peer.open += 1
        self.open += 1
        return None

    def _full(self, peer: _Peer, host: str) -> str | None:
        """Why `host` may not open one more connection now, or None."""
        all_max = self.connections_max()
        if self.open >= all_max:
            return (
                f"{self.open} connections open in all: the server keeps {OPEN_FILES_KEPT_MIN} "
                f"of its {all_max + OPEN_FILES_KEPT_MIN} descriptors (ulimit -n) for its own files"
            )
        peer_max = min(self.guards.connections_per_peer_max, max(1, all_max // 2))
        if peer.open >= peer_max:
            return (
                f"{peer.open} connections open from {host} "
                f"(connections_per_peer_max={self.guards.connections_per_peer_max}, "
                f"half the server's {all_max} connections at most)"
            )
        return None

    def refused_unanswered(self, host: str) -> str | None:
        """Why admit() would refuse `host` and should_answer() say nothing, or None.

        For the accept loop: such a connection is closed before any task exists for
        it. Anything else (admitted, or refused with an answer) goes on to admit()."""
        peer = self._peers.get(host)
        if peer is None or self.clock_s() - peer.answered_at >= ADMISSION_ANSWER_INTERVAL_S:
            return None
        if self._full(peer, host) is not None:
            return f"{peer.open} connections open from {host}"
        self._refill(peer)
        if peer.tokens < 1.0:
            return f"connections from {host} arrive faster than accepts_per_s"
        return None

    def _refill(self, peer: _Peer) -> None:
        now = self.clock_s()
        refill = (now - peer.refilled_at) * self.guards.accepts_per_s
        peer.tokens = min(float(self.guards.accept_burst), peer.tokens + refill)
        peer.refilled_at = now

    def should_answer(self, host: str) -> bool:
        """True if a refused connection from `host` is to get a Fatal frame (at most
        one per ADMISSION_ANSWER_INTERVAL_S); call after admit() refused it."""
        peer = self._peers.get(host)
        if peer is None:
            return True
        now = self.clock_s()
        if now - peer.answered_at < ADMISSION_ANSWER_INTERVAL_S:
            return False
        peer.answered_at = now
        return True

    def release(self, host: str) -> None:
        peer = self._peers.get(host)
        if peer is not None and peer.open > 0:
            peer.open -= 1
            self.open -= 1

    def open_connections(self, host: str) -> int:
        peer = self._peers.get(host)
        return peer.open if peer is not None else 0

    def _forget_idle(self) -> None:
        """Drop peers with nothing open (their bucket refills to full anyway in time)."""
        self._peers = {host: peer for host, peer in self._peers.items() if peer.open}
