"""A message that comes back to a queue whose lane has messages on disk (the cold
backlog beyond the in-memory window, mrs.group.backlog) comes back at its arrival
place: behind the older messages still on disk, before the later ones, whether its
receiver left without confirming, its delivery mark's commit failed, or a selective
GetBatch's frame was full; on a fresh queue and on one read back after a restart
(every message on disk then). docs/delivery-modes.md promises it. Also: an
operator's browse does not list a message a selective get took from disk, and
(pinned) after a restart a lane is in seq order, by sending group.

In process with real LMDB and the production InlineWriter (tests/process/
test_group_rooms.py's open_node; a restart closes and reopens the journals), the
in-memory window made 8 entries so that 20 messages leave 12 on disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import DeliveryMode, Status
from mrs import protocol as wire
from mrs.group.queues import TargetQueue
from mrs.group.shapes import Entry
from mrs.group.wiring import Group
from mrs.ops.admin_actions import _places, _read_cold
from tests.process.test_group_rooms import LinkPair, Node, open_node, put, take_all
from tests.process.test_receive_order_probes_20 import (
    FailingApply,
    open_group,
    put_dqf,
    take,
    take_rest,
)

COUNT = 20
SELECTED = 18
"""m18 waits on disk (beyond the window of 8) when a selective get takes it."""
BIG_BODY_BYTES = 600_000
"""Two such bodies do not fit in one DeliveryBatch (DELIVERY_BATCH_BYTES_MAX, 1 MiB)."""


@pytest.fixture(autouse=True)
def small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A window of 8 entries, refilled below 4 (the production bound is 1000)."""
    monkeypatch.setattr("mrs.group.queues.WINDOW_ENTRIES_MAX", 8)
    monkeypatch.setattr("mrs.group.queues.REFILL_BELOW", 4)


def body(number: int, big: bool = False) -> bytes:
    return b"m%d" % number + (b"." * BIG_BODY_BYTES if big else b"")


def filled(directory: Path, restart: bool, classes: dict[int, int] | None = None) -> Node:
    """m1..m20 stored on ANY (correlation id c<n>, class from `classes` or 0); with
    `restart`, the group closed and reopened: every message read back from disk."""
    classes = classes or {}
    node = open_group(directory)
    items = [(body(n, n in classes), 0, b"c%d" % n, classes.get(n, 0)) for n in range(1, COUNT + 1)]
    put_dqf(node, "ANY", items)
    queue = node.group.queues[11]
    assert (len(queue.pending), queue.pending.cold_count) == (8, 12)
    if restart:
        node.close()
        node = open_group(directory)
        queue = node.group.queues[11]
        assert (len(queue.pending), queue.pending.cold_count) == (0, COUNT)
    return node


def in_order(numbers: range | list[int], again: int = 0, big: tuple[int, ...] = ()) -> list:
    """(body, status) of `numbers` as take_rest reports them, `again` POSSDUPL."""
    return [
        (body(n, n in big), Status.POSSDUPL if n == again else Status.CONFIRMREQ) for n in numbers
    ]


@pytest.mark.parametrize("restart", [False, True], ids=["fresh", "after-restart"])
def test_a_message_selected_from_disk_comes_again_behind_the_older_ones(
    tmp_path: Path, restart: bool
) -> None:
    """Before: a receiver that took m18 by correlation id from the cold backlog and
    left unconfirmed saw the next receiver get m18 first, ahead of m1..m17 (detach
    put it at the front of its lane's window: it had no arrival number)."""
    node = filled(tmp_path, restart)
    receiver = node.session("ANY")
    got = take(node, receiver, [["correlation_id", "eq", b"c%d" % SELECTED]])
    assert got.body == body(SELECTED)
    node.group.detach(receiver)  # its connection closed, m18 unconfirmed
    assert take_rest(node, "ANY") == in_order(range(1, COUNT + 1), again=SELECTED)
    node.close()


@pytest.mark.parametrize("restart", [False, True], ids=["fresh", "after-restart"])
def test_a_message_whose_delivery_mark_failed_keeps_its_place_on_disk(
    tmp_path: Path, restart: bool
) -> None:
    """Before: a selective get took m18 from the cold backlog, the commit of its
    delivery mark failed (JOURNAL_FAIL), and m18 went back to the front of the
    window: the next plain get returned m18 before m1..m17."""
    node = filled(tmp_path, restart)
    failing = FailingApply(node.store)
    node.writer.store = failing
    receiver = node.session("ANY")
    failing.failing = True
    select = [["correlation_id", "eq", b"c%d" % SELECTED]]
    node.group.get(receiver, wire.Get(request_id=5, timeout_ms=0, select=select))
    node.commit()
    failure = receiver.events.pop()
    assert isinstance(failure, wire.Failure) and failure.status == Status.JOURNAL_FAIL, failure
    failing.failing = False
    node.group.detach(receiver)
    # Never handed out (its mark was not written): it comes in its place, not POSSDUPL.
    assert take_rest(node, "ANY") == in_order(range(1, COUNT + 1))
    node.close()


