"""mrs.protocol: events survive the wire, the state machine holds, garbage is refused."""

from __future__ import annotations

import struct

import msgpack
import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mrs.model import DeliveryMode, Status, Uma
from mrs.protocol import (
    CLOSED,
    NEED_DATA,
    PROTOCOL_VERSION,
    Attach,
    Attached,
    CancelGet,
    Confirm,
    Confirmed,
    Connection,
    Delivery,
    Failure,
    Fatal,
    Get,
    Hello,
    LinkAck,
    LinkNotice,
    LinkTransfer,
    LocalProtocolError,
    ProtocolError,
    Put,
    PutDone,
    RemoteProtocolError,
    StatusReply,
    StatusRequest,
    Welcome,
)
from mrs.protocol import events as wire_events
from mrs.protocol import link_events as wire_link
from mrs.protocol.base import build_unchecked
from tests.process.test_link_events import LINK_EVENTS

# -- helpers --------------------------------------------------------------------------


def frame(obj: object) -> bytes:
    """A raw frame, bypassing the protocol's checks (to play a misbehaving peer)."""
    payload = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def drain(conn: Connection) -> list:
    """Every event next_event gives until NEED_DATA or CLOSED."""
    out = []
    while True:
        event = conn.next_event()
        if event is NEED_DATA or event is CLOSED:
            return out
        out.append(event)


def connected_pair(**kwargs: int) -> tuple[Connection, Connection]:
    """A client and a server that have exchanged Hello and Welcome."""
    client, server = Connection("client", **kwargs), Connection("server", **kwargs)
    server.receive_data(client.send(Hello(PROTOCOL_VERSION, "test")))
    assert server.events() == [Hello(PROTOCOL_VERSION, "test")]
    client.receive_data(server.send(Welcome(PROTOCOL_VERSION, 1, "g1")))
    assert client.events() == [Welcome(PROTOCOL_VERSION, 1, "g1")]
    return client, server


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def put(**changes: object) -> Put:
    fields = dict(
        request_id=1,
        target="2.20",
        body=b"hello",
        delivery=int(DeliveryMode.WF_DQF),
        uma=int(Uma.SAF),
        msg_class=0,
        msg_type=0,
        priority=0,
        timeout_ms=0,
        correlation_id=b"",
        resp_q="",
    )
    fields.update(changes)
    return Put(**fields)


def put_wire(**changes: object) -> list:
    p = put()
    values = [getattr(p, name) for name in Put.field_names]
    for name, value in changes.items():
        values[Put.field_names.index(name)] = value
    return [Put.code, *values]


# -- strategies -----------------------------------------------------------------------

I64 = st.integers(-(2**63), 2**63 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
REQUEST_ID = st.integers(1, 2**63 - 1)
SEQ = st.integers(0, 2**64 - 1)
PRIORITY = st.integers(0, 99)
CORRELATION_ID = st.binary(max_size=32)
PLAIN = st.recursive(
    st.none() | st.booleans() | I64 | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | I64, inner, max_size=4)
    ),
    max_leaves=12,
)
DICTS = st.dictionaries(st.text(max_size=10), PLAIN, max_size=5)

