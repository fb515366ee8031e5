"""A queue's order in process (mrs.group.lanes, mrs.group.queues): highest priority
first, then arrival order, whatever goes cold or comes back; a selective take finds
through the index (mrs.group.select_index) the message a scan of that order finds."""

from __future__ import annotations

from array import array
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrs.config.bus import QueueConfig
from mrs.core.selection import Key, Selection, by_correlation_id, from_wire
from mrs.errors import Refused
from mrs.group import backlog
from mrs.group.queues import GetWaiter, TargetQueue
from mrs.group.recovery import by_priority
from mrs.group.shapes import Entry
from mrs.model import Address, DeliveryMode, Status

SOURCE, TARGET = Address(1, 13), Address(1, 11)


def entry(seq: int, priority: int, msg_class: int = 0, cid: bytes = b"") -> Entry:
    made = Entry(seq, b"x", SOURCE, TARGET, DeliveryMode.WF_DQF, priority=priority)
    made.msg_class, made.correlation_id, made.journaled = msg_class, cid, True
    return made


def small_window(window: int):
    """The queue module's window bounds made small, so that entries go cold."""
    return patch.multiple(
        "mrs.group.queues",
        WINDOW_ENTRIES_MAX=window,
        REFILL_BELOW=max(1, window // 2),
        REFILL_MIN=2,
    )


def cold_queue() -> tuple[TargetQueue, dict[int, Entry]]:
    """A queue whose cold entries are read back by seq from `disk`."""
    disk: dict[int, Entry] = {}
    queue = TargetQueue(QueueConfig(id=11, name="Q"), TARGET)
    queue.load_cold = lambda seqs: [disk[seq] for seq in seqs if seq in disk]
    return queue, disk


def order(entries: list[Entry]) -> list[int]:
    return [e.seq for e in sorted(entries, key=lambda e: (-e.priority, e.seq))]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 99), max_size=60), st.integers(1, 12), st.data())
def test_takes_by_priority_then_arrival_with_cold_lanes_and_put_backs(
    priorities: list[int], window: int, data
) -> None:
    with small_window(window):
        check_takes_in_order(priorities, data)


def check_takes_in_order(priorities: list[int], data) -> None:
    queue, disk = cold_queue()
    entries = [entry(seq, priority) for seq, priority in enumerate(priorities, start=1)]
    for made in entries:
        disk[made.seq] = made
        queue.offer(made)
    assert queue.waiting == len(entries)
    taken = []
    while (got := queue.take()) is not None:
        if data.draw(st.booleans()):
            queue.put_back(got)  # a failed delivery: back to its place
            got = queue.take()
            assert got is not None
        taken.append(got.seq)
    assert taken == order(entries)
    assert queue.waiting == 0 and len(queue.index) == 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 3)), max_size=40),
    st.lists(st.tuples(st.sampled_from(["cid", "class", "prio"]), st.integers(0, 3)), max_size=20),
    st.integers(1, 8),
)
def test_a_selective_take_is_the_first_match_in_queue_order(
    messages: list[tuple[int, int, int]], asks: list[tuple[str, int]], window: int
) -> None:
    with small_window(window):
        check_selective_takes(messages, asks)


def check_selective_takes(
    messages: list[tuple[int, int, int]], asks: list[tuple[str, int]]
) -> None:
    queue, disk = cold_queue()
    waiting = []
    for seq, (priority, msg_class, cid) in enumerate(messages, start=1):
        made = entry(seq, priority, msg_class, b"c%d" % cid)
        disk[seq] = made
        waiting.append(made)
        queue.offer(made)
    for kind, value in asks:
        select = {
            "cid": by_correlation_id(b"c%d" % value),
            "class": Selection(Key("msg_class", "eq", value % 3), Key("priority", "le", 2)),
            "prio": Selection(Key("priority", "gt", value)),
        }[kind]
        expected = next(
            (
                e.seq
                for e in sorted(waiting, key=lambda e: (-e.priority, e.seq))
                if select.matches(e)
            ),
            None,
        )
        got = queue.take(select)
        assert (got.seq if got else None) == expected
        waiting = [e for e in waiting if got is None or e.seq != got.seq]
    assert [e.seq for e in iter(queue.take, None)] == order(waiting)


def test_a_parked_selective_get_takes_only_its_match_and_plain_gets_keep_order() -> None:
    queue = TargetQueue(QueueConfig(id=11, name="Q"), TARGET)
    delivered: list[tuple[str, int]] = []
    queue.park(
        GetWaiter(
            lambda e, premarked=False: delivered.append(("sel", e.seq)),
            1,
            1,
            select=by_correlation_id(b"want"),
        )
    )
    queue.offer(entry(1, 9, cid=b"other"))
    assert delivered == [] and queue.waiting == 1
    queue.park(GetWaiter(lambda e, premarked=False: delivered.append(("plain", e.seq)), 1, 2))
    queue.serve_waiters()
    assert delivered == [("plain", 1)]
    queue.offer(entry(2, 0, cid=b"want"))
    assert delivered == [("plain", 1), ("sel", 2)] and queue.selective_waiters == 0


@pytest.mark.parametrize(
    "keys, problem",
    [
        ([], "no keys"),
        ([["size", "eq", 1]], "attribute 'size'"),
        ([["priority", "like", 1]], "operator 'like'"),
        ([["priority", "eq", 100]], "out of range"),
        ([["msg_class", "eq", "1"]], "takes an int"),
        ([["correlation_id", "gt", b"a"]], "eq or ne only"),
        ([["correlation_id", "eq", b"x" * 33]], "at most 32"),
        ([["source", "eq", "nowhere"]], "'G.Q'"),
        ("priority", "a list"),
        ([["priority", "eq", 1]] * 9, "at most 8"),
    ],
)
def test_a_malformed_selection_is_refused_badparam_in_one_line(keys, problem) -> None:
    with pytest.raises(Refused) as refused:
        from_wire(keys)
    assert refused.value.status == Status.BADPARAM
    assert problem in str(refused.value) and "\n" not in str(refused.value)


def test_the_window_bound_is_the_backlog_module_s() -> None:
    assert backlog.REFILL_MIN < backlog.REFILL_BELOW < backlog.WINDOW_ENTRIES_MAX


def test_recovery_splits_seqs_into_priority_lanes_and_leaves_orphans() -> None:
    known = {3: 7, 5: 99, 8: 7, 42: 1}  # 42: its record is gone (an orphan key)
    lanes = by_priority(array("Q", [1, 3, 5, 8, 9]), known)
    assert [(priority, list(seqs)) for priority, seqs in lanes] == [
        (0, [1, 9]),
        (7, [3, 8]),
        (99, [5]),
    ]
    assert known == {42: 1}  # what recovery then deletes
    assert [(p, list(s)) for p, s in by_priority(array("Q", [4, 6]), None)] == [(0, [4, 6])]
