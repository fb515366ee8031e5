"""Every decode failure is a ProtocolError with a status: deep nesting, Unicode digits."""

from __future__ import annotations

import socket
import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrs import protocol as wire
from mrs.model import Address, Status
from mrs.protocol import PROTOCOL_VERSION, Connection, Hello, ProtocolError, Welcome

NON_ASCII_DIGITS = st.characters(categories=["Nd", "No", "Nl"]).filter(lambda c: not c.isascii())


def _framed(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _nested_array(depth: int, inner: bytes = b"\x01") -> bytes:
    """msgpack for [[[...1...]]] `depth` deep, written by hand (the packer stops at 512)."""
    return b"\x91" * depth + inner


def _nested_map(depth: int) -> bytes:
    """msgpack for {1: {1: ... 1}} `depth` deep."""
    return b"\x81\x01" * depth + b"\x01"


def _opened(role: str) -> Connection:
    """A connection of `role` that has done its handshake, ready for requests/replies."""
    client, server = Connection("client"), Connection("server")
    server.receive_data(client.send(Hello(PROTOCOL_VERSION, "fuzz")))
    server.events()
    client.receive_data(server.send(Welcome(PROTOCOL_VERSION, 1, "g1")))
    client.events()
    return client if role == "client" else server


def _decode_only_protocol_errors(conn: Connection, data: bytes) -> ProtocolError | None:
    """Feed `data`; any exception but a ProtocolError fails the test."""
    conn.receive_data(data)
    try:
        conn.events()
    except ProtocolError as error:
        assert isinstance(error.status, Status)
        assert len(str(error)) < 1000  # one readable line, not the whole frame
        return error
    return None


@pytest.mark.parametrize("depth", [99, 100, 101, 1000, 5000, 100_000])
@pytest.mark.parametrize("shape", ["array", "map"])
@pytest.mark.parametrize("where", ["frame", "code", "headers"])
def test_deep_nesting_is_a_protocol_error(depth, shape, where) -> None:
    nested = _nested_array(depth) if shape == "array" else _nested_map(depth)
    if where == "frame":
        payload = nested
    elif where == "code":
        payload = b"\x92" + nested + b"\x01"  # [nested, 1]
    else:  # a Put whose headers dict holds the nesting
        fields = [12, 1, "1.10", b"x", 1, 1, 0, 0, 0, 0, b"", ""]
        payload = msgpack.packb(fields, use_bin_type=True)
        payload = b"\x9d" + payload[1:] + b"\x81\xa1k" + nested
    for role in ("client", "server"):
        error = _decode_only_protocol_errors(_opened(role), _framed(payload))
        if where == "headers" and role == "server" and depth < 100:
            assert error is None  # within the documented nesting limit: a valid Put
        else:
            assert error is not None and error.status == Status.PROTOCOL_ERROR


DEEP = st.recursive(
    st.integers(-5, 5) | st.text(max_size=3) | st.binary(max_size=3) | st.none(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.integers(0, 3), inner, max_size=2)
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["client", "server"]),
    st.sampled_from([1, 2, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 30, 31, 40, 41, 42]),
    st.lists(DEEP, max_size=14),
    st.integers(0, 3000),
)
def test_fuzz_nested_fields_only_raise_protocol_error(role, code, fields, wrap_depth) -> None:
    payload = msgpack.packb([code, *fields], use_bin_type=True)
    if wrap_depth:  # the same frame buried in arrays: a wrong shape, never a crash
        payload = _nested_array(wrap_depth, payload)
    _decode_only_protocol_errors(_opened(role), _framed(payload))


@given(st.text(NON_ASCII_DIGITS | st.sampled_from("0123456789."), max_size=10))
def test_address_parse_raises_only_value_error(text) -> None:
    try:
        address = Address.parse(text)
    except ValueError:
        return
    assert str(address) == ".".join(str(int(part)) for part in text.split("."))
    assert text.isascii()