CLIENT_REQUESTS = st.one_of(
    st.builds(Attach, REQUEST_ID, st.text()),
    st.builds(
        Put,
        REQUEST_ID,
        st.text(),
        st.binary(max_size=300),
        I32,
        I32,
        I64,
        I64,
        PRIORITY,
        st.integers(0, 2**63 - 1),
        CORRELATION_ID,
        st.text(),
        st.none() | DICTS,
    ),
    st.builds(Get, REQUEST_ID, st.integers(-1, 2**63 - 1)),
    st.builds(Confirm, REQUEST_ID, SEQ, I64, I64),
    st.builds(StatusRequest, REQUEST_ID),
    st.builds(wire_events.Locate, REQUEST_ID, st.text(min_size=1, max_size=256)),
    st.builds(
        wire_events.ShowPending,
        REQUEST_ID,
        st.lists(st.text(min_size=1, max_size=256), min_size=1, max_size=5),
    ),
    st.builds(wire_events.SetPcj, REQUEST_ID, st.integers(0, 2), st.booleans()),
    st.builds(
        wire_events.ReadJournal,
        REQUEST_ID,
        st.sampled_from(["pcj", "dlj"]),
        st.integers(-1, 2**64 - 1),
        st.integers(-1, 2**63 - 1),
        targets=st.lists(st.text(min_size=1, max_size=256), max_size=3),
        classes=st.lists(I64, max_size=3),
        page_records=st.integers(1, 256),
    ),
)
SERVER_REPLIES = st.one_of(
    st.builds(Attached, REQUEST_ID, I64, I64),
    st.builds(PutDone, REQUEST_ID, I64, I64, SEQ, I64),
    st.builds(
        Delivery,
        REQUEST_ID,
        SEQ,
        st.binary(max_size=300),
        st.text(),
        st.text(),
        I64,
        I64,
        PRIORITY,
        I32,
        I64,
        CORRELATION_ID,
        I64,
        st.none() | DICTS,
        st.none() | DICTS,
    ),
    st.builds(Confirmed, REQUEST_ID, SEQ, I64),
    st.builds(StatusReply, REQUEST_ID, DICTS),
    st.builds(wire_events.Located, REQUEST_ID, I64, I64),
    st.builds(wire_events.PendingCounts, REQUEST_ID, st.lists(I64, max_size=5)),
    st.builds(wire_events.PcjState, REQUEST_ID, st.booleans(), I64, I64, I64),
    st.builds(
        wire_events.JournalPage,
        REQUEST_ID,
        st.lists(st.binary(max_size=100), max_size=3),
        st.lists(st.text(), max_size=2),
        st.integers(-1, 2**63 - 1),
        st.booleans(),
    ),
    st.builds(Failure, REQUEST_ID, I64, st.text()),
)
CLIENT_REQUESTS = CLIENT_REQUESTS | LINK_EVENTS  # typed link items: tests.process.test_link_events
SERVER_REPLIES = SERVER_REPLIES | LINK_EVENTS
CUTS = st.lists(st.integers(0, 100_000), max_size=12)


# -- round trips ----------------------------------------------------------------------


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)  # shared 2-core box
@given(
    st.builds(Hello, st.just(PROTOCOL_VERSION), st.text(), st.sampled_from(["app", "link"])),
    st.builds(Welcome, st.just(PROTOCOL_VERSION), I64, st.text(), I64),
    st.lists(CLIENT_REQUESTS, max_size=20, unique_by=lambda event: event.request_id),
    st.lists(SERVER_REPLIES, max_size=20, unique_by=lambda event: event.request_id),
    CUTS,
    CUTS,
)
def test_every_event_round_trips_through_a_split_stream(
    hello, welcome, requests, replies, client_cuts, server_cuts
):
    # A LinkAck answering one of these LinkTransfers or LinkNotices must name its seqs
    # in order (the connection refuses any other: tests/process/test_wire_fuzz_probes_22.py).
    transfers = {r.request_id: [m.seq for m in r.messages] for r in requests
                 if isinstance(r, LinkTransfer)}  # fmt: skip
    transfers.update({r.request_id: [n.seq for n in r.notices] for r in requests
                      if isinstance(r, LinkNotice)})  # fmt: skip
    assume(all(
        [result.seq for result in r.results] == transfers[r.request_id]
        for r in replies if isinstance(r, LinkAck) and r.request_id in transfers
    ))  # fmt: skip
    client, server = Connection("client"), Connection("server")
    stream = client.send(hello) + client.send_many(requests)
    received = []
    for chunk in split(stream, client_cuts):
        server.receive_data(chunk)
        received += server.events()
    assert received == [hello, *requests]
    assert server.next_event() is NEED_DATA

    stream = server.send(welcome) + server.send_many(replies)
    received = []
    for chunk in split(stream, server_cuts):
        client.receive_data(chunk)
        received += drain(client)
    assert received == [welcome, *replies]
    assert client.next_event() is NEED_DATA


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(CLIENT_REQUESTS, min_size=1, max_size=10, unique_by=lambda e: e.request_id))
def test_send_many_equals_sends_one_by_one(requests):
    many, one = connected_pair()[0], connected_pair()[0]
    assert many.send_many(requests) == b"".join(one.send(r) for r in requests)


@given(st.integers(-(2**63), 2**63 - 1), st.text())
def test_fatal_round_trips_and_closes_both_ends(status, message):
    client, server = connected_pair()
    client.receive_data(server.send(Fatal(status, message)))
    assert client.next_event() == Fatal(status, message)
    assert client.next_event() is CLOSED
    assert client.closed and server.closed


def test_enum_values_are_accepted_and_arrive_as_ints():
    client, server = connected_pair()
    client.receive_data(server.send(PutDone(1, Status.SUCCESS, Status.STORED, 7, Status.NO_UMA)))
    (done,) = client.events()
    assert done == PutDone(1, 1, 31, 7, 25)
    assert type(done.status) is int


