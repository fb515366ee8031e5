"""Read-ahead held across a reconnect, then a close, against a real `mrs serve` over
real sockets (docs/client-library.md "Read-ahead"): the connection is cut (a TCP proxy
closes both sides, or the server is stopped with SIGSTOP until the client's heartbeat
counts it lost, then continued), the client reconnects still holding the memory
messages it read ahead, and closes without getting them. The next reader must get
each of them at once (a poll, no lease or timeout to wait out), in order, once, and
not marked POSSDUPL: the application never saw them.

Before, the server forgot what it lent at the detach of the lost connection, so the
GiveBack the client sent at its close from its new connection was ignored and every
message held across the reconnect was lost: the next reader got nothing. The same for
a `connect` block left by an exception or a cancellation, and for the blocking client.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
from collections.abc import AsyncIterator, Iterator

import pytest
import trio
import trio.testing

from clients import (
    ConnectionLost,
    DeliveryMode,
    Message,
    NoMoreMessages,
    Status,
    connect,
    connect_sync,
)

WAIT_S = 30.0
"""Deadline for what the server process must do (a loaded 2-core CI machine)."""
COUNT = 10
HEARTBEAT_S = 0.2
"""The client's heartbeat: a stopped server is counted lost after 3 silent intervals."""


class CutProxy:
    """A TCP proxy to the server whose `cut` closes every connection through it, both
    sides, as a network that drops them; it keeps accepting new ones."""

    def __init__(self, address: str) -> None:
        self.target = address
        self.address = ""
        self.streams: list[trio.SocketStream] = []
        self.accepted = 0
        self.accepted_changed = trio.Event()
        self.gate = trio.Event()
        """Unset (`close_gate`): a connection accepted waits for it before it is relayed."""
        self.gate.set()

    def close_gate(self) -> None:
        self.gate = trio.Event()

    async def start(self, nursery: trio.Nursery) -> None:
        serve = functools.partial(trio.serve_tcp, host="127.0.0.1")
        (listener,) = await nursery.start(serve, self._handle, 0)
        self.address = f"127.0.0.1:{listener.socket.getsockname()[1]}"

    async def cut(self) -> None:
        for stream in self.streams:
            await stream.aclose()
        self.streams.clear()

    async def wait_accepted(self, count: int) -> None:
        while self.accepted < count:
            await self.accepted_changed.wait()

    async def _handle(self, client_side: trio.SocketStream) -> None:
        self.accepted += 1
        self.accepted_changed.set()
        self.accepted_changed = trio.Event()
        await self.gate.wait()
        host, port = self.target.rsplit(":", 1)
        server_side = await trio.open_tcp_stream(host, int(port))
        self.streams += [client_side, server_side]
        async with trio.open_nursery() as pair:
            pair.start_soon(_relay, client_side, server_side)
            pair.start_soon(_relay, server_side, client_side)


async def _relay(source: trio.SocketStream, sink: trio.SocketStream) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while data := await source.receive_some(1 << 16):
            await sink.send_all(data)
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await sink.aclose()


@contextlib.asynccontextmanager
async def _proxy(address: str) -> AsyncIterator[CutProxy]:
    async with trio.open_nursery() as nursery:
        proxy = CutProxy(address)
        await proxy.start(nursery)
        yield proxy
        nursery.cancel_scope.cancel()


async def _put_memory(address: str) -> None:
    """COUNT memory messages needing no confirm (lendable: read ahead) on ANYORDER."""
    async with connect(address, "SENDER2") as sender:
        for number in range(COUNT):
            psb = await sender.put(b"m%d" % number, "ANYORDER", delivery=DeliveryMode.WF_MEM)
            assert psb.status == Status.SUCCESS


async def _poll_all(address: str) -> list[Message]:
    """What the next reader gets without waiting: polls until NOMOREMSG."""
    got: list[Message] = []
    async with connect(address, "ANYORDER", read_ahead_max=0) as reader:
        with contextlib.suppress(NoMoreMessages):
            while len(got) <= COUNT:
                got.append(await reader.get(timeout=0))
    return got


def _check_given_back(got: list[Message]) -> None:
    """Every message the closed client held is waiting again, in order, once, and not
    marked POSSDUPL (the application never saw it)."""
    assert [message.body for message in got] == [b"m%d" % n for n in range(1, COUNT)]
    assert [message.delivery_status for message in got] == [Status.SUCCESS] * (COUNT - 1)


async def _held_across_a_cut(proxy: CutProxy, q) -> None:
    """Get one (the others read ahead), cut the connection, wait for the reconnect."""
    first = await q.get(timeout=WAIT_S)
    assert first.body == b"m0"
    assert [message.body for message in q.held] == [b"m%d" % n for n in range(1, COUNT)]
    await proxy.cut()
    await proxy.wait_accepted(2)  # the client noticed and dialed again
    await q.wait_connected()
    assert len(q.held) == COUNT - 1  # still held for the next gets


