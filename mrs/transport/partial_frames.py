"""What unfinished frames may hold in all: a bound, the connection stalled longest closed.

Why: a connection holds the frame it is receiving until the last byte arrives, up to
the frame limit (about 1 MiB by default). Each connection was bounded, and the
connections of one address, but not the sum: 400 connections each sending all but
one byte of a maximal frame held 456 MB of server memory for `frame_s_max`. Here the
bytes of every unfinished frame are counted together; past the bound the connection
whose frame has waited longest for a byte is closed (`Fatal(EXCEEDQUOTA)`), so a
sender that stalls gives way to one that is still sending, whoever came first.

Why the heap trim: glibc keeps the blocks such buffers leave behind, so the memory
stayed with the process (524 MB after the 400 closed). Once enough of them were let
go, `heap.trim` gives the pages back, at most once per `HEAP_TRIM_INTERVAL_S` (a
trim walks the heap: milliseconds, off the per-message path).
"""

from __future__ import annotations

from typing import Protocol

import trio

from mrs.core import heap
from mrs.limits import HEAP_TRIM_INTERVAL_S, HEAP_TRIM_RELEASED_BYTES_MIN


class Holder(Protocol):
    """A connection as this table sees it (mrs.server.session.ServerSession)."""

    partial_bytes: int
    """Bytes of its unfinished frame counted here (kept by this table)."""
    evicted_because: object
    """Not None once evicted: it is closing, and counts no more."""

    def stalled_since(self) -> float:
        """When its last bytes arrived."""
        ...

    def evict(self, limit: str, why: str) -> None:
        """Close it for `why` (a bound of `limit`); it lets go of its bytes as it ends."""
        ...


class PartialFrames:
    """Counts the bytes of unfinished frames of every connection of a group."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.total_bytes = 0
        self.evicted = 0
        self._holders: dict[Holder, None] = {}
        self._released_bytes = 0
        """Bytes of unfinished frames let go (closed, evicted) since the last trim."""
        self._trim_wanted = trio.Event()

    def hold(self, holder: Holder, buffered_bytes: int) -> None:
        """`holder` now has `buffered_bytes` of an unfinished frame; past the bound,
        the holders stalled longest are evicted (never `holder`, which just sent).

        An evicted holder may still finish a receive before it closes: it is not
        counted again (else it would evict others on its way out)."""
        if holder.evicted_because is not None:
            return
        self.total_bytes += buffered_bytes - holder.partial_bytes
        holder.partial_bytes = buffered_bytes
        if buffered_bytes:
            self._holders[holder] = None
        else:
            self._holders.pop(holder, None)
        while self.total_bytes > self.bytes_max and len(self._holders) > 1:
            stalled = min(
                (other for other in self._holders if other is not holder),
                key=lambda other: other.stalled_since(),
            )
            why = (
                f"unfinished frames hold {self.total_bytes} bytes in all "
                f"(partial_frames_bytes_max={self.bytes_max}): the one stalled longest is closed"
            )
            self.forget(stalled)
            stalled.evict("partial_frames_bytes_max", why)
            self.evicted += 1

    def forget(self, holder: Holder) -> None:
        """`holder` is closing: its bytes no longer count (and are to be let go)."""
        if holder.partial_bytes:
            self.total_bytes -= holder.partial_bytes
            self.let_go(holder.partial_bytes)
            holder.partial_bytes = 0
        self._holders.pop(holder, None)

    def let_go(self, size_bytes: int) -> None:
        """Buffers of `size_bytes` are let go (an unfinished frame, or answers a
        connection left unread, mrs.transport.unread_answers): the heap is trimmed
        once enough were."""
        self._released_bytes += size_bytes
        if self._released_bytes >= HEAP_TRIM_RELEASED_BYTES_MIN:
            self._trim_wanted.set()

    async def trim_loop(self) -> None:
        """Give the heap's free pages back once enough unfinished frames were let go,
        at most once per HEAP_TRIM_INTERVAL_S. Runs until cancelled."""
        while True:
            await self._trim_wanted.wait()
            await trio.sleep(0)  # let the closing connection drop its buffer first
            self._trim_wanted = trio.Event()
            self._released_bytes = 0
            heap.trim()
            await trio.sleep(HEAP_TRIM_INTERVAL_S)