def test_ten_thousand_frames_in_one_buffer():
    client, server = connected_pair()
    requests = [Get(i, 0) for i in range(1, 5001)] + [put(request_id=i) for i in range(5001, 10001)]
    server.receive_data(client.send_many(requests))
    events = server.events()
    assert len(events) == 10_000
    assert events == requests
    assert server.events() == []


def test_frames_arriving_byte_by_byte():
    client, server = connected_pair()
    stream = client.send_many([put(request_id=5), Get(6, -1)])
    got = []
    for i in range(len(stream)):
        server.receive_data(stream[i : i + 1])
        got += server.events()
    assert got == [put(request_id=5), Get(6, -1)]


# -- EOF ------------------------------------------------------------------------------


def test_eof_on_a_frame_boundary_is_closed_after_the_buffered_events():
    client, server = connected_pair()
    server.receive_data(client.send(Get(1, 0)))
    server.receive_data(b"")
    assert server.next_event() == Get(1, 0)
    assert server.next_event() is CLOSED
    assert server.next_event() is CLOSED


@pytest.mark.parametrize("keep", [1, 3, 4, 7])
def test_eof_mid_frame_is_an_error(keep):
    client, server = connected_pair()
    server.receive_data(client.send(put())[:keep])
    assert server.next_event() is NEED_DATA
    server.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="connection closed mid-frame"):
        server.next_event()


# -- the state machine ----------------------------------------------------------------


def test_client_must_send_hello_first():
    client = Connection("client")
    with pytest.raises(LocalProtocolError, match="client cannot send Get before Hello"):
        client.send(Get(1, 0))


def test_client_sends_hello_only_once():
    client = Connection("client")
    client.send(Hello(PROTOCOL_VERSION, "p"))
    with pytest.raises(LocalProtocolError, match="second Hello"):
        client.send(Hello(PROTOCOL_VERSION, "p"))


def test_client_may_pipeline_requests_before_welcome():
    client, server = Connection("client"), Connection("server")
    stream = client.send(Hello(PROTOCOL_VERSION, "p")) + client.send(Attach(1, "1.10"))
    server.receive_data(stream)
    assert server.events() == [Hello(PROTOCOL_VERSION, "p"), Attach(1, "1.10")]


def test_client_cannot_send_a_hello_of_another_version():
    with pytest.raises(LocalProtocolError, match="protocol_version 2"):
        Connection("client").send(Hello(PROTOCOL_VERSION + 1, "p"))


@pytest.mark.parametrize("event", [Welcome(PROTOCOL_VERSION, 1, "g"), Failure(1, -14, "x")])
def test_neither_side_sends_the_others_events(event):
    client, server = connected_pair()
    with pytest.raises(LocalProtocolError, match="which only a server sends"):
        client.send(event)
    with pytest.raises(LocalProtocolError, match="which only a client sends"):
        server.send(Get(1, 0))


def test_send_refuses_non_events():
    client, _ = connected_pair()
    with pytest.raises(LocalProtocolError, match="not an MRS event"):
        client.send(object())  # type: ignore[arg-type]


def test_server_sends_welcome_only_after_hello():
    server = Connection("server")
    with pytest.raises(LocalProtocolError, match="Welcome before the client's Hello"):
        server.send(Welcome(PROTOCOL_VERSION, 1, "g"))


def test_server_sends_replies_only_after_welcome_and_welcome_once():
    client, server = Connection("client"), Connection("server")
    server.receive_data(client.send(Hello(PROTOCOL_VERSION, "p")))
    server.events()
    with pytest.raises(LocalProtocolError, match="server cannot send Attached before Welcome"):
        server.send(Attached(1, 1, 10))
    server.send(Welcome(PROTOCOL_VERSION, 1, "g"))
    with pytest.raises(LocalProtocolError, match="second Welcome"):
        server.send(Welcome(PROTOCOL_VERSION, 1, "g"))


def test_server_may_send_fatal_before_hello_and_then_nothing():
    server = Connection("server")
    assert server.send(Fatal(Status.SHUTTING_DOWN, "stopping"))
    assert server.closed
    with pytest.raises(LocalProtocolError, match="closed"):
        server.send(Fatal(Status.SHUTTING_DOWN, "again"))