@pytest.mark.parametrize("restart", [False, True], ids=["fresh", "after-restart"])
def test_a_message_left_out_of_a_full_batch_frame_keeps_its_place_on_disk(
    tmp_path: Path, restart: bool
) -> None:
    """Before: a selective GetBatch for class 2 took m17 and m18 from the cold
    backlog; m18 did not fit in the frame and was put back at the front of the
    window, so the next plain get returned m18 before m1..m16."""
    big = (17, SELECTED)
    node = filled(tmp_path, restart, classes=dict.fromkeys(big, 2))
    receiver = node.session("ANY")
    request = wire.GetBatch(
        request_id=5, count_max=2, timeout_ms=0, select=[["msg_class", "eq", 2]]
    )
    node.group.get_batch(receiver, request)
    node.commit()
    batch = receiver.events.pop()
    assert isinstance(batch, wire.DeliveryBatch), batch
    assert [delivery.body for delivery in batch.deliveries] == [body(17, True)]
    node.group.confirm(receiver, wire.Confirm(6, batch.deliveries[0].seq, 0, 2))
    node.commit()
    node.group.detach(receiver)
    expected = in_order([n for n in range(1, COUNT + 1) if n != 17], big=big)
    assert take_rest(node, "ANY") == expected
    node.close()


@pytest.mark.parametrize("restart", [False, True], ids=["fresh", "after-restart"])
def test_an_arrival_handed_to_a_parked_selective_get_comes_again_behind_the_disk(
    tmp_path: Path, restart: bool
) -> None:
    """Before: m21 arrived for a parked selective get while m9..m20 (all 20 after a
    restart) waited on disk; its receiver left unconfirmed and m21 came again at
    the end of the in-memory window, ahead of the older messages still on disk."""
    node = filled(tmp_path, restart)
    receiver = node.session("ANY")
    parked = wire.Get(request_id=5, timeout_ms=-1, select=[["msg_class", "eq", 2]])
    node.group.get(receiver, parked)
    assert receiver.events == []
    put_dqf(node, "ANY", [(body(21), 0, b"c21", 2)])
    node.commit()  # the delivery mark of the arrival handed to the parked get
    assert [event.body for event in receiver.events] == [body(21)]
    node.group.detach(receiver)
    assert take_rest(node, "ANY") == in_order(range(1, COUNT + 2), again=21)
    node.close()


@pytest.mark.parametrize("restart", [False, True], ids=["fresh", "after-restart"])
def test_a_selected_message_whose_place_was_read_back_returns_to_that_place(
    tmp_path: Path, restart: bool
) -> None:
    """The window was refilled past m18's place while m18 was out (its receiver took
    m1..m11 with plain gets, confirming each): m12..m17 and m19 waited in memory
    when the receiver left. Before: m18 came again first, ahead of m12..m17."""
    node = filled(tmp_path, restart)
    receiver = node.session("ANY")
    assert take(node, receiver, [["correlation_id", "eq", b"c%d" % SELECTED]]).body == body(18)
    for number in range(1, 12):
        delivery = take(node, receiver)
        assert delivery.body == body(number)
        node.group.confirm(receiver, wire.Confirm(number, delivery.seq, 0, 2))
        node.commit()
    window = [entry.body for entry in node.group.queues[11].pending]
    assert window[:7] == [body(number) for number in (12, 13, 14, 15, 16, 17, 19)]
    node.group.detach(receiver)
    assert take_rest(node, "ANY") == in_order(range(12, COUNT + 1), again=SELECTED)
    node.close()


def _browsed(group: Group, queue: TargetQueue) -> Iterator[Entry]:
    """The waiting messages a browse lists, in its order (mrs.ops.admin_actions
    `_browse`: its places, a cold one read from the DQF, one gone skipped)."""
    for seq, held in _places(queue):
        entry = held if held is not None else _read_cold(group, queue, seq)
        if entry is not None:
            yield entry


@pytest.mark.parametrize("restart", [False, True], ids=["fresh", "after-restart"])
def test_an_operators_browse_does_not_show_a_selected_message_as_waiting(
    tmp_path: Path, restart: bool
) -> None:
    """Before: after a selective get took m18 from the cold backlog (delivered, not
    yet confirmed), `mrs admin browse` still listed m18 among the waiting messages
    (its seq stays in the backlog's array until a refill passes it, and browse read
    its record from the DQF), beside a `waiting` count that did not include it."""
    node = filled(tmp_path, restart)
    receiver = node.session("ANY")
    assert take(node, receiver, [["correlation_id", "eq", b"c%d" % SELECTED]]).body == body(18)
    queue = node.group.queues[11]
    shown = [entry.body for entry in _browsed(node.group, queue)]
    assert shown == [body(n) for n in range(1, COUNT + 1) if n != SELECTED]
    assert queue.waiting == len(shown)
    node.close()


def test_after_a_restart_a_lane_is_in_seq_order_each_sending_group_in_its_own_order(
    tmp_path: Path,
) -> None:
    """Pins what docs/delivery-modes.md now says (it said the order after a restart
    was arrival order): a seq carries its sending group in its high bits, so after a
    restart group 1's own message comes before group 2's that arrived before it over
    the link; each group's messages keep their put order."""
    pair = LinkPair(tmp_path)
    remote = pair.nodes[2].session("OUT")
    for request_id, text in enumerate((b"from2-a", b"from2-b"), 1):
        request = put("1.10", text, DeliveryMode.WF_SAF, request_id=request_id)
        pair.nodes[2].group.put(remote, request)
    pair.nodes[2].commit()
    pair.connect()
    pair.run()
    local = pair.nodes[1].session("OUT")
    pair.nodes[1].group.put(local, put("IN", b"from1-a", DeliveryMode.WF_DQF, request_id=9))
    pair.nodes[1].commit()
    arrived = [entry.body for entry in pair.nodes[1].group.queues[10].pending]
    assert arrived == [b"from2-a", b"from2-b", b"from1-a"]
    pair.close()
    restarted = open_node(tmp_path, 1)
    got = [delivery.body for delivery in take_all(restarted, "IN", 3)]
    assert got == [b"from1-a", b"from2-a", b"from2-b"]
    restarted.close()
