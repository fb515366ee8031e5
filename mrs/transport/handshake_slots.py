"""Handshakes in progress, bounded per host and in all: at a bound the oldest gives way.

Why eviction and not refusal: a slot is held from accept to the end of the handshake
(TLS, authentication, the Hello), and a socket that sends nothing holds it as long as
a slow client would. Refusing new connections at the bound let 64 silent sockets,
renewed every 10 s, lock every other TLS client of their host out (and 16 hosts
everyone). Here a new connection is always let in; at a bound, the oldest handshake
of its host (or of everyone) is ended through its cancel scope. A real handshake
takes milliseconds, so the oldest are the idle ones; to push out one in progress,
an attacker must open a whole bound's worth of connections during it. Used by the
TLS listener (mrs.security.tls_network) and by the server for the protocol's own
handshake (mrs.server.connections).
"""

from __future__ import annotations

import trio


class Slot:
    """One handshake in progress: its host and the cancel scope that ends it."""

    __slots__ = ("evicted_because", "host", "scope")

    def __init__(self, host: str, scope: trio.CancelScope) -> None:
        self.host = host
        self.scope = scope
        self.evicted_because: str | None = None


class HandshakeSlots:
    """Handshakes in progress, oldest first, bounded per host and in all."""

    def __init__(self, per_host_max: int, total_max: int) -> None:
        self.per_host_max = per_host_max
        self.total_max = total_max
        self._all: dict[Slot, None] = {}
        """Every slot, in the order taken (dicts keep it): the first is the oldest."""
        self._by_host: dict[str, dict[Slot, None]] = {}
        self.evicted = 0

    def take(self, host: str, scope: trio.CancelScope) -> Slot:
        """A slot for a new handshake from `host`, making the oldest give way (its
        scope cancelled) if `host` or everyone is at the bound."""
        mine = self._by_host.setdefault(host, {})
        if len(mine) >= self.per_host_max:
            self._evict(next(iter(mine)), f"{self.per_host_max} handshakes from {host}")
        elif len(self._all) >= self.total_max:
            self._evict(next(iter(self._all)), f"{self.total_max} handshakes")
        slot = Slot(host, scope)
        mine[slot] = None
        self._all[slot] = None
        return slot

    def give_back(self, slot: Slot) -> None:
        """The handshake ended (done, failed or evicted); idempotent."""
        if slot not in self._all:
            return
        del self._all[slot]
        mine = self._by_host[slot.host]
        del mine[slot]
        if not mine:
            del self._by_host[slot.host]

    def in_progress(self, host: str | None = None) -> int:
        return len(self._all if host is None else self._by_host.get(host, ()))

    def _evict(self, slot: Slot, bound: str) -> None:
        slot.evicted_because = f"{bound} in progress: the oldest gave way to a new connection"
        slot.scope.cancel()
        self.give_back(slot)
        self.evicted += 1