@pytest.mark.parametrize(
    ("first_frame", "message"),
    [
        (put_wire(), "client sent Put before Hello"),
        ([2, PROTOCOL_VERSION, 1, "g", 0], "client sent Welcome, which only a server sends"),
        ([1, PROTOCOL_VERSION + 1, "p", "app"], "Hello with protocol_version 2"),
        ([1, 0, "p", "app"], "Hello with protocol_version 0"),
    ],
)
def test_server_refuses_a_bad_start(first_frame, message):
    server = Connection("server")
    server.receive_data(frame(first_frame))
    with pytest.raises(RemoteProtocolError, match=message):
        server.next_event()


def test_server_refuses_a_second_hello_and_server_events():
    for bad, message in [
        ([1, PROTOCOL_VERSION, "p", "app"], "client sent a second Hello"),
        ([13, 1, 1, 1, 1, 1], "client sent PutDone, which only a server sends"),
        ([31, -1012, "x"], "client sent Fatal, which only a server sends"),
    ]:
        _, server = connected_pair()
        server.receive_data(frame(bad))
        with pytest.raises(RemoteProtocolError, match=message):
            server.next_event()


def test_client_refuses_out_of_order_server_events():
    # Welcome before our Hello
    client = Connection("client")
    client.receive_data(frame([2, PROTOCOL_VERSION, 1, "g", 0]))
    with pytest.raises(RemoteProtocolError, match="Welcome before the client's Hello"):
        client.next_event()
    # a reply before Welcome
    client = Connection("client")
    client.send(Hello(PROTOCOL_VERSION, "p"))
    client.receive_data(frame([13, 1, 1, 1, 1, 1]))
    with pytest.raises(RemoteProtocolError, match="server sent PutDone before Welcome"):
        client.next_event()
    # a Welcome of another version
    client = Connection("client")
    client.send(Hello(PROTOCOL_VERSION, "p"))
    client.receive_data(frame([2, 9, 1, "g", 0]))
    with pytest.raises(RemoteProtocolError, match="protocol_version 9"):
        client.next_event()
    # a second Welcome, and a client event
    for bad, message in [
        ([2, PROTOCOL_VERSION, 1, "g", 0], "server sent a second Welcome"),
        ([14, 1, 0], "server sent Get, which only a client sends"),
    ]:
        client, _ = connected_pair()
        client.receive_data(frame(bad))
        with pytest.raises(RemoteProtocolError, match=message):
            client.next_event()


def test_client_may_receive_fatal_instead_of_welcome():
    client = Connection("client")
    client.send(Hello(PROTOCOL_VERSION, "p"))
    client.receive_data(frame([31, int(Status.SHUTTING_DOWN), "bye"]))
    assert client.next_event() == Fatal(Status.SHUTTING_DOWN, "bye")
    assert client.next_event() is CLOSED


def test_after_a_fatal_nothing_more_flows():
    client, server = connected_pair()
    server.receive_data(client.send(Get(1, 0)))  # pipelined before the Fatal
    client.receive_data(server.send(Fatal(Status.SERVER_ERROR, "boom")) + frame([17, 1, 1, 1]))
    assert server.next_event() is CLOSED
    with pytest.raises(LocalProtocolError, match="closed"):
        server.send(Confirmed(1, 1, 1))
    assert client.events() == [Fatal(Status.SERVER_ERROR, "boom")]
    assert client.next_event() is CLOSED
    with pytest.raises(LocalProtocolError, match="closed"):
        client.send(Get(2, 0))


def test_a_broken_connection_stays_broken_and_may_only_send_fatal():
    client, server = connected_pair()
    server.receive_data(frame([99]))
    with pytest.raises(RemoteProtocolError) as first:
        server.next_event()
    server.receive_data(client.send(Get(1, 0)))
    with pytest.raises(RemoteProtocolError) as again:
        server.next_event()
    assert again.value is first.value
    with pytest.raises(RemoteProtocolError):
        server.events()
    with pytest.raises(LocalProtocolError, match="broken"):
        server.send(Failure(1, -14, "x"))
    fatal = Fatal(first.value.status, first.value.message)
    client.receive_data(server.send(fatal))
    assert client.events() == [fatal]


def test_events_stops_at_a_fatal():
    client, server = connected_pair()
    client.receive_data(server.send_many([Confirmed(1, 2, 1), Fatal(-1014, "x")]))
    assert client.events() == [Confirmed(1, 2, 1), Fatal(-1014, "x")]
    assert client.events() == []


# -- frames ---------------------------------------------------------------------------


