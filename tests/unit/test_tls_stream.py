"""mrs.transport.tls_stream: TLS whose writes reach the socket before they yield, over
real TCP sockets on 127.0.0.1 and certificates from `mrs certs`.

What a user of the replication link depends on: the handshake checks certificates
both ways and says why it failed; bytes arrive whole and in order, also when a
`send_nowait` leaves ciphertext the socket did not take; a write is on the socket
before its checkpoint (the reason the stream exists); a clean close reads as b"", a
cut connection as broken; one sender and one receiver at a time."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
import trio

from mrs import protocol as wire
from mrs.config.bus import load_config
from mrs.config.tls import TlsConfig, group_server_name
from mrs.tools.certs import make_certs
from mrs.transport.framed import FramedStream
from mrs.transport.tls_stream import TlsStream, tls_handshake
from tests.conftest import tcp_pair

BUS = '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n'
BUS_TWO = BUS + '[[group]]\nid = 2\nname = "LON"\nlisten = "127.0.0.1:0"\ndata_dir = "g2"\n'


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    (directory / "bus.toml").write_text(BUS_TWO)
    make_certs(load_config(directory / "bus.toml"), directory / "certs")
    return directory / "certs"


def group_tls(certs: Path, group_id: int) -> TlsConfig:
    name = f"group-{group_id}"
    return TlsConfig(certs / "ca.pem", certs / f"{name}.pem", certs / f"{name}.key")


async def tls_pair(certs: Path, server_group: int = 1) -> tuple[TlsStream, TlsStream]:
    """(dialer, server) after a mutual handshake; the dialer expects group 1."""
    dialed, accepted = await tcp_pair()
    server_context = group_tls(certs, server_group).mutual_server_context()
    dial_context = group_tls(certs, 1).dial_context()
    pair: dict[str, TlsStream] = {}

    async def serve() -> None:
        pair["server"] = await tls_handshake(accepted, server_context, server_side=True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        pair["dialer"] = await tls_handshake(
            dialed, dial_context, server_side=False, server_hostname=group_server_name(1)
        )
    return pair["dialer"], pair["server"]


async def receive_exactly(stream: TlsStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(1 << 16)
        assert chunk, "closed early"
        data += chunk
    return bytes(data)


async def test_bytes_arrive_whole_and_in_order_both_ways(certs: Path) -> None:
    dialer, server = await tls_pair(certs)
    assert group_server_name(1) in str(server.getpeercert())  # the client proved it
    body = bytes(range(256)) * 4096  # 1 MiB: many TLS records
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dialer.send_all, body)
        assert await receive_exactly(server, len(body)) == body
    await server.send_all(b"ack")
    assert await receive_exactly(dialer, 3) == b"ack"
    await dialer.aclose()
    assert await server.receive_some() == b""  # close_notify: a clean end
    await server.aclose()


async def test_a_write_is_on_the_socket_before_it_yields(certs: Path) -> None:
    """The reason for the stream: driven to its first yield, a send has already handed
    its record to the socket (trio's SSLStream yields first, to take a lock)."""
    dialer, server = await tls_pair(certs)
    sending = dialer.send_all(b"x" * 100)
    sending.send(None)  # up to its first yield: the checkpoint after the write
    sending.close()
    arrived = os.read(server.socket.fileno(), 1 << 16)  # nonblocking: there or not
    assert len(arrived) > 100  # the record, with TLS's framing
    await server.aclose()
    await dialer.aclose()


async def test_send_nowait_keeps_what_the_socket_left_for_the_next_send(certs: Path) -> None:
    """With the socket's buffer full, `send_nowait` keeps what the socket did not take
    and refuses more until a send_all has written it (its caller keeps the rest, in
    its own bounded outbox); the reader gets every byte in order."""
    dialer, server = await tls_pair(certs)
    record = bytes(range(256)) * 65536  # 16 MiB: beyond socket buffers
    assert dialer.send_nowait(record)
    assert dialer.unsent_bytes > 0, "the socket took it all at once: the test shows nothing"
    left = dialer.unsent_bytes
    assert not dialer.send_nowait(b"more")  # refused: at most one call's bytes wait
    assert dialer.unsent_bytes == left
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dialer.send_all, b"last")
        received = await receive_exactly(server, len(record) + 4)
    assert received == record + b"last"
    assert dialer.unsent_bytes == 0
    await dialer.aclose()
    await server.aclose()


async def test_one_sender_and_one_receiver_at_a_time(certs: Path) -> None:
    dialer, server = await tls_pair(certs)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dialer.receive_some)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.BusyResourceError):
            await dialer.receive_some()
        await server.send_all(b"x")  # the first receive ends
    await dialer.aclose()
    await server.aclose()


async def test_a_cut_connection_is_broken_not_a_clean_end(certs: Path) -> None:
    dialer, server = await tls_pair(certs)
    await dialer.transport_stream.aclose()  # gone without close_notify (a SIGKILL)
    with pytest.raises(trio.BrokenResourceError):
        await server.receive_some()
    with pytest.raises(trio.BrokenResourceError):
        await server.send_all(b"late")
    await server.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await server.receive_some()


async def test_a_certificate_of_another_group_fails_the_handshake_with_its_reason(
    certs: Path,
) -> None:
    """The dialer expects group 1 and meets group 2: a BrokenResourceError whose cause
    is the SSL verification error (what `describe_tls_error` words for the log)."""
    dialed, accepted = await tcp_pair()
    server_context = group_tls(certs, 2).mutual_server_context()

    async def serve() -> None:
        with pytest.raises(trio.BrokenResourceError):  # the dialer's alert
            await tls_handshake(accepted, server_context, server_side=True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        with pytest.raises(trio.BrokenResourceError) as failed:
            await tls_handshake(
                dialed,
                group_tls(certs, 1).dial_context(),
                server_side=False,
                server_hostname=group_server_name(1),
            )
    cause = failed.value.__cause__
    assert isinstance(cause, ssl.SSLCertVerificationError), repr(cause)
    assert "mrs-group-1" in str(cause)


async def test_an_answer_write_now_left_in_part_is_written_by_the_send_loop(certs: Path) -> None:
    """A server's answers go out at once (`FramedStream.write_now`) over TLS as over
    TCP; with the socket's buffer full, what it did not take is written by the send
    loop though nothing else is queued, and the reader gets every frame in order."""
    dialer, server = await tls_pair(certs)
    sender = FramedStream(dialer, wire.Connection("client"))
    reader = FramedStream(server, wire.Connection("server"))
    await sender.send_now(wire.Hello(wire.PROTOCOL_VERSION, "test"))
    assert isinstance(await reader.next_event(timeout_s=10), wire.Hello)
    body = b"b" * (256 << 10)
    puts = [wire.Put(n, "IN", body, 26, 2, 0, 0, 0, 0, b"", "") for n in range(1, 65)]  # 16 MiB
    for put in puts:
        sender.send(put)
    sender.write_now()  # nothing is queued after it: the send loop must write the rest
    assert dialer.unsent_bytes > 0, "the socket took it all at once: the test shows nothing"
    received: list = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender.send_loop)
        with trio.fail_after(30):
            while len(received) < len(puts):
                events, still_open = await reader.receive_events()
                assert still_open
                received += events
        nursery.cancel_scope.cancel()
    assert received == puts
    assert dialer.unsent_bytes == 0
