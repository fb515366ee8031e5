"""mrs.group.seq_deltas keeps any 64-bit seqs in arrival order, exactly, at 4 bytes per seq
when each follows the one before closely (property test against a plain list)."""

from __future__ import annotations

from array import array

from hypothesis import given
from hypothesis import strategies as st

from mrs.group import seq_deltas
from mrs.group.seq_deltas import ESCAPE, SeqDeltas

SEQ_MAX = (1 << 64) - 1
step = st.one_of(
    st.integers(0, 3),  # one group's counter
    st.just(ESCAPE),  # a delta that looks like the marker
    st.just(ESCAPE - 1),
    st.integers(-(1 << 50), 1 << 50),  # another group, or an older seq put back
)


def following(previous: int, steps: list[int]) -> list[int]:
    seqs = []
    for delta in steps:
        previous = min(max(previous + delta, 0), SEQ_MAX)
        seqs.append(previous)
    return seqs


@given(
    st.integers(0, SEQ_MAX),
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.lists(step, min_size=1, max_size=3)),
            st.tuples(st.just("extend"), st.lists(step, max_size=20)),
            st.tuples(st.just("take"), st.integers(0, 25)),
        ),
        max_size=40,
    ),
)
def test_seqs_come_back_exactly_in_arrival_order(first, operations) -> None:
    seqs, model, last = SeqDeltas(), [], first
    for action, value in operations:
        if action == "take":
            assert seqs.take(value) == model[:value]
            model = model[value:]
        else:
            new = following(last, value)
            if action == "append":
                for seq in new:
                    seqs.append(seq)
            else:
                seqs.extend(array("Q", new))
            model += new
            last = new[-1] if new else last
        assert len(seqs) == len(model) and list(seqs) == model
    assert seqs.take(len(model) + 1) == model


def test_a_million_close_seqs_cost_four_bytes_each() -> None:
    seqs = SeqDeltas()
    first = (1 << 49) * 3 + 17  # group 3's counter 17
    for start in range(0, 1_000_000, 65_536):  # as recovery extends it, a chunk at a time
        seqs.extend(array("Q", range(first + start, first + min(start + 65_536, 1_000_000))))
    held_bytes = sum(a.buffer_info()[1] * a.itemsize for a in (seqs._deltas, seqs._escaped))
    assert held_bytes <= 4 * 1_000_000 + 8
    assert seqs.take(3) == [first, first + 1, first + 2]


def test_taken_slots_are_dropped(monkeypatch) -> None:
    monkeypatch.setattr(seq_deltas, "COMPACT_AFTER", 8)
    seqs = SeqDeltas()
    seqs.extend(array("Q", range(100, 120)))
    assert seqs.take(12) == list(range(100, 112))
    assert len(seqs._deltas) == 8 and list(seqs) == list(range(112, 120))
    assert seqs.take(100) == list(range(112, 120)) and len(seqs._deltas) == 0
    seqs.append(500)  # after the arrays were dropped the deltas go on from the last seq
    assert seqs.take(1) == [500]