def test_oversized_frame_is_refused_from_its_header_alone():
    _, server = connected_pair(frame_bytes_max=1000)
    server.receive_data(struct.pack(">I", 1001))
    with pytest.raises(RemoteProtocolError, match="1001 bytes exceeds frame_bytes_max 1000"):
        server.next_event()


@pytest.mark.parametrize(
    "first_bytes, words",
    [
        (bytes.fromhex("160301020001"), "a TLS handshake on a port without TLS"),
        (b"GET / HTTP/1.1\r\n", "an HTTP request on the MRS client port"),
    ],
)
def test_another_protocol_on_the_port_is_named(first_bytes: bytes, words: str) -> None:
    """A TLS client or a browser on a plain MRS port was logged as "frame of
    369295618 bytes exceeds frame_bytes_max": say what the peer spoke."""
    server = Connection("server")
    server.receive_data(first_bytes)
    with pytest.raises(RemoteProtocolError, match=words):
        server.next_event()


def test_frame_of_exactly_the_maximum_is_awaited():
    _, server = connected_pair(frame_bytes_max=1000)
    server.receive_data(struct.pack(">I", 1000) + b"\x00" * 10)
    assert server.next_event() is NEED_DATA


def test_sending_an_oversized_frame_is_refused():
    client, _ = connected_pair(frame_bytes_max=1000)
    with pytest.raises(LocalProtocolError, match="exceeds frame_bytes_max 1000"):
        client.send(put(body=b"x" * 1000))
    client.send(put(body=b"x" * 900))  # the connection is still usable


def _raw_frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x00\x00\x00", "empty frame"),
        (_raw_frame(b"\xc1"), "not valid msgpack"),
        (_raw_frame(b"\x92\x01"), "not valid msgpack"),
        (_raw_frame(msgpack.packb([14, 1, 0]) + b"\x00"), "not valid msgpack"),
        (frame({"code": 14}), "not a non-empty msgpack array"),
        (frame(14), "not a non-empty msgpack array"),
        (frame([]), "not a non-empty msgpack array"),
        (frame([99, 1]), "unknown event code 99"),
        (frame(["14", 1, 0]), "unknown event code '14'"),
        (frame([True, 1, 0]), "unknown event code True"),
        (frame([14.0, 1, 0]), "unknown event code 14.0"),
        (frame([14, 1]), "Get frame has 1 fields, expected 3"),
        (frame([14, 1, 0, 0, 0]), "Get frame has 4 fields, expected 3"),
        (frame([14, 1, 0, 0]), "Get.select must be a list, got int"),
        (frame([14, 0, 0]), "Get.request_id must be 1..2\\*\\*63-1, got 0"),
        (frame([14, 2**63, 0]), "Get.request_id must be 1..2\\*\\*63-1, got 9223372036854775808"),
        (frame([14, 1, -2]), "Get.timeout_ms must be >= -1, got -2"),
        (frame([14, "1", 0]), "Get.request_id must be an int, got str"),
        (frame([14, True, 0]), "Get.request_id must be an int, got bool"),
        (frame([14, 1.0, 0]), "Get.request_id must be an int, got float"),
        (frame(put_wire(priority=120)), "Put.priority must be 0..99, got 120"),
        (frame(put_wire(priority=-1)), "Put.priority must be 0..99, got -1"),
        (frame(put_wire(body="text")), "Put.body must be bytes, got str"),
        (frame(put_wire(target=b"2.20")), "Put.target must be a str, got bytes"),
        (frame(put_wire(correlation_id=b"x" * 33)), "Put.correlation_id must be at most 32"),
        (frame(put_wire(timeout_ms=-1)), "Put.timeout_ms must be >= 0, got -1"),
        (frame(put_wire(delivery=2**31)), "Put.delivery must be in int32 range"),
        (frame(put_wire(uma=None)), "Put.uma must be an int, got NoneType"),
        (frame(put_wire(msg_class=2**63)), "Put.msg_class must be in int64 range"),
        (frame([16, 1, -1, 0, 0]), "Confirm.seq must be 0..2\\*\\*64-1, got -1"),
        (frame([19, 1, None]), "StatusReply.info must be a dict, got NoneType"),
        (frame([19, 1, [1]]), "StatusReply.info must be a dict, got list"),
        (_raw_frame(msgpack.packb([19, 1, {"t": msgpack.ExtType(5, b"x")}])), "ext type"),
        (_raw_frame(msgpack.packb([18, msgpack.ExtType(5, b"x")])), "ext type"),
        (frame([19, 1, {"t": msgpack.Timestamp(1, 0)}]), "StatusReply.info holds a value"),
        (frame([18, msgpack.Timestamp(1, 0)]), "StatusRequest.request_id must be an int"),
        (frame([30, 1, 1, b"bytes"]), "Failure.message must be a str, got bytes"),
    ],
)
def test_bad_frames_get_specific_errors(data, message):
    client, server = connected_pair()
    conn = client if message.startswith(("StatusReply", "Failure")) else server
    conn.receive_data(data)
    with pytest.raises(RemoteProtocolError, match=message) as info:
        conn.next_event()
    assert info.value.status is Status.PROTOCOL_ERROR


