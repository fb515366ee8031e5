"""The cold backlog (mrs.group.backlog) keeps arrival order whatever mix of cold and held
messages arrives and however it is taken (property test against a plain list)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from mrs.group.backlog import ColdBacklog


@dataclass(eq=False)
class Message:
    seq: int
    journaled: bool
    on_confirm: object = None
    on_dequeue: object = None


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("put"), st.sampled_from(["cold", "memory", "waited"])),
            st.tuples(st.just("take"), st.integers(1, 5)),
        ),
        max_size=60,
    )
)
def test_backlog_is_fifo_and_reads_only_cold_ones(steps) -> None:
    backlog = ColdBacklog()
    model: list[Message] = []
    on_disk: dict[int, Message] = {}
    loaded: list[int] = []

    def load(seqs: list[int]) -> list[Message]:
        loaded.extend(seqs)
        return [on_disk[seq] for seq in seqs]

    for seq, (action, value) in enumerate(steps, start=1):
        if action == "put":
            message = Message(seq, journaled=value != "memory")
            if value == "waited":
                message.on_confirm = object()  # a sender waits: must stay in memory
            if backlog.can_go_cold(message):
                on_disk[seq] = message
            backlog.append(message, message.seq, ColdBacklog.can_go_cold(message))
            model.append(message)
        else:
            loaded.clear()
            taken = backlog.take(value, load)
            expected, model = model[:value], model[value:]
            assert [m.seq for m in taken] == [m.seq for m in expected]
            assert set(loaded) == {m.seq for m in expected if m.seq in on_disk}
        assert len(backlog) == len(model)
