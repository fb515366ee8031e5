"""Each broken build (mrs.testing.broken_builds) departs from the kept rules at its one
point, through the real rooms, and nowhere else; switches combine; an unknown word is
one line for the operator.

Real LMDB journals with fsync and the production InlineWriter, driven in process (the
helpers of tests/process/test_group_rooms.py), with the part handed to `Group` by
constructor as `mrs serve` and the simulator do.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from journals import InlineWriter, Journal, JournalStore, queue_key
from mrs import protocol as wire
from mrs.config.bus import parse_config
from mrs.errors import Refused
from mrs.exit_status import CommandError
from mrs.group import KEPT, Group, Guarantees
from mrs.group.confirm_run import ConfirmRun
from mrs.model import DeliveryMode, ForceJrn, Status
from mrs.testing.broken_builds import (
    UNSAFE_ACK_BEFORE_COMMIT,
    UNSAFE_CONFIRM_WITHOUT_DELETE,
    UNSAFE_FORGET_UNCONFIRMED_ON_DETACH,
    UNSAFE_POSSDUPL_ALWAYS,
    UNSAFE_SKIP_POSSDUPL,
    UNSAFE_SWITCHES,
    broken_build,
)
from tests.process.test_group_rooms import BUS, JOURNAL_BYTES, ManualTimers, Node, only, put


def open_group(directory: Path, guarantees: Guarantees) -> Node:
    bus = parse_config(BUS, directory / "bus.toml")
    config = bus.group(1)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    store = JournalStore(config.data_dir / "journals", JOURNAL_BYTES)
    writer = InlineWriter(store, lambda: None)
    group = Group(bus, config, store, writer, ManualTimers(), guarantees=guarantees)
    group.recover()
    return Node(group, store, writer)


def delivered_once(node: Node) -> tuple[wire.Delivery, object]:
    """One WF_DQF message put to IN, stored, got and its mark made durable."""
    sender, receiver = node.session("OUT"), node.session("IN")
    node.group.put(sender, put("IN", b"one", DeliveryMode.WF_DQF))
    node.commit()
    node.group.get(receiver, wire.Get(request_id=2, timeout_ms=0))
    node.commit()
    return only(receiver.events, wire.Delivery), receiver


def answered_before_commit(node: Node) -> bool:
    sender = node.session("OUT")
    node.group.put(sender, put("IN", b"one", DeliveryMode.WF_DQF))
    early = any(isinstance(event, wire.PutDone) for event in sender.events)
    node.commit()
    return early


def first_status(node: Node) -> int:
    return delivered_once(node)[0].delivery_status


def redelivery_status(node: Node) -> int:
    _, receiver = delivered_once(node)
    node.group.detach(receiver)
    again = node.session("IN")
    node.group.get(again, wire.Get(request_id=3, timeout_ms=0))
    node.commit()
    return only(again.events, wire.Delivery).delivery_status


def kept_after_confirm(node: Node, run: bool) -> bool:
    """Whether the DQF still holds a message once its confirm was answered (alone, or
    in a confirm run: both write what the part says a confirm writes)."""
    delivery, receiver = delivered_once(node)
    force_j = int(ForceJrn.NO_JRN) if run else 0  # a run takes confirms that write no PCJ
    confirm = wire.Confirm(request_id=4, seq=delivery.seq, confirm_value=0, force_j=force_j)
    if run:
        confirm_run = ConfirmRun(receiver)
        node.group.confirm(receiver, confirm, confirm_run)
        node.group.end_confirm_run(confirm_run)
    else:
        node.group.confirm(receiver, confirm)
    node.commit()
    assert only(receiver.events, wire.Confirmed).seq == delivery.seq
    return node.store.get_raw(Journal.DQF, queue_key(10, delivery.seq)) is not None


def redelivered_after_detach(node: Node) -> bool:
    _, receiver = delivered_once(node)
    node.group.detach(receiver)
    again = node.session("IN")
    try:
        node.group.get(again, wire.Get(request_id=3, timeout_ms=0))
    except Refused as refused:
        assert refused.status == Status.NOMOREMSG
        return False
    node.commit()
    return bool(again.events)


CASES: dict[str, tuple[Callable[[Node], object], object, object]] = {
    UNSAFE_ACK_BEFORE_COMMIT: (answered_before_commit, False, True),
    UNSAFE_POSSDUPL_ALWAYS: (first_status, Status.CONFIRMREQ, Status.POSSDUPL),
    UNSAFE_SKIP_POSSDUPL: (redelivery_status, Status.POSSDUPL, Status.CONFIRMREQ),
    UNSAFE_CONFIRM_WITHOUT_DELETE: (lambda node: kept_after_confirm(node, False), False, True),
    UNSAFE_FORGET_UNCONFIRMED_ON_DETACH: (redelivered_after_detach, True, False),
}
"""switch -> (what is observed, under KEPT, under the broken build)."""


@pytest.mark.parametrize("switch", sorted(UNSAFE_SWITCHES))
def test_each_broken_build_breaks_its_promise_and_kept_keeps_it(tmp_path, switch) -> None:
    assert set(CASES) == UNSAFE_SWITCHES
    observe, kept, broken = CASES[switch]
    for name, part, expected in (("kept", KEPT, kept), ("broken", broken_build({switch}), broken)):
        node = open_group(tmp_path / name, part)
        assert observe(node) == expected, f"{switch}: {name}"
        node.close()


@pytest.mark.parametrize("switch", sorted(UNSAFE_SWITCHES - {UNSAFE_ACK_BEFORE_COMMIT}))
def test_a_broken_build_keeps_every_other_promise(tmp_path, switch) -> None:
    """Its departure is one point: a put is still answered only after its commit."""
    node = open_group(tmp_path, broken_build({switch}))
    assert answered_before_commit(node) is False
    node.close()


def test_a_confirm_run_writes_what_the_part_says_a_confirm_writes(tmp_path) -> None:
    kept = open_group(tmp_path / "kept", KEPT)
    assert kept_after_confirm(kept, run=True) is False
    kept.close()
    broken = open_group(tmp_path / "broken", broken_build({UNSAFE_CONFIRM_WITHOUT_DELETE}))
    assert kept_after_confirm(broken, run=True) is True
    broken.close()


def test_switches_combine_and_none_is_the_kept_rules() -> None:
    assert broken_build(set()) is KEPT and KEPT.broken == frozenset()
    both = broken_build({UNSAFE_SKIP_POSSDUPL, UNSAFE_ACK_BEFORE_COMMIT})
    assert both.broken == {UNSAFE_SKIP_POSSDUPL, UNSAFE_ACK_BEFORE_COMMIT}


def test_an_unknown_switch_is_one_line_naming_where_it_came_from() -> None:
    with pytest.raises(CommandError, match=r"--unsafe: unknown switches \['bogus'\]") as refused:
        broken_build({"bogus", UNSAFE_SKIP_POSSDUPL})
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("part", ["kept", "broken"])
def test_a_memory_message_forgotten_on_detach_leaves_the_queue_counts_whole(tmp_path, part) -> None:
    """A WF_ACK message (in memory, awaiting its confirm) delivered, then its consumer
    leaves: the kept rules put it back and count it as waiting; the broken build drops
    it, and the queue's own method (not the harness) takes it off every count."""
    guarantees = KEPT if part == "kept" else broken_build({UNSAFE_FORGET_UNCONFIRMED_ON_DETACH})
    node = open_group(tmp_path, guarantees)
    queue = node.group.queues[10]
    sender, receiver = node.session("OUT"), node.session("IN")
    node.group.put(sender, put("IN", b"four", DeliveryMode.WF_ACK))
    assert (queue.memory_count, queue.memory_bytes) == (1, 4)
    node.group.get(receiver, wire.Get(request_id=2, timeout_ms=0))
    assert only(receiver.events, wire.Delivery).body == b"four"
    assert (queue.memory_count, queue.memory_bytes) == (0, 0)
    node.group.detach(receiver)
    waiting = (1, 4) if part == "kept" else (0, 0)
    assert (queue.memory_count, queue.memory_bytes, queue.pending.count) == (*waiting, waiting[0])
    node.close()