def test_bad_hello_fields():
    for wire, message in [
        ([1, PROTOCOL_VERSION, "p", "admin"], "Hello.role must be one of 'app', 'link'"),
        ([1, PROTOCOL_VERSION, 5, "app"], "Hello.program must be a str, got int"),
    ]:
        server = Connection("server")
        server.receive_data(frame(wire))
        with pytest.raises(RemoteProtocolError, match=message):
            server.next_event()


def test_deeply_nested_dicts_are_refused():
    nested: object = 1
    for _ in range(150):
        nested = [nested]
    client, _ = connected_pair()
    client.receive_data(frame([19, 1, {"deep": nested}]))
    with pytest.raises(RemoteProtocolError, match="nested deeper"):
        client.next_event()


def test_frame_split_inside_header_waits():
    client, server = connected_pair()
    data = client.send(Get(3, 0))
    server.receive_data(data[:2])
    assert server.next_event() is NEED_DATA
    server.receive_data(data[2:])
    assert server.next_event() == Get(3, 0)


# -- building events ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: put(priority=120), "Put.priority must be 0..99, got 120"),
        (lambda: put(correlation_id=b"x" * 33), "at most 32 bytes, got 33"),
        (lambda: put(body=bytearray(b"x")), "Put.body must be bytes, got bytearray"),
        (lambda: put(request_id=0), "Put.request_id must be 1..2"),
        (lambda: put(uma=True), "Put.uma must be an int, got bool"),
        (lambda: Get(1, -2), "Get.timeout_ms must be >= -1"),
        (lambda: Hello(1, "p", role="admin"), "Hello.role must be one of"),
        (lambda: Confirm(1, 2**64, 0, 0), "Confirm.seq must be 0..2"),
        (lambda: StatusReply(1, {"x": object()}), "StatusReply.info holds a value of type object"),
        (lambda: StatusReply(1, {"x": 2**64}), "holds an int out of msgpack range"),
        (lambda: StatusReply(1, {(1, 2): 1}), "holds a key of type tuple"),
        (lambda: Delivery(1, 0, b"", "1.1", "2.2", 0, 0, 0, 0, 0, b"", 0, []), "a dict or None"),
    ],
)
def test_building_a_bad_event_is_a_local_error(build, message):
    with pytest.raises(LocalProtocolError, match=message) as info:
        build()
    assert info.value.status is Status.PROTOCOL_ERROR


def test_an_unchecked_build_skips_only_what_its_caller_checked():
    """build_unchecked (the client's requests, the server's answers) skips the checks
    of the fields its caller made, still looks into the free-form ones, and leaves the
    next ordinary build checked as before, after a refusal too."""
    made = put(headers={"origin": "jplay", "run": [1, 2]})
    assert build_unchecked(Put, *msgspec.structs.astuple(made)) == made
    with pytest.raises(LocalProtocolError, match="holds a value of type object"):
        build_unchecked(StatusReply, 1, {"x": object()})
    with pytest.raises(LocalProtocolError, match="Put.priority must be 0..99, got 120"):
        put(priority=120)


def test_events_are_frozen():
    event = Get(1, 0)
    with pytest.raises(AttributeError):
        event.timeout_ms = 5  # type: ignore[misc]


def test_error_tree():
    assert issubclass(LocalProtocolError, ProtocolError)
    assert issubclass(RemoteProtocolError, ProtocolError)
    assert ProtocolError("x").status is Status.PROTOCOL_ERROR


def test_connection_arguments_are_checked():
    with pytest.raises(ValueError, match="our_role"):
        Connection("peer")
    with pytest.raises(ValueError, match="frame_bytes_max"):
        Connection("client", frame_bytes_max=0)


# -- fuzz -----------------------------------------------------------------------------


