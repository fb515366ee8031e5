"""mrs.transport.framed: frames queued together go out in one write; reads and handshakes
are bounded."""

from __future__ import annotations

import contextlib
import os
import struct

import msgpack
import pytest
import trio
import trio.testing

from mrs import protocol as wire
from mrs.transport.framed import FramedStream, StreamClosed

HEADER = struct.Struct(">I")


async def tcp_pair(nursery: trio.Nursery) -> tuple[trio.SocketStream, trio.SocketStream]:
    """Two ends of a real TCP connection on localhost."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    client = await trio.testing.open_stream_to_socket_listener(listener)
    server = await listener.accept()
    await listener.aclose()
    return client, server


async def opened_pair(
    nursery: trio.Nursery, streams: tuple[trio.abc.Stream, trio.abc.Stream] | None = None
) -> tuple[FramedStream, FramedStream]:
    """A client and a server FramedStream (over TCP unless `streams` are given) that
    have done their handshake."""
    a, b = streams or await tcp_pair(nursery)
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
        assert client.outbox_bytes == 9 * len(requests)  # a Get frame is 9 bytes (select nil)
        await client.wait_ready()
        batch = client.take()
        assert client.outbox_bytes == 0 and len(batch) == 9 * len(requests)
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


async def test_write_now_hands_queued_frames_to_the_socket_without_the_send_loop():
    async with trio.open_nursery() as nursery:
        client, server = await opened_pair(nursery)  # no send loop runs on either side
        for i in range(1, 4):
            server.send(wire.Failure(i, -14, "x"))
        server.write_now()
        assert server.outbox_bytes == 0
        with trio.fail_after(10):
            got = [await client.next_event() for _ in range(3)]
        assert [event.request_id for event in got] == [1, 2, 3]
        nursery.cancel_scope.cancel()


async def test_write_now_keeps_what_the_socket_does_not_take_for_the_send_loop():
    async with trio.open_nursery() as nursery:
        client, server = await opened_pair(nursery)
        frames = 20_000  # ~4 MB: more than the socket buffers take while nobody reads
        for i in range(1, frames + 1):
            server.send(wire.Failure(i, -14, "x" * 200))
        server.write_now()
        left_bytes = server.outbox_bytes
        assert left_bytes > 0  # the rest waits in the outbox, in order
        nursery.start_soon(server.send_loop)
        with trio.fail_after(30):
            got = [await client.next_event() for _ in range(frames)]
        assert [event.request_id for event in got] == list(range(1, frames + 1))
        nursery.cancel_scope.cancel()


async def test_write_now_does_not_write_while_the_send_loop_is_inside_a_write():
    async with trio.open_nursery() as nursery:
        client, server = await opened_pair(nursery)
        nursery.start_soon(server.send_loop)
        frames = 20_000  # the send loop blocks mid-write: the client does not read yet
        for i in range(1, frames + 1):
            server.send(wire.Failure(i, -14, "x" * 200))
        await trio.testing.wait_all_tasks_blocked()
        assert server.outbox_bytes == 0  # taken by the send loop, still being written
        server.send(wire.Failure(frames + 1, -14, "last"))
        client_fd = client.stream.socket.fileno()  # type: ignore[attr-defined]
        data = bytearray()
        with contextlib.suppress(BlockingIOError):  # read all there is now, before the
            while True:  # send loop's next turn, so that the socket has room for a write
                data += os.read(client_fd, 1 << 16)
        assert len(data) > 1 << 16
        server.write_now()  # ... and still nothing jumps ahead of the send loop's bytes
        assert server.outbox_bytes > 0
        ids: list[int] = []
        with trio.fail_after(30):
            while len(ids) < frames + 1:
                data += await client.stream.receive_some(1 << 16)
                while len(data) >= 4 and len(data) >= 4 + (size := HEADER.unpack_from(data)[0]):
                    ids.append(msgpack.unpackb(bytes(data[4 : 4 + size]))[1])
                    del data[: 4 + size]
        assert ids == list(range(1, frames + 2))
        nursery.cancel_scope.cancel()


async def test_write_now_leaves_a_stream_that_is_not_a_plain_socket_to_its_send_loop():
    async with trio.open_nursery() as nursery:  # e.g. TLS: bytes must pass through it
        client, server = await opened_pair(nursery, trio.testing.memory_stream_pair())
        server.send(wire.Pong(1))
        server.write_now()
        assert server.outbox_bytes > 0
        nursery.start_soon(server.send_loop)
        with trio.fail_after(10):
            assert await client.next_event() == wire.Pong(1)
        nursery.cancel_scope.cancel()
