"""Which transferred messages a receiving group stores without the worded checks
(mrs.group.shapes.transfer_sound): its one-expression answer must agree with
`mrs.group.quarantine.transfer_problem`, or a message no client could have put would
be stored (or a sound one refused BADPARAM)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from msgspec.structs import asdict

from mrs import protocol as wire
from mrs.group.quarantine import U32_MAX, transfer_problem
from mrs.group.shapes import transfer_sound
from mrs.model import DeliveryMode, Uma
from mrs.protocol.post_init import build_unchecked_from

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
EDGES = [-1, 0, 1, 99, 100, U32_MAX, U32_MAX + 1]
EDGES += [INT64_MIN, INT64_MAX, INT64_MIN - 1, INT64_MAX + 1]
INTS = st.one_of(st.sampled_from(EDGES), st.integers(min_value=-5, max_value=300), st.booleans())
SMALL = st.one_of(st.integers(min_value=-2, max_value=140), st.booleans(), st.sampled_from(EDGES))
BYTES = st.one_of(st.binary(max_size=40), st.just(bytearray(b"ab")), st.just("text"), st.none())


def _message(**fields: object) -> wire.TransferredMessage:
    """A message as a peer could send it, unchecked (as after a decode)."""
    values = {
        "seq": 7,
        "target_queue": 10,
        "source_group": 1,
        "source_queue": 100,
        "body": b"x",
        "msg_class": 0,
        "msg_type": 0,
        "priority": 0,
        "delivery": int(DeliveryMode.WF_DQF),
        "uma": int(Uma.SAF),
        "correlation_id": b"",
        "put_time_ns": 5,
        "headers": None,
        "ordered": True,
    }
    values.update(fields)
    return build_unchecked_from(wire.TransferredMessage, tuple(values.values()))


@given(
    delivery=st.one_of(st.sampled_from([int(mode) for mode in DeliveryMode]), SMALL),
    uma=st.one_of(st.sampled_from([int(uma) for uma in Uma]), SMALL),
    target_queue=INTS,
    source_group=INTS,
    source_queue=INTS,
    put_time_ns=INTS,
    msg_class=INTS,
    msg_type=INTS,
    priority=SMALL,
    body=BYTES,
    correlation_id=BYTES,
)
def test_the_quick_answer_agrees_with_the_worded_checks(**fields: object) -> None:
    message = _message(**fields)
    assert transfer_sound(message) == (transfer_problem(asdict(message)) is None)


def test_a_message_with_headers_takes_the_worded_checks() -> None:
    assert transfer_sound(_message())
    assert not transfer_sound(_message(headers={}))
    keyed = _message(headers={"idempotency_key": "k"})
    assert not transfer_sound(keyed) and transfer_problem(asdict(keyed)) is None
    too_long = _message(correlation_id=b"c" * 33)
    assert not transfer_sound(too_long)
    assert "correlation_id" in (transfer_problem(asdict(too_long)) or "")
