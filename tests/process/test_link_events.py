"""Typed link events: every link event round-trips through the codec; a malformed
item is refused PROTOCOL_ERROR naming the field; notices keep their journal form."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrs import protocol as wire
from mrs.model import Status

I64 = st.integers(-(2**63), 2**63 - 1)
SEQ = st.integers(0, 2**64 - 1)
ANY_INT = st.integers(-(2**63), 2**64 - 1)
"""A transferred message's ranges are the receiver's rules (poison), not the wire's."""
REQUEST_ID = st.integers(1, 2**63 - 1)
PLAIN = st.recursive(
    st.none() | st.booleans() | I64 | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | I64, inner, max_size=4)
    ),
    max_leaves=12,
)
TRANSFERRED = st.builds(
    wire.TransferredMessage,
    SEQ, ANY_INT, ANY_INT, ANY_INT, st.binary(max_size=300), ANY_INT, ANY_INT, ANY_INT,
    ANY_INT, ANY_INT, st.binary(max_size=64), ANY_INT,
    st.none() | st.dictionaries(st.text(max_size=10), PLAIN, max_size=5), st.booleans(),
)  # fmt: skip
RESULTS = st.builds(wire.LinkResult, SEQ, I64, SEQ)
NOTICES = st.one_of(*(st.builds(cls, SEQ, I64) for cls in wire.NOTICES))
LINK_EVENTS = st.one_of(
    st.builds(wire.LinkTransfer, REQUEST_ID, st.lists(TRANSFERRED, max_size=5)),
    st.builds(wire.LinkAck, REQUEST_ID, st.lists(RESULTS, max_size=5)),
    st.builds(wire.LinkNotice, REQUEST_ID, st.lists(NOTICES, max_size=6)),
    st.builds(wire.LinkPendingQuery, REQUEST_ID, st.lists(I64, min_size=1, max_size=5)),
    st.builds(wire.LinkPendingCounts, REQUEST_ID, st.lists(I64, max_size=5)),
)


def linked_pair() -> tuple[wire.Connection, wire.Connection]:
    dialer, listener = wire.Connection("client"), wire.Connection("server")
    listener.receive_data(dialer.send(wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1)))
    assert isinstance(listener.next_event(), wire.Hello)
    dialer.receive_data(listener.send(wire.Welcome(wire.PROTOCOL_VERSION, 2, "G2")))
    assert isinstance(dialer.next_event(), wire.Welcome)
    return dialer, listener


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)  # shared 2-core box
@given(st.lists(LINK_EVENTS, max_size=8, unique_by=lambda event: event.request_id))
def test_every_link_event_round_trips_both_ways(events) -> None:
    dialer, listener = linked_pair()
    listener.receive_data(dialer.send_many(events))
    received = listener.events()
    assert received == events
    for sent, got in zip(events, received, strict=True):
        items = {
            wire.LinkTransfer: "messages", wire.LinkAck: "results", wire.LinkNotice: "notices",
            wire.LinkPendingQuery: "queues", wire.LinkPendingCounts: "counts",
        }[type(sent)]  # fmt: skip
        assert [type(item) for item in getattr(got, items)] == [
            type(item) for item in getattr(sent, items)
        ]
    dialer.receive_data(listener.send_many(events))
    assert dialer.events() == events


@given(NOTICES)
def test_a_notice_keeps_its_wire_and_journal_form(notice) -> None:
    """``[kind, seq, status]``: the journal of notices written before typed notices
    reads back, and what is written now reads as before."""
    encoded = wire.link_events.encode_notice(notice)
    assert msgpack.unpackb(encoded) == [notice.kind, notice.seq, notice.status]
    assert wire.link_events.decode_notice(encoded) == notice
    old_form = msgpack.packb([notice.kind, notice.seq, notice.status])
    assert type(wire.link_events.decode_notice(old_form)) is type(notice)


def _frame(obj: object) -> bytes:
    payload = msgpack.packb(obj)
    return struct.pack(">I", len(payload)) + payload


GOOD_MESSAGE = [1, 10, 1, 13, b"x", 0, 0, 0, 2, 1, b"", 5, None, False]


@pytest.mark.parametrize(
    ("frame", "wording"),
    [
        ([42, 1, [["conf", -1, 0]]], "LinkNotice.notices[0].seq must be 0..2**64-1, got -1"),
        ([42, 1, [["nope", 1, 0]]], "LinkNotice.notices[0].kind must be one of 'conf'"),
        ([42, 1, [["conf", 1]]], "LinkNotice.notices[0] (ConfNotice) has 1 fields, expected 2"),
        ([42, 1, [7]], "LinkNotice.notices[0] must be a ConfNotice or DeqNotice"),
        ([42, 1, "x"], "LinkNotice.notices must be a list, got str"),
        ([41, 1, [[1, "a", 3]]], "LinkAck.results[0].status must be an int, got str"),
        ([41, 1, [[1, 2]]], "LinkAck.results[0] (LinkResult) has 2 fields, expected 3"),
        ([40, 1, [GOOD_MESSAGE, [*GOOD_MESSAGE[:4], "text", *GOOD_MESSAGE[5:]]]],
         "LinkTransfer.messages[1].body must be bytes, got str"),
        ([40, 1, [[*GOOD_MESSAGE[:-1], 1]]], "LinkTransfer.messages[0].ordered must be a bool"),
        ([40, 1, [[-5, *GOOD_MESSAGE[1:]]]], "LinkTransfer.messages[0].seq must be 0..2**64-1"),
        ([40, 1, [GOOD_MESSAGE[:13]]],
         "LinkTransfer.messages[0] (TransferredMessage) has 13 fields, expected 14"),
    ],
)  # fmt: skip
def test_a_malformed_link_item_is_a_protocol_error_naming_the_field(frame, wording) -> None:
    _, listener = linked_pair()
    listener.receive_data(_frame(frame))
    with pytest.raises(wire.RemoteProtocolError) as refused:
        listener.next_event()
    assert refused.value.status is Status.PROTOCOL_ERROR
    assert str(refused.value).startswith(wording), str(refused.value)


def test_an_item_built_wrong_is_refused_where_it_is_built() -> None:
    with pytest.raises(wire.LocalProtocolError, match=r"ConfNotice.seq must be 0..2\*\*64-1"):
        wire.ConfNotice(-1, 0)
    with pytest.raises(wire.LocalProtocolError, match="LinkTransfer.messages.0. must be a"):
        wire.LinkTransfer(1, [GOOD_MESSAGE])  # a positional list is not a message any more
    with pytest.raises(wire.LocalProtocolError, match="TransferredMessage.body must be bytes"):
        wire.TransferredMessage(*GOOD_MESSAGE[:4], "text", *GOOD_MESSAGE[5:])


def test_the_link_frames_example_runs() -> None:
    """docs/examples/link_frames.py (docs/links.md) shows what it says it shows."""
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "link_frames.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=60, check=True
    )
    assert "LinkTransfer(request_id=1, messages=[TransferredMessage(seq=7" in done.stdout
    assert "[42, 2, [['conf', 7, 1]]]" in done.stdout
    assert "peer refused: LinkNotice.notices[0].seq must be 0..2**64-1" in done.stdout