async def test_read_ahead_held_across_a_cut_is_given_back_at_close(bus) -> None:
    await _put_memory(bus.address)
    async with _proxy(bus.address) as proxy:
        with trio.fail_after(WAIT_S):
            async with connect(proxy.address, "ANYORDER") as q:
                await _held_across_a_cut(proxy, q)
    _check_given_back(await _poll_all(bus.address))


class _LeftByError(Exception):
    """The application's own error, leaving the connect block."""


@pytest.mark.parametrize("how", ["exception", "cancellation"])
async def test_a_connect_block_left_abruptly_after_a_cut_gives_back_too(bus, how: str) -> None:
    """The block ends by the application's exception, or a cancel scope around it is
    cancelled: the close still gives back what the client held across the cut."""
    await _put_memory(bus.address)
    async with _proxy(bus.address) as proxy:
        with (
            trio.fail_after(WAIT_S),
            contextlib.suppress(_LeftByError),
            trio.CancelScope() as scope,
        ):
            async with connect(proxy.address, "ANYORDER") as q:
                await _held_across_a_cut(proxy, q)
                if how == "exception":
                    raise _LeftByError
                scope.cancel()
                await trio.sleep_forever()
    _check_given_back(await _poll_all(bus.address))


@contextlib.contextmanager
def _stopped(bus) -> Iterator[None]:
    """The server process stopped (SIGSTOP), continued at the end whatever happens."""
    pid = bus.process.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_read_ahead_held_across_a_stopped_server_is_given_back_at_close(bus) -> None:
    """kill -STOP: the client counts the silent server lost, reconnects once it is
    continued (QUEUE_BUSY until the server has detached the old connection), closes."""
    await _put_memory(bus.address)
    with trio.fail_after(WAIT_S):
        async with connect(bus.address, "ANYORDER", heartbeat_s=HEARTBEAT_S) as q:
            assert (await q.get(timeout=WAIT_S)).body == b"m0"
            assert len(q.held) == COUNT - 1
            with _stopped(bus), pytest.raises(ConnectionLost):
                await q.pending(["ANYORDER"])  # no answer: the heartbeat counts it lost
            await q.wait_connected()
            assert len(q.held) == COUNT - 1
    _check_given_back(await _poll_all(bus.address))


def test_the_blocking_client_gives_back_what_it_held_across_a_stopped_server(bus) -> None:
    trio.run(_put_memory, bus.address)
    with connect_sync(bus.address, "ANYORDER", heartbeat_s=HEARTBEAT_S) as q:
        assert q.get(timeout=WAIT_S).body == b"m0"  # the other nine read ahead
        with _stopped(bus), pytest.raises(ConnectionLost):
            q.pending(["ANYORDER"])
        q.wait_connected(WAIT_S)
    _check_given_back(trio.run(_poll_all, bus.address))


async def test_held_messages_got_after_the_reconnect_are_not_given_back(bus) -> None:
    """What the application got after the reconnect stays got: only the rest comes
    back, so nothing is delivered twice."""
    await _put_memory(bus.address)
    async with _proxy(bus.address) as proxy:
        with trio.fail_after(WAIT_S):
            async with connect(proxy.address, "ANYORDER") as q:
                await _held_across_a_cut(proxy, q)
                got = [(await q.get(timeout=WAIT_S)).body for _ in range(4)]
    assert got == [b"m1", b"m2", b"m3", b"m4"]
    rest = await _poll_all(bus.address)
    assert [message.body for message in rest] == [b"m%d" % n for n in range(5, COUNT)]
    assert {message.delivery_status for message in rest} == {Status.SUCCESS}


async def test_a_close_while_reconnecting_waits_for_the_connection_to_give_back(bus) -> None:
    """The block ends while the client is still dialing again after the cut (the
    proxy holds the new connection): the close waits for it (within GIVE_BACK_WAIT_S)
    and gives back on it. Before, a close with no connection gave back nothing."""
    await _put_memory(bus.address)
    async with _proxy(bus.address) as proxy, trio.open_nursery() as nursery:
        with trio.fail_after(WAIT_S):
            async with connect(proxy.address, "ANYORDER") as q:
                assert (await q.get(timeout=WAIT_S)).body == b"m0"
                proxy.close_gate()
                await proxy.cut()
                await proxy.wait_accepted(2)  # dialing again: no connection now
                assert not q.connected and len(q.held) == COUNT - 1
                nursery.start_soon(_open_when_all_wait, proxy)
    _check_given_back(await _poll_all(bus.address))


async def _open_when_all_wait(proxy: CutProxy) -> None:
    """Let the new connection through once every task here waits (the close among
    them, waiting for it)."""
    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
    proxy.gate.set()
