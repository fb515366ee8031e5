"""Which journal records can become queue entries (mrs.group.quarantine.record_problem): the
one-expression answer for sound records must agree with the checks that word a
problem, or a tampered record would be delivered (or a sound one quarantined)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from journals.record import Record
from mrs.group.quarantine import U32_MAX, _worded_record_problem, record_problem
from mrs.model import DeliveryMode

MODES = [int(mode) for mode in DeliveryMode]
FIELD_VALUES = st.one_of(
    st.integers(min_value=-2, max_value=U32_MAX + 2),
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    st.sampled_from([0, U32_MAX, U32_MAX + 1, -1]),
)


@given(
    delivery=st.one_of(st.sampled_from(MODES), st.integers(min_value=-5, max_value=300)),
    target_queue=FIELD_VALUES,
    source_group=FIELD_VALUES,
    source_queue=FIELD_VALUES,
)
def test_the_quick_answer_agrees_with_the_worded_checks(
    delivery: int, target_queue: int, source_group: int, source_queue: int
) -> None:
    record = Record(7, 1, target_queue, source_group, source_queue, b"x", delivery=delivery)
    assert record_problem(record) == _worded_record_problem(record)


def test_a_sound_record_has_no_problem_and_a_tampered_one_is_named() -> None:
    sound = Record(7, 1, 10, 1, 100, b"x", delivery=int(DeliveryMode.WF_DQF))
    assert record_problem(sound) is None
    tampered = Record(7, 1, U32_MAX + 1, 1, 100, b"x", delivery=int(DeliveryMode.WF_DQF))
    assert record_problem(tampered) == (
        f"target_queue must be an int in 0..{U32_MAX}, got {U32_MAX + 1}"
    )
    assert record_problem(Record(7, 1, 10, 1, 100, b"x", delivery=99)) == (
        "delivery 99 is not a delivery mode"
    )