def feed_and_drain(conn: Connection, chunks: list[bytes]) -> None:
    """Feed chunks then EOF; only ProtocolError may escape (and stops the feeding)."""
    try:
        for chunk in [*chunks, b""]:
            conn.receive_data(chunk)
            drain(conn)
    except ProtocolError:
        pass


@settings(max_examples=300)
@given(st.sampled_from(["client", "server"]), st.binary(max_size=300), CUTS)
def test_random_bytes_after_handshake_only_raise_protocol_error(role, garbage, cuts):
    client, server = connected_pair()
    feed_and_drain(client if role == "client" else server, split(garbage, cuts))


@settings(max_examples=300)
@given(st.sampled_from(["client", "server"]), st.lists(st.binary(max_size=60), max_size=5))
def test_random_framed_bytes_only_raise_protocol_error(role, payloads):
    client, server = connected_pair()
    feed_and_drain(client if role == "client" else server, [_raw_frame(p) for p in payloads])


@settings(max_examples=300)
@given(
    st.sampled_from(["client", "server"]),
    st.sampled_from([1, 2, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 30, 31]) | I64,
    st.lists(PLAIN, max_size=14),
)
def test_random_arrays_with_event_codes_only_raise_protocol_error(role, code, fields):
    client, server = connected_pair()
    feed_and_drain(client if role == "client" else server, [frame([code, *fields])])


@given(st.binary(max_size=200))
def test_random_bytes_before_handshake_only_raise_protocol_error(garbage):
    feed_and_drain(Connection("server"), [garbage])
    feed_and_drain(Connection("client"), [garbage])


def test_the_frames_example_in_the_docs_runs(capsys):
    import runpy
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "protocol_frames.py"
    runpy.run_path(str(example), run_name="__main__")
    out = capsys.readouterr().out
    assert "00 00 00 05 94 0e 07 00 c0" in out
    assert "refused: Put.priority must be 0..99, got 120" in out
    assert "peer refused: Get.request_id must be 1..2**63-1, got 0 (status PROTOCOL_ERROR)" in out


# -- msgspec and the field rules agree ------------------------------------------------

_AFTER_HANDSHAKE = sorted(
    {*wire_events.CLIENT_EVENTS, *wire_events.SERVER_EVENTS} - {Hello, Welcome, Fatal},
    key=lambda cls: cls.code,
)
_ANY_VALUE = st.one_of(
    I64,
    st.integers(-(2**63), 2**64 - 1),
    st.integers(-3, 120),
    st.booleans(),
    st.none(),
    st.text(max_size=5),
    st.binary(max_size=40),
    st.lists(PLAIN, max_size=3),
    DICTS,
)


@settings(max_examples=200)
@given(st.sampled_from(_AFTER_HANDSHAKE), st.data())
def test_the_fast_decoder_accepts_exactly_what_the_field_rules_accept(cls, data):
    """msgspec checks a frame from the annotations; the worded rules are derived from
    the same annotations. A frame either passes both or is refused by both."""
    values = [data.draw(_ANY_VALUE, label=name) for name in cls.field_names]
    checks = [rule[2] for rule in cls._rules]
    rules_ok = all(c.problem(v) is None for c, v in zip(checks, values, strict=True))
    client, server = connected_pair()
    conn = server if cls in wire_events.CLIENT_EVENTS else client
    conn.receive_data(frame([cls.code, *values]))
    try:
        event = conn.next_event()
    except RemoteProtocolError as error:
        assert not rules_ok, f"refused a frame the rules accept: {error}"
        assert error.message.startswith(f"{cls.__name__}.")  # the refusal names the field
    else:
        assert rules_ok, f"accepted a frame the rules refuse: {event}"
        assert list(msgspec.structs.astuple(event)) == values


def test_trailing_fields_with_a_default_may_be_left_out():
    server = Connection("server")
    server.receive_data(frame([1, PROTOCOL_VERSION, "p"]))
    assert server.events() == [Hello(PROTOCOL_VERSION, "p", "app")]


def test_the_protocol_generates_no_code():
    from pathlib import Path

    import mrs.protocol

    for module in Path(mrs.protocol.__file__).parent.glob("*.py"):
        assert "exec(" not in module.read_text(), module.name


# -- request ids ----------------------------------------------------------------------


