"""The put path's record encoding (mrs.group.shapes.encode_entry) writes exactly the bytes of
encode_record(record_from_entry(...)), and they decode back to the entry's fields."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from journals import decode_record, encode_record
from mrs.group.shapes import Entry, encode_entry, entry_from_record, record_from_entry
from mrs.model import Address, DeliveryMode, Uma

addresses = st.builds(Address, st.integers(1, 32000), st.integers(1, 32000))
i64 = st.integers(-(2**63), 2**63 - 1)
header_values = st.one_of(st.text(max_size=8), st.integers(-5, 5), st.binary(max_size=8))

entries = st.builds(
    Entry,
    seq=st.integers(0, 2**64 - 1),
    body=st.binary(max_size=300),
    source=addresses,
    target=addresses,
    delivery=st.sampled_from(list(DeliveryMode)),
    uma=st.sampled_from([0, *Uma]),
    msg_class=i64,
    msg_type=i64,
    priority=st.integers(0, 99),
    correlation_id=st.binary(max_size=32),
    put_time_ns=st.integers(0, 2**63 - 1),
    headers=st.one_of(st.none(), st.dictionaries(st.text(max_size=6), header_values, max_size=3)),
    origin_group=st.one_of(st.none(), st.integers(1, 32000)),
    response_queue=st.one_of(st.none(), addresses),
    principal=st.one_of(st.none(), st.text(min_size=1, max_size=12)),
)


@settings(max_examples=300, deadline=None)
@given(entries, st.integers(0, 2**63 - 1))
def test_encode_entry_is_encode_record_of_record_from_entry(entry: Entry, written_ns: int) -> None:
    fast = encode_entry(entry, written_ns)
    assert fast == encode_record(record_from_entry(entry, written_time_ns=written_ns))
    back = entry_from_record(decode_record(fast))
    assert (back.seq, back.body, back.source, back.target, back.delivery) == (
        entry.seq,
        entry.body,
        entry.source,
        entry.target,
        entry.delivery,
    )
    assert (back.headers, back.origin_group, back.response_queue, back.put_time_ns) == (
        entry.headers or None,
        entry.origin_group,
        entry.response_queue,
        entry.put_time_ns,
    )
    assert back.principal == entry.principal


def test_a_record_written_before_principals_were_kept_reads_as_before() -> None:
    """The principal lives in `extra`: a record without it (written before, or with
    auth off) decodes as it did, to an entry that names no principal; with auth off
    nothing is added to the record either."""
    entry = Entry(7, b"m", Address(1, 13), Address(1, 10), DeliveryMode.WF_DQF)
    old = encode_entry(entry, 5)
    assert "principal" not in decode_record(old).extra
    assert entry_from_record(decode_record(old)).principal is None
    entry.principal = "producer"
    kept = decode_record(encode_entry(entry, 5))
    assert kept.extra["principal"] == "producer"
    assert entry_from_record(kept).principal == "producer"


plain_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False),
        st.text(max_size=300),
        st.binary(max_size=300),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers(-5, 5)), inner, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(st.lists(plain_values, max_size=18).map(tuple))
def test_record_payload_is_msgpack_packb_bytes(values: tuple) -> None:
    """The put path encodes with msgspec (half packb's time); the bytes on disk stay
    msgpack-python's, so journals written before and after read the same."""
    import msgpack

    from journals.record import _ENCODE

    assert _ENCODE(values) == msgpack.packb(values, use_bin_type=True)


good_record_values = st.tuples(
    st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.binary(max_size=64),
    i64, i64, st.integers(0, 99), st.integers(0, 40), st.integers(0, 9), st.binary(max_size=8),
    i64, i64, i64, i64, i64, st.dictionaries(st.text(max_size=6), header_values, max_size=3),
)  # fmt: skip


@st.composite
def record_payloads(draw) -> list:
    """Record payloads, good or broken: a field of another type, one too many or few."""
    values = list(draw(good_record_values))
    for _ in range(draw(st.integers(0, 2))):
        if values and draw(st.booleans()):
            values[draw(st.integers(0, len(values) - 1))] = draw(plain_values)
        elif draw(st.booleans()):
            values.pop()
        else:
            values.append(draw(plain_values))
    return values


@settings(max_examples=600, deadline=None)
@given(record_payloads())
def test_the_fast_record_decode_accepts_exactly_what_the_checked_one_does(values: list) -> None:
    """decode_record decodes a payload with msgspec's typed decoder (the field types
    checked in C) and words a refusal with `checked_values`: both must agree on every
    payload, to the value."""
    import msgpack

    from journals.record import _DECODE_TYPED, CorruptRecord, checked_values

    payload = msgpack.packb(values, use_bin_type=True)
    try:
        slow = list(checked_values(payload))
    except CorruptRecord:
        slow = None
    try:
        fast = list(_DECODE_TYPED(payload))
    except Exception:  # noqa: BLE001 - whatever msgspec raises: a refusal
        fast = None
    assert fast == slow
