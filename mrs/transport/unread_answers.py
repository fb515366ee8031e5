"""What answers left unread may hold in all: a bound, the connection holding most closed.

Why: a client that sends requests and reads none of their answers holds up to
OUTBOX_BYTES_HIGH (8 MiB) of them in the server before its requests are no longer
read, more when they are answered later (up to requests_in_flight_max StatusReplies,
or `connection_bytes_max` of messages its parked gets took). Each connection was
bounded, but not the sum: 8 connections sending StatusRequests and reading nothing
grew the server by 176 MB until `client_idle_s_max` closed them (a thousand from one
address, within `connections_per_peer_max`, some 20 GB). Here the bytes every
connection left unread (queued, or in a write its peer does not take) are counted
together; past the bound the connection holding the most is closed
(`Fatal(EXCEEDQUOTA)`, what it left unread dropped). A client that reads holds next
to nothing here, so it is never the one closed.

A connection's count is refreshed when it grew by UNREAD_ANSWERS_NOTE_BYTES_MIN
since it was last counted (`mrs.server.session.ServerSession.send`), when a write
ends, and at each receive: between those it may be counted low by less than that,
or high until its next write or read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Holder(Protocol):
    """A connection as this table sees it (mrs.server.session.ServerSession)."""

    unread_bytes: int
    """Bytes of its unread answers counted here (kept by this table)."""

    @property
    def evicted_because(self) -> object:
        """Not None once evicted: it is closing, and counts no more."""
        ...

    def drop_queued(self) -> None:
        """Forget every frame queued and not yet handed to the stream."""
        ...

    def evict(self, limit: str, why: str) -> None:
        """Close it for `why` (a bound of `limit`)."""
        ...


class UnreadAnswers:
    """Counts the bytes of answers every connection of a group left unread."""

    def __init__(self, bytes_max: int, let_go: Callable[[int], None] | None = None) -> None:
        self.bytes_max = bytes_max
        self._let_go = let_go
        """Told the bytes a closed connection's unread answers held (the heap trim of
        mrs.transport.partial_frames: glibc keeps freed blocks otherwise)."""
        self.total_bytes = 0
        self._holders: dict[Holder, None] = {}

    def hold(self, holder: Holder, unread_bytes: int) -> None:
        """`holder` now leaves `unread_bytes` unread; past the bound, the holders with
        the most are closed (`holder` too, when it holds most)."""
        if holder.evicted_because is not None:
            return
        self.total_bytes += unread_bytes - holder.unread_bytes
        holder.unread_bytes = unread_bytes
        if unread_bytes:
            self._holders[holder] = None
        else:
            self._holders.pop(holder, None)
        while self.total_bytes > self.bytes_max and self._holders:
            largest = max(self._holders, key=lambda other: other.unread_bytes)
            why = (
                f"{largest.unread_bytes} bytes of answers unread, {self.total_bytes} in all "
                f"(answers_unread_bytes_max={self.bytes_max}): the connection holding most "
                "is closed"
            )
            held_bytes = largest.unread_bytes
            self.forget(largest)
            largest.drop_queued()
            if self._let_go is not None:
                self._let_go(held_bytes)
            largest.evict("answers_unread_bytes_max", why)

    def forget(self, holder: Holder) -> None:
        """`holder` is closing: its bytes no longer count."""
        self.total_bytes -= holder.unread_bytes
        holder.unread_bytes = 0
        self._holders.pop(holder, None)