def test_a_request_id_in_flight_may_not_be_reused_until_answered():
    client, server = connected_pair()
    server.receive_data(client.send(Get(5, -1)))
    assert server.events() == [Get(5, -1)]
    assert client.our_requests_in_flight == server.their_requests_in_flight == 1
    with pytest.raises(LocalProtocolError, match="request_id 5 reused while in flight"):
        client.send(put(request_id=5))
    client.receive_data(server.send(Failure(5, int(Status.TIMEOUT), "no message")))
    assert client.events() == [Failure(5, int(Status.TIMEOUT), "no message")]
    assert client.our_requests_in_flight == server.their_requests_in_flight == 0
    server.receive_data(client.send(put(request_id=5)))  # answered: free again
    assert server.events() == [put(request_id=5)]


def test_a_peer_reusing_a_request_id_in_flight_breaks_the_connection():
    _, server = connected_pair()
    server.receive_data(frame([14, 7, -1]) + frame([14, 7, 0]))
    with pytest.raises(RemoteProtocolError, match="request_id 7 reused while in flight"):
        server.events()


def test_cancel_get_ping_and_the_other_sides_ids_are_not_counted():
    client, server = connected_pair()
    server.receive_data(client.send_many([Get(1, -1), CancelGet(1), LinkTransfer(2, [])]))
    assert len(server.events()) == 3
    assert server.their_requests_in_flight == 2
    # the server's own requests on a link have ids of their own
    client.receive_data(server.send_many([LinkTransfer(1, []), LinkAck(2, [])]))
    assert len(client.events()) == 2
    assert client.their_requests_in_flight == 1 and client.our_requests_in_flight == 1


def test_a_link_hello_carries_the_group_as_a_field():
    client, server = Connection("client"), Connection("server")
    server.receive_data(client.send(Hello(PROTOCOL_VERSION, "group:3", "link", 3)))
    (hello,) = server.events()
    assert (hello.role, hello.group) == ("link", 3)
    with pytest.raises(LocalProtocolError, match="Hello.group must be 0..32000, got 32001"):
        Hello(PROTOCOL_VERSION, "p", "link", 32001)
    server = Connection("server")
    server.receive_data(frame([1, PROTOCOL_VERSION, "p", "link", -1]))
    with pytest.raises(RemoteProtocolError, match="Hello.group must be 0..32000, got -1"):
        server.next_event()


def test_the_group_bound_is_the_configs():
    from mrs.config.bus import GROUP_ID_MAX

    assert Hello._rules[3][2].hi == GROUP_ID_MAX


# -- typed link notices ---------------------------------------------------------------


@given(st.sampled_from(wire_link.NOTICES), SEQ, I64)
def test_a_typed_notice_is_the_kind_seq_status_list_on_the_wire(cls, seq, status):
    """The notice journal and older frames hold [kind, seq, status]: a typed notice
    encodes to exactly those bytes and decodes back from them."""
    notice = cls(seq, status)
    as_list = msgpack.packb([cls.kind, seq, status], use_bin_type=True)
    assert msgspec.msgpack.encode(notice) == as_list
    assert msgspec.msgpack.decode(as_list, type=wire_link.AnyNotice) == notice
    assert wire_link.NOTICE_OF_KIND[cls.kind] is cls


def test_a_notice_of_an_unknown_kind_does_not_decode():
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(msgpack.packb(["bogus", 1, 0]), type=wire_link.AnyNotice)


def test_an_applications_hello_and_welcome_keep_the_shape_earlier_releases_read() -> None:
    """A peer of an earlier release refuses a Hello or Welcome with more fields than
    it knows. The link's `incarnation` was added to both: an application's must still
    be the arrays of five and four fields they were (trailing defaults not sent), or
    every client of an earlier release failed its handshake with a new server
    ("Welcome frame has 5 fields, expected 4"); a link's carries it."""
    client, server = Connection("client"), Connection("server")
    hello = client.send(Hello(PROTOCOL_VERSION, "app", "app", 0, True))
    assert msgspec.msgpack.decode(hello[4:]) == [1, PROTOCOL_VERSION, "app", "app", 0, True]
    server.receive_data(hello)
    assert list(server.events()) == [Hello(PROTOCOL_VERSION, "app", "app", 0, True)]
    welcome = server.send(Welcome(PROTOCOL_VERSION, 1, "G1", 1024))
    assert msgspec.msgpack.decode(welcome[4:]) == [2, PROTOCOL_VERSION, 1, "G1", 1024]
    link = Connection("client").send(
        Hello(PROTOCOL_VERSION, "group:1", "link", 1, False, b"\x01" * 16)
    )
    assert msgspec.msgpack.decode(link[4:])[-1] == b"\x01" * 16
