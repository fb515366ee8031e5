"""A Delivery built unchecked for a trusted entry (mrs.group.delivery_event).

The server skips the Delivery's field check for an entry made from a Put it checked
at decode (or made by itself). That is only sound if every Put the checked decode
admits gives a Delivery the check admits too: a field the check would refuse would
reach the client unchecked, and the client's decoder would drop the connection.
These properties hold the two rule sets together, and show that an untrusted entry
(read back from a journal) is still checked.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from mrs import protocol as wire
from mrs.group.delivery_event import delivery_event
from mrs.model import Address, DeliveryMode, Status
from mrs.queues import Entry
from tests.test_records_encode import plain_values

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
    (tampered) is refused, and hand_over quarantines it (tests/test_poison.py)."""
    put = wire.Put(1, "1.10", b"x", int(DeliveryMode.WF_DQF), 1, 0, 0, 0, 0, b"", "", None)
    entry = _entry(put, trusted=False)
    entry.priority = 10**6
    with pytest.raises((wire.ProtocolError, ValueError, TypeError)):
        delivery_event(7, entry, int(Status.CONFIRMREQ))
