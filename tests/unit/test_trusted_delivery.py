"""A Delivery built unchecked for a trusted entry (mrs.group.shapes.delivery_event).

The server skips the Delivery's field check for an entry made from a Put it checked
at decode (or made by itself). That is only sound if every Put the checked decode
admits gives a Delivery the check admits too: a field the check would refuse would
reach the client unchecked, and the client's decoder would drop the connection.
These properties hold the two rule sets together, and show that an untrusted entry
(read back from a journal) is still checked.
"""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from journals import Record
from mrs import protocol as wire
from mrs.group.quarantine import _worded_record_problem, record_problem
from mrs.group.recovery import reloaded_entry
from mrs.group.shapes import Entry, delivery_event, fits_a_delivery, record_sound
from mrs.model import Address, DeliveryMode, Status
from tests.unit.test_records_encode import plain_values

_ENCODE = msgspec.msgpack.Encoder().encode

wide_ints = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.integers(-(2**70), 2**70), st.integers(-5, 300)
)


@st.composite
def checked_puts(draw) -> wire.Put:
    """Puts the checked constructor (what a decode checks) admits, near its limits."""
    try:
        return wire.Put(
            draw(st.integers(1, 2**63 - 1)),
            "1.10",
            draw(st.binary(max_size=64)),
            int(draw(st.sampled_from(list(DeliveryMode)))),
            draw(st.integers(0, 4)),
            draw(wide_ints),
            draw(wide_ints),
            draw(wide_ints),
            0,
            draw(st.binary(max_size=40)),
            "",
            draw(st.none() | st.dictionaries(st.text(max_size=6), plain_values, max_size=4)),
        )
    except (wire.ProtocolError, ValueError, TypeError):
        assume(False)
        raise  # unreachable: assume(False) abandons the example


def _entry(put: wire.Put, trusted: bool) -> Entry:
    """The entry intake makes of a put (the server's own seq, source and time)."""
    return Entry(
        2**40 + 5,
        put.body,
        Address(1, 11),
        Address(1, 10),
        DeliveryMode(put.delivery),
        put.uma,
        put.msg_class,
        put.msg_type,
        put.priority,
        put.correlation_id,
        1_700_000_000_000_000_000,
        None,
        put.headers,
        trusted=trusted,
    )


@given(checked_puts(), st.integers(1, 2**63 - 1))
def test_what_a_checked_put_admits_a_checked_delivery_admits(put: wire.Put, request_id) -> None:
    status = int(Status.CONFIRMREQ)
    unchecked = delivery_event(request_id, _entry(put, trusted=True), status)
    checked = delivery_event(request_id, _entry(put, trusted=False), status)
    assert unchecked == checked
    # and the client decodes it as the server built it
    decoded = msgspec.msgpack.decode(_ENCODE(unchecked), type=wire.Delivery)
    assert decoded == checked


def test_an_untrusted_entry_with_a_field_no_put_could_carry_is_still_refused() -> None:
    """A record read back from the journal is not trusted: a priority out of range
    (tampered) is refused, and hand_over quarantines it (tests/process/test_poison.py)."""
    put = wire.Put(1, "1.10", b"x", int(DeliveryMode.WF_DQF), 1, 0, 0, 0, 0, b"", "", None)
    entry = _entry(put, trusted=False)
    entry.priority = 10**6
    with pytest.raises((wire.ProtocolError, ValueError, TypeError)):
        delivery_event(7, entry, int(Status.CONFIRMREQ))


@st.composite
def read_back_records(draw) -> Record:
    """DQF records as a typed decode admits them (any int msgpack carries, any bytes),
    with a mode and addresses `record_problem` passes, some with headers."""
    u64 = st.integers(-(2**63), 2**64 - 1)
    extra = draw(st.sampled_from([{}, {"headers": {"k": 1}}, {"headers": {}}, {"origin": 2}]))
    return Record(
        seq=draw(st.one_of(st.integers(0, 2**41), u64)),
        target_group=1,
        target_queue=10,
        source_group=1,
        source_queue=11,
        body=draw(st.binary(max_size=16)),
        msg_class=draw(st.one_of(wide_ints.filter(lambda v: -(2**63) <= v < 2**64), u64)),
        msg_type=draw(u64),
        priority=draw(st.one_of(st.integers(-5, 300), u64)),
        delivery=int(draw(st.sampled_from(list(DeliveryMode)))),
        uma=1,
        correlation_id=draw(st.binary(max_size=40)),
        put_time_ns=draw(st.one_of(st.integers(0, 2**62), u64)),
        extra=extra,
    )


@given(read_back_records())
def test_a_record_read_back_is_trusted_only_when_its_checked_delivery_is_admitted(
    record: Record,
) -> None:
    """A cold backlog's entries skip the Delivery check when `fits_a_delivery` says
    so: it must never admit a record the check refuses (that one must be refused and
    quarantined, tests/process/test_poison.py), and should admit the sound ones without
    headers, which are what a deep queue reads back."""
    assert record_problem(record) is None
    entry = reloaded_entry(record, 0, lambda _entry: None)
    entry.trusted = False
    try:
        checked = delivery_event(9, entry, int(Status.CONFIRMREQ))
    except (wire.ProtocolError, ValueError, TypeError):
        checked = None
    trusted = fits_a_delivery(record)
    assert reloaded_entry(record, 0, lambda _entry: None).trusted is trusted
    if trusted:
        assert checked is not None
        entry.trusted = True
        assert delivery_event(9, entry, int(Status.CONFIRMREQ)) == checked
    elif checked is not None:  # admitted by the check, refused by the fast test: headers
        assert "headers" in record.extra


def test_a_sound_record_without_headers_is_trusted_and_each_tampered_field_is_not() -> None:
    sound = Record(seq=5, target_group=1, target_queue=10, source_group=1, source_queue=11,
                   body=b"x", priority=9, delivery=int(DeliveryMode.WF_DQF), uma=1,
                   correlation_id=b"c" * 32, put_time_ns=1)  # fmt: skip
    assert fits_a_delivery(sound)
    tampered = {
        "priority": 100, "msg_class": 2**63, "msg_type": 2**63, "put_time_ns": 2**63,
        "correlation_id": b"c" * 33, "seq": -1, "extra": {"headers": {}},
    }  # fmt: skip
    for field, value in tampered.items():
        assert not fits_a_delivery(dataclasses.replace(sound, **{field: value})), field


@given(
    st.integers(-5, 2**33),
    st.integers(-5, 2**33),
    st.integers(-5, 2**33),
    st.one_of(st.sampled_from([int(mode) for mode in DeliveryMode]), st.integers(-300, 300)),
)
def test_the_compiled_soundness_test_agrees_with_record_problem(
    target_queue, source_group, source_queue, delivery
) -> None:
    """A record read back skips the interpreted checks when `record_sound` passes it:
    it must pass only records those checks find sound, and pass every one of them
    (so the quarantine keeps its wording for the rest)."""
    record = Record(seq=1, target_group=1, target_queue=target_queue, source_group=source_group,
                    source_queue=source_queue, delivery=delivery)  # fmt: skip
    assert record_sound(record) is (_worded_record_problem(record) is None)
