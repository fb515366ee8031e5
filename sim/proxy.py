"""A TCP fault proxy to place on a link: cut, heal, added latency, one-way blackhole.

It runs inside the caller's trio run (tests, `mrs demo`, `mrs sim`) and forwards
every accepted connection to the real peer as TCP would: a half-close is passed on,
and each direction holds at most one chunk, so a peer that never reads stops its
sender. `cut()` closes every connection it carries and refuses new ones until
`heal()`; `blackhole("forward")` silently drops what the dialer sends (or
"backward": what the peer answers, its end of stream too; no direction: both)
while the connection stays up, which is how a peer ends up storing a message whose
acknowledgement never arrives; `heal()` then drops the connections the blackhole
carried (their streams have bytes missing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import trio

DIRECTIONS = ("forward", "backward")
CHUNK_BYTES_MAX = 64 * 1024


@dataclass(eq=False)
class FaultProxy:
    listen_port: int
    target_port: int
    host: str = "127.0.0.1"
    latency_s: float = 0.0
    cuts: int = 0
    _blackholed: set[str] = field(default_factory=set)
    _cut: bool = False
    _scopes: set[trio.CancelScope] = field(default_factory=set)
    _connections_seen: int = 0

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.listen_port, host=self.host)
        task_status.started()
        await trio.serve_listeners(self._carry, listeners)

    def cut(self) -> None:
        """Drop every connection now and refuse new ones until heal()."""
        self._cut = True
        self.cuts += 1
        self._drop_all()

    def _drop_all(self) -> None:
        for scope in list(self._scopes):
            scope.cancel()

    def heal(self) -> None:
        """Let connections through again, and end a blackhole: a connection it carried
        lost bytes in the middle of its stream, which TCP never does, so it is dropped
        (as `cut()` drops one) and its peers dial again. Kept up, it went on with frames
        missing: the link stayed up with its transfers unanswered until the silence
        limit, and the later frames overtook the lost ones (the in-memory proxy of
        sim.membus and sim.memnet reset such connections too)."""
        self._cut = False
        if self._blackholed:
            self._blackholed.clear()
            self._drop_all()

    def blackhole(self, direction: str | None = None) -> None:
        """Silently drop bytes going one way ("forward": dialer -> peer), or both ways
        when no direction is given (a peer that lost power; `blackhole()`, as the
        in-memory bus's proxy is called, was a TypeError here)."""
        if direction is not None and direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}")
        self._blackholed.update(DIRECTIONS if direction is None else (direction,))

    @property
    def is_cut(self) -> bool:
        return self._cut

    async def _carry(self, inbound: trio.SocketStream) -> None:
        """Carry one connection. Its scope is known to `cut()` before the dial, so a
        connection whose dial was under way when the link was cut never carries a byte."""
        async with inbound:
            with trio.CancelScope() as scope:
                self._scopes.add(scope)
                try:
                    if self._cut:
                        return
                    try:
                        outbound = await trio.open_tcp_stream(self.host, self.target_port)
                    except OSError:
                        return
                    self._connections_seen += 1
                    async with outbound, trio.open_nursery() as nursery:
                        nursery.start_soon(
                            partial(self._pipe, inbound, outbound, "forward", nursery.cancel_scope)
                        )
                        nursery.start_soon(
                            partial(self._pipe, outbound, inbound, "backward", nursery.cancel_scope)
                        )
                finally:
                    self._scopes.discard(scope)

    async def _pipe(
        self,
        source: trio.SocketStream,
        sink: trio.SocketStream,
        direction: str,
        both: trio.CancelScope,
    ) -> None:
        """Copy one direction. Its end (a half-close) is passed on as TCP does, and the
        other direction goes on: a dialer that shuts its side after a request still
        gets the answer. A reset on either side ends both directions."""
        try:
            while True:
                data = await source.receive_some(CHUNK_BYTES_MAX)
                if not data:
                    if direction not in self._blackholed:
                        await sink.send_eof()
                    return
                if direction in self._blackholed:
                    continue
                if self.latency_s:
                    await trio.sleep(self.latency_s)
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            both.cancel()
