"""mrs.framed: frames queued together go out in one write; reads and handshakes are bounded."""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing

from mrs import protocol as wire
from mrs.framed import FramedStream, StreamClosed


async def tcp_pair(nursery: trio.Nursery) -> tuple[trio.SocketStream, trio.SocketStream]:
    """Two ends of a real TCP connection on localhost."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    client = await trio.testing.open_stream_to_socket_listener(listener)
    server = await listener.accept()
    await listener.aclose()
    return client, server


async def opened_pair(nursery: trio.Nursery) -> tuple[FramedStream, FramedStream]:
    """A client and a server FramedStream over TCP that have done their handshake."""
    a, b = await tcp_pair(nursery)
    client = FramedStream(a, wire.Connection("client"))
    server = FramedStream(b, wire.Connection("server"))
    await client.send_now(wire.Hello(wire.PROTOCOL_VERSION, "test"))
    assert await server.next_event(timeout_s=10) == wire.Hello(wire.PROTOCOL_VERSION, "test")
    await server.send_now(wire.Welcome(wire.PROTOCOL_VERSION, 1, "g1"))
    assert isinstance(await client.next_event(timeout_s=10), wire.Welcome)
    return client, server


async def test_frames_queued_together_are_written_in_one_batch_and_all_arrive():
    async with trio.open_nursery() as nursery:
        client, server = await opened_pair(nursery)
        requests = [wire.Get(i, 0) for i in range(1, 101)]
        for request in requests:
            client.send(request)
        assert client.outbox_bytes == 8 * len(requests)  # a Get frame is 8 bytes
        await client.wait_ready()
        batch = client.take()
        assert client.outbox_bytes == 0 and len(batch) == 800
        await client.stream.send_all(batch)
        received: list = []
        with trio.fail_after(10):
            while len(received) < 100:
                events, still_open = await server.receive_events()
                assert still_open
                received += events
        assert received == requests
        nursery.cancel_scope.cancel()


async def test_the_send_loop_writes_and_flushed_waits_for_it():
    async with trio.open_nursery() as nursery:
        client, server = await opened_pair(nursery)
        nursery.start_soon(server.send_loop)
        for i in range(1, 6):
            server.send(wire.Failure(i, -14, "x"))
        with trio.fail_after(10):
            await server.flushed()
            got = [await client.next_event() for _ in range(5)]
        assert [event.request_id for event in got] == [1, 2, 3, 4, 5]
        nursery.cancel_scope.cancel()


async def test_wait_drained_holds_a_reader_until_the_outbox_is_written():
    async with trio.open_nursery() as nursery:
        client, server = await opened_pair(nursery)
        for i in range(1, 101):
            server.send(wire.Failure(i, -14, "x" * 100))
        assert server.outbox_bytes > 10_000
        drained = trio.Event()

        async def reader() -> None:
            await server.wait_drained(1000)
            drained.set()

        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert not drained.is_set()  # nothing written yet: the reader waits
        nursery.start_soon(server.send_loop)
        with trio.fail_after(10):
            await drained.wait()
        assert server.outbox_bytes == 0
        nursery.cancel_scope.cancel()


async def test_next_event_has_a_deadline():
    async with trio.open_nursery() as nursery:
        _, server = await opened_pair(nursery)
        with pytest.raises(trio.TooSlowError):
            await server.next_event(timeout_s=0.05)  # the peer says nothing
        nursery.cancel_scope.cancel()


async def test_next_event_at_eof_is_stream_closed():
    async with trio.open_nursery() as nursery:
        client, server = await opened_pair(nursery)
        await client.stream.aclose()
        with pytest.raises(StreamClosed), trio.fail_after(10):
            await server.next_event()
        nursery.cancel_scope.cancel()


async def test_an_oversized_frame_is_refused_from_its_header():
    async with trio.open_nursery() as nursery:
        a, b = await tcp_pair(nursery)
        server = FramedStream(b, wire.Connection("server", frame_bytes_max=1000))
        await a.send_all(struct.pack(">I", 1001))  # the header alone; no body follows
        with pytest.raises(wire.RemoteProtocolError, match="exceeds frame_bytes_max 1000"):
            with trio.fail_after(10):
                await server.receive_events()
        nursery.cancel_scope.cancel()


async def test_sends_after_close_are_dropped():
    async with trio.open_nursery() as nursery:
        client, _ = await opened_pair(nursery)
        client.closed = True
        client.send(wire.Get(1, 0))
        assert client.outbox_bytes == 0
        nursery.cancel_scope.cancel()
