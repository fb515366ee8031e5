"""A session's late answers: a commit answers requests after the fact, and a peer may
break the protocol (killed mid-frame) before its session is closed. The answer must be
dropped, not raised inside the commit loop: that stopped the whole group (found by
tests/process/test_link_faults.py, which kills groups under traffic)."""

from __future__ import annotations

import pytest

from mrs import protocol as wire
from mrs.protocol.checks import PROTOCOL_VERSION
from mrs.server.session import ServerSession


def _session_with_a_put_in_flight() -> tuple[ServerSession, bytes]:
    """A server session that got a client's Hello and one Put; and the bytes of a
    second Put the client was sending."""
    client = wire.Connection("client")
    hello = client.send(wire.Hello(PROTOCOL_VERSION, "test"))
    server = wire.Connection("server")
    server.receive_data(hello)
    assert isinstance(server.events()[0], wire.Hello)
    session = ServerSession(stream=None, connection=server)  # type: ignore[arg-type]
    session.send(wire.Welcome(PROTOCOL_VERSION, 1, "G1"))
    attach = client.send(wire.Attach(1, "OUT"))
    put = client.send(wire.Put(2, "IN", b"x", 26, 2, 0, 0, 0, 0, b"", ""))
    later = client.send(wire.Put(3, "IN", b"y", 26, 2, 0, 0, 0, 0, b"", ""))
    server.receive_data(attach + put)
    assert [type(event) for event in server.events()] == [wire.Attach, wire.Put]
    session.send(wire.Attached(1, 1, 11))
    return session, later


async def test_an_answer_is_queued_while_the_connection_is_sound() -> None:
    session, _ = _session_with_a_put_in_flight()
    before = session.outbox_bytes
    session.send(wire.PutDone(2, 1, 1, 7, 1))
    assert session.outbox_bytes > before


async def test_a_late_answer_to_a_peer_that_broke_mid_frame_is_dropped() -> None:
    session, later = _session_with_a_put_in_flight()
    server = session.connection
    server.receive_data(later[:5])  # the peer was killed in the middle of a frame
    server.receive_data(b"")
    with pytest.raises(wire.ProtocolError, match="closed mid-frame"):
        server.events()
    before = session.outbox_bytes
    session.send(wire.PutDone(2, 1, 1, 7, 1))  # the commit's answer comes now
    assert session.outbox_bytes == before
    assert server.can_send(wire.Fatal(1, "closing")) and not server.can_send(
        wire.PutDone(2, 1, 1, 7, 1)
    )


async def test_nothing_is_queued_once_a_fatal_closed_the_connection() -> None:
    session, _ = _session_with_a_put_in_flight()
    session.send(wire.Fatal(-1, "closing"))
    assert session.connection.closed
    before = session.outbox_bytes
    session.send(wire.PutDone(2, 1, 1, 7, 1))
    assert session.outbox_bytes == before


async def test_a_dialed_link_drops_what_its_closed_connection_cannot_carry() -> None:
    """The dialing side of a link answers after commits too (LinkAck, the next
    LinkTransfer): the same rule as a server session's."""
    from mrs.group.link_driver import DialedChannel

    channel = DialedChannel(stream=None, connection=wire.Connection("client"))  # type: ignore[arg-type]
    channel.connection.receive_data(wire.Connection("server").send(wire.Fatal(-1, "bye")))
    assert isinstance(channel.connection.events()[0], wire.Fatal)
    assert channel.connection.closed
    before = channel.outbox_bytes
    channel.send(wire.Pong(7))
    assert channel.outbox_bytes == before


async def test_an_event_over_the_frame_limit_ends_its_connection_not_the_group(caplog) -> None:
    """A message stored before headers were bounded (mrs.limits.HEADERS_BYTES_MAX)
    made a delivery larger than any frame: LocalProtocolError rose in the commit loop
    that made it, and the whole group stopped. That one connection is evicted now."""
    import trio

    client = wire.Connection("client")
    server = wire.Connection("server", frame_bytes_max=4096)
    server.receive_data(client.send(wire.Hello(PROTOCOL_VERSION, "test")))
    server.events()
    session = ServerSession(stream=None, connection=server)  # type: ignore[arg-type]
    session.scope = trio.CancelScope()
    session.send(wire.Welcome(PROTOCOL_VERSION, 1, "G1"))
    before = session.outbox_bytes
    session.send(wire.StatusReply(1, {"blob": "x" * 5000}))  # the commit loop's call
    assert session.outbox_bytes == before
    assert session.scope.cancel_called
    assert (
        session.evicted_because is not None
        and "exceeds frame_bytes_max 4096" in (session.evicted_because[1])
    )
    assert "StatusReply frame of" in caplog.text
