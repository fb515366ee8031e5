"""`mrs.transport.plain_socket.receive_plain`, the servers' and clients' read of a plain TCP
connection, must behave as `trio.SocketStream.receive_some` does in every case a
connection meets: data, a wait for data, EOF, a reset, a socket closed before or
during the read, and a caller cancelled while data is there. Each case runs against
both on real sockets, so a difference shows as one of them failing."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from mrs.transport.plain_socket import receive_plain, send_all_plain

MAX_BYTES = 65536


async def _plain(stream: trio.SocketStream) -> bytes:
    return await receive_plain(stream.socket, MAX_BYTES)


async def _trio(stream: trio.SocketStream) -> bytes:
    return bytes(await stream.receive_some(MAX_BYTES))


READS = pytest.mark.parametrize("read", [_plain, _trio], ids=["receive_plain", "receive_some"])


async def _plain_send(stream: trio.SocketStream, data: bytes | bytearray) -> None:
    await send_all_plain(stream.socket, data)


async def _trio_send(stream: trio.SocketStream, data: bytes | bytearray) -> None:
    await stream.send_all(data)


WRITES = pytest.mark.parametrize(
    "write", [_plain_send, _trio_send], ids=["send_all_plain", "send_all"]
)


async def _pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """Two ends of a real TCP connection on the loopback."""
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = trio.socket.socket()
    await client.connect(listener.getsockname())
    server, _ = await listener.accept()
    listener.close()
    return trio.SocketStream(client), trio.SocketStream(server)


@READS
async def test_what_is_there_is_read_and_eof_reads_empty(read) -> None:
    ours, peer = await _pair()
    await peer.send_all(b"frame bytes")
    assert await read(ours) == b"frame bytes"
    await peer.aclose()
    assert await read(ours) == b""


@READS
async def test_a_read_waits_for_data_to_come(read) -> None:
    ours, peer = await _pair()
    got: list[bytes] = []
    async with trio.open_nursery() as nursery:

        async def reader() -> None:
            got.append(await read(ours))

        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []  # parked: nothing was there
        await peer.send_all(b"late")
    assert got == [b"late"]


@READS
async def test_a_cancelled_caller_is_cancelled_even_with_data_there(read) -> None:
    ours, peer = await _pair()
    await peer.send_all(b"kept for the next read")
    with trio.CancelScope() as scope:
        scope.cancel()
        await read(ours)
    assert scope.cancelled_caught
    assert await read(ours) == b"kept for the next read"


@READS
async def test_a_reset_connection_is_broken(read) -> None:
    ours, peer = await _pair()
    # SO_LINGER 0: closing sends a RST, the read sees ECONNRESET
    peer.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    peer.socket.close()
    await trio.testing.wait_all_tasks_blocked()
    with pytest.raises(trio.BrokenResourceError, match="socket connection broken"):
        while await read(ours):
            pass


@READS
async def test_a_socket_closed_before_the_read_is_closed(read) -> None:
    ours, _peer = await _pair()
    ours.socket.close()
    with pytest.raises(trio.ClosedResourceError):
        await read(ours)


@READS
async def test_a_socket_closed_during_the_read_wakes_it_closed(read) -> None:
    ours, _peer = await _pair()
    raised: list[BaseException] = []
    async with trio.open_nursery() as nursery:

        async def reader() -> None:
            try:
                await read(ours)
            except trio.ClosedResourceError as error:
                raised.append(error)

        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        ours.socket.close()
    assert len(raised) == 1


async def _read_exactly(stream: trio.SocketStream, size_bytes: int) -> bytes:
    got = bytearray()
    while len(got) < size_bytes:
        chunk = await stream.receive_some(MAX_BYTES)
        assert chunk, "EOF before every byte came"
        got += chunk
    return bytes(got)


@WRITES
async def test_every_byte_is_sent_in_order_even_beyond_the_socket_buffer(write) -> None:
    ours, peer = await _pair()
    data = bytearray(range(256)) * 40_000  # ~10 MB: the write must wait for room
    got: list[bytes] = []
    async with trio.open_nursery() as nursery:

        async def reader() -> None:
            got.append(await _read_exactly(peer, len(data)))

        nursery.start_soon(reader)
        await write(ours, data)
    assert got == [bytes(data)]
    data += b"the buffer can grow again"  # no view of it is left held


@WRITES
async def test_a_cancelled_writer_is_cancelled_before_sending(write) -> None:
    ours, peer = await _pair()
    with trio.CancelScope() as scope:
        scope.cancel()
        await write(ours, b"never sent")
    assert scope.cancelled_caught
    await write(ours, b"sent")
    assert await _read_exactly(peer, 4) == b"sent"


@WRITES
async def test_a_write_to_a_reset_connection_is_broken(write) -> None:
    ours, peer = await _pair()
    peer.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    peer.socket.close()
    # on the loopback the RST has arrived once close() returns: the first write meets it
    with pytest.raises(trio.BrokenResourceError, match="socket connection broken"):
        await write(ours, b"x" * 1024)


@WRITES
async def test_a_write_on_a_closed_socket_or_after_eof_is_closed(write) -> None:
    ours, _peer = await _pair()
    await ours.send_eof()
    with pytest.raises(trio.ClosedResourceError, match="after sending EOF"):
        await write(ours, b"x")
    other, _other_peer = await _pair()
    other.socket.close()
    with pytest.raises(trio.ClosedResourceError):
        await write(other, b"x")
    with pytest.raises(trio.ClosedResourceError):
        await write(other, b"")