def _hello_and_wait(address: str, payload: bytes) -> list:
    host, port = address.rsplit(":", 1)
    connection = wire.Connection("client")
    received: list = []
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(payload)
        while True:
            data = sock.recv(65536)
            connection.receive_data(data)
            while (event := connection.next_event()) not in (wire.NEED_DATA, wire.CLOSED):
                received.append(event)
            if not data or any(isinstance(event, wire.Fatal) for event in received):
                return received


@pytest.mark.parametrize("program", ["group:²", "group:٣", "group:" + "9" * 5000])
def test_a_real_server_refuses_a_link_hello_with_odd_digits_in_one_line(bus, program) -> None:
    hello = Connection("client").send(Hello(PROTOCOL_VERSION, program, "link"))
    events = _hello_and_wait(bus.address, hello)
    assert isinstance(events[-1], wire.Fatal)
    assert events[-1].status == Status.PROTOCOL_ERROR
    assert "has no link from" in events[-1].message
    assert "Traceback" not in bus.log_text()
    assert bus.process.running


def test_a_real_server_answers_a_frame_nested_1000_deep_with_a_fatal(bus) -> None:
    hello = Connection("client").send(Hello(PROTOCOL_VERSION, "deep"))
    events = _hello_and_wait(bus.address, hello + _framed(_nested_map(1000)))
    assert isinstance(events[-1], wire.Fatal)
    assert events[-1].status == Status.PROTOCOL_ERROR
    assert "Traceback" not in bus.log_text()
    assert bus.process.running


@pytest.mark.parametrize("item", [[[]], [{}], [b"x"], [None], [1.5]])
def test_a_batch_item_that_is_not_an_event_is_a_protocol_error(item) -> None:
    """A PutBatch whose item starts with something that is no event code (a list, a
    map) is refused PROTOCOL_ERROR naming the item, never a TypeError."""
    server = Connection("server")
    server.receive_data(Connection("client").send(Hello(PROTOCOL_VERSION, "p")))
    server.events()
    payload = msgpack.packb([wire.events.PutBatch.code, [item]])
    server.receive_data(struct.pack(">I", len(payload)) + payload)
    with pytest.raises(wire.RemoteProtocolError) as refused:
        server.next_event()
    assert refused.value.status is Status.PROTOCOL_ERROR
    assert str(refused.value).startswith("PutBatch.puts[0] must be a Put")


def _server_receiving(code: int, fields: list) -> Connection:
    server = Connection("server")
    server.receive_data(Connection("client").send(Hello(PROTOCOL_VERSION, "p")))
    server.events()
    payload = msgpack.packb([code, *fields])
    server.receive_data(struct.pack(">I", len(payload)) + payload)
    return server


@pytest.mark.parametrize(
    ("code", "fields", "words"),
    [
        (wire.events.PutBatch.code, [[[wire.events.Get.code, 1, 0]]], "PutBatch.puts[0]"),
        (wire.events.PutBatch.code, [[]], "PutBatch.puts"),
        (wire.events.GiveBack.code, [[1, -1]], "GiveBack.seqs"),
    ],
)
def test_a_decoded_list_field_is_checked_item_by_item(code, fields, words) -> None:
    """Lists of events and of seqs are checked by the decoder itself (their Python
    check runs only for built events): another event as a batch item, an empty
    batch, a negative seq are each refused PROTOCOL_ERROR naming the field."""
    server = _server_receiving(code, fields)
    with pytest.raises(wire.RemoteProtocolError) as refused:
        server.next_event()
    assert refused.value.status is Status.PROTOCOL_ERROR
    assert words in str(refused.value)


def test_a_batch_built_with_another_event_as_item_is_refused() -> None:
    with pytest.raises(wire.LocalProtocolError, match=r"PutBatch.puts\[0\] must be a Put"):
        wire.PutBatch([wire.Get(1, 0)])
