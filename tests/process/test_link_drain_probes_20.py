"""SAF drains between two plain groups when the receiving group holds a seq of the
sender's already under another message: a sender whose data directory was replaced
and whose link was reset (`mrs admin reset-link`) counts its seqs from the start
again (mrs.group.inbound `_held_already`, docs/links.md "A peer that comes back with
other journals").

In process (two groups' rooms joined by an in-memory wire, real LMDB) the link
messages are counted exactly; with real `mrs serve` processes the receiver is
SIGKILLed while the drain waits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode as ClientMode
from clients import NoMoreMessages
from clients import Status as ClientStatus
from clients import Uma as ClientUma
from journals import Journal, JournalStore, WriteBatch
from mrs import protocol as wire
from mrs.core.seqspace import RESERVED_KEY, counter_of
from mrs.group.link_session import PeerLink
from mrs.model import DeliveryMode, Status
from sim.bus import LinkedBus
from tests.cli_helpers import run_mrs
from tests.process.test_group_rooms import FakeSession, LinkPair, Node, only, open_node, put
from tests.process.test_links import proc_bus, wait_for_link

__all__ = ["proc_bus"]  # the fixture: two real groups behind a fault proxy

RETRIES = 3
WAIT_S = 30.0


def rebuild(pair: LinkPair, group_id: int, directory: Path) -> Node:
    """Group `group_id` again from an empty data directory (its journals replaced),
    its link reset: it counts its seqs from the start again."""
    pair.disconnect()
    pair.nodes[group_id].close()
    peer_id = 3 - group_id
    pair.nodes[group_id] = open_node(directory, group_id)
    pair.links[group_id] = PeerLink(
        pair.nodes[group_id].group.link_rooms, peer_id, now_s=lambda: pair.now_s
    )
    return pair.nodes[group_id]


def get_confirm(node: Node, receiver: FakeSession, count: int) -> list[wire.Delivery]:
    """`count` deliveries for the attached `receiver`, each confirmed as it comes."""
    got = []
    for request_id in range(1, count + 1):
        node.group.get(receiver, wire.Get(request_id=request_id, timeout_ms=0))
        node.commit()
        delivery = only(receiver.events, wire.Delivery)
        receiver.events.clear()
        got.append(delivery)
        confirm = wire.Confirm(request_id=request_id, seq=delivery.seq, confirm_value=0, force_j=0)
        node.group.confirm(receiver, confirm)
        node.commit()
    return got


def test_a_drain_refused_for_a_held_seq_backs_off_and_delivers_after_the_confirm(
    tmp_path: Path,
) -> None:
    """Group 2 holds group 1's "first" unconfirmed; group 1 is rebuilt from nothing
    and its "second" comes under the same seq, refused DQF_FULL. Before, the drain
    asked group 2 for room, group 2 held its free slots for it at once, and the drain
    resent "second" into them as fast as the link answered: an endless exchange (the
    link never settled, a WARNING per transfer on group 2). Now the drain backs off
    (RETRY), each retry sends the stuck message alone, group 2 holds no slot for it,
    and once "first" is confirmed "second" and "third" arrive, in order, once."""
    pair = LinkPair(tmp_path)
    try:
        old = pair.nodes[1].session("OUT")
        pair.nodes[1].group.put(old, put("2.10", b"first", DeliveryMode.WF_SAF))
        pair.nodes[1].commit()
        pair.connect()
        pair.run()
        assert pair.nodes[2].store.count(Journal.DQF) == 1
        sender = rebuild(pair, 1, tmp_path / "rebuilt").session("OUT")
        for request_id, body in enumerate((b"second", b"third"), start=1):
            pair.nodes[1].group.put(
                sender, put("2.10", body, DeliveryMode.WF_SAF, request_id=request_id)
            )
        pair.nodes[1].commit()
        pair.connect()
        pair.run()  # settles: the drain waits out its backoff
        link = pair.links[1]
        assert link.messages_sent == 2  # the first pass: the whole backlog
        info = link.status_info()
        assert info["drain"] == "retry" and "holds this seq" in info["drain_wait"]["reason"]
        assert pair.nodes[2].group.status_info()["dqf_held_for_drains"] == {}
        for _ in range(RETRIES):
            pair.now_s = link.retry_until
            pair.run()
        assert link.messages_sent == 2  # each message counted once (its first send)
        assert link.messages_resent == RETRIES  # the stuck one alone, once per backoff
        receiver = pair.nodes[2].session("IN")
        assert [d.body for d in get_confirm(pair.nodes[2], receiver, 1)] == [b"first"]
        pair.now_s = link.retry_until
        pair.run()
        assert pair.nodes[1].store.count(Journal.SAF) == 0
        got = get_confirm(pair.nodes[2], receiver, 2)
        assert [(d.body, d.delivery_status) for d in got] == [
            (b"second", Status.CONFIRMREQ),
            (b"third", Status.CONFIRMREQ),
        ]
        assert pair.nodes[2].store.count(Journal.DQF) == 0
        assert link.status_info()["drain"] == "running"
    finally:
        pair.close()


def test_a_drain_waiting_for_room_gives_it_back_when_it_meets_a_held_seq(
    tmp_path: Path,
) -> None:
    """Group 1's DQF (5 slots) is full; rebuilt group 2's drain waits for room there,
    then the slot group 1 holds for it goes to a message under a seq group 1 holds
    already. Before, the drain asked for room again and resent into the same held
    slot without end, and group 1's own senders found the DQF full meanwhile. Now the
    drain gives the slot back and backs off: a local put takes it."""
    pair = LinkPair(tmp_path)
    try:
        first, local = pair.nodes[1], pair.nodes[1].session("OUT")
        for request_id in range(1, 5):
            first.group.put(local, put("IN", b"local", DeliveryMode.WF_DQF, request_id=request_id))
        old = pair.nodes[2].session("OUT")
        pair.nodes[2].group.put(old, put("2.10", b"own", DeliveryMode.WF_DQF))  # seq 1
        pair.nodes[2].group.put(old, put("1.10", b"old", DeliveryMode.WF_SAF, request_id=8))
        pair.nodes[2].commit()
        pair.connect()
        pair.run()
        assert first.store.count(Journal.DQF) == 5  # full: 4 local, "old" (seq 2)
        rebuilt = rebuild(pair, 2, tmp_path / "rebuilt")
        sender = rebuilt.session("OUT")
        for request_id, body in enumerate((b"new1", b"new2"), start=1):  # seqs 1 and 2
            rebuilt.group.put(sender, put("1.10", body, DeliveryMode.WF_SAF, request_id=request_id))
        rebuilt.commit()
        pair.connect()
        pair.run()
        link = pair.links[2]
        assert link.status_info()["room_credit"] == 0  # "new1" waits for room
        receiver = first.session("IN")
        for confirmed in range(1, 3):  # room for "new1", then for "new2": held seq
            assert [d.body for d in get_confirm(first, receiver, 1)] == [b"local"]
            pair.run()
            assert first.store.count(Journal.DQF) == 4 + (confirmed == 1)
        info = link.status_info()
        assert info["room_credit"] is None and "holds this seq" in info["drain_wait"]["reason"]
        assert first.group.status_info()["dqf_held_for_drains"] == {}
        sent = (link.messages_sent, link.messages_resent)
        first.group.put(local, put("IN", b"later", DeliveryMode.WF_DQF, request_id=9))
        first.commit()
        assert only(local.events[-1:], wire.PutDone).delivery_status == Status.STORED
        pair.run()
        assert (link.messages_sent, link.messages_resent) == sent  # nothing before its backoff
    finally:
        pair.close()


def wipe(bus: LinkedBus, group_id: int) -> None:
    """Replace the group's data directory by an empty one (a rebuilt host)."""
    for path in sorted(bus.data_dir(group_id).rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()


def rebuilt_counting_from(bus: LinkedBus, group_id: int, seq: int) -> None:
    """`wipe`, then new journals whose first seq will be `seq`: a rebuilt host whose
    clock was set back (a fresh group counts from its wall clock, so a rebuild
    otherwise starts above its old seqs: mrs.core.seqspace.fresh_start). The
    collision the receiver must still survive."""
    wipe(bus, group_id)
    store = JournalStore(bus.data_dir(group_id) / "journals")
    try:
        reserved = WriteBatch.empty().put_raw(
            Journal.META, RESERVED_KEY, counter_of(seq).to_bytes(8, "big")
        )
        store.commit_now(reserved)
    finally:
        store.close()


def refused_dqf_full(info: dict) -> bool:
    """The link is up and its drain was refused DQF_FULL (a held seq, here)."""
    wait = info.get("drain_wait") or {}
    return info["state"] == "up" and wait.get("status") == "DQF_FULL"


async def test_rebuilt_sender_waits_for_a_held_seq_through_a_receiver_kill(proc_bus) -> None:
    """Real processes: group 2 holds group 1's "first" unconfirmed; group 1 is
    SIGKILLed, rebuilt from an empty data directory (its clock set back:
    `rebuilt_counting_from`) and reset on group 2; its "second" comes under the seq
    of "first". Before, group 1's drain resent it (and
    "third" behind it) as fast as the link answered, thousands of link messages a
    second, and group 2 logged a WARNING for each. Now, through a SIGKILL of group 2
    meanwhile, group 1 sends a handful; once "first" is confirmed, "second" and
    "third" arrive in order, once each."""
    async with proc_bus.connect(1, "OUT") as sender:
        psb = await sender.put(
            b"first", target="2.10", delivery=ClientMode.WF_SAF, uma=ClientUma.DISC
        )
    await wait_for_link(proc_bus, 1, 2, "up", backlog=0)
    await trio.to_thread.run_sync(proc_bus.processes[1].kill)
    rebuilt_counting_from(proc_bus, 1, psb.seq)
    await trio.to_thread.run_sync(proc_bus.processes[1].start)
    async with proc_bus.connect(1, "OUT") as sender:
        seqs = []
        for body in (b"second", b"third"):
            again = await sender.put(
                body, target="2.10", delivery=ClientMode.WF_SAF, uma=ClientUma.DISC
            )
            assert again.delivery_status == ClientStatus.STORED
            seqs.append(again.seq)
    assert seqs[0] == psb.seq  # counted from the old counter again: the seq of "first"
    await wait_for_link(proc_bus, 1, 2, "down", backlog=2)  # group 2 refuses the link
    reset = run_mrs(
        "admin", "reset-link", "1", "--config", str(proc_bus.config_path), "--group", "2"
    )
    assert reset.returncode == 0, reset.stderr
    await wait_for_link(proc_bus, 1, 2, condition=refused_dqf_full)
    await trio.to_thread.run_sync(proc_bus.processes[2].kill)
    await trio.to_thread.run_sync(proc_bus.processes[2].start)
    info = await wait_for_link(
        proc_bus, 1, 2, condition=lambda link: refused_dqf_full(link) and link["connections"] >= 2
    )
    assert info["saf_backlog"] == 2
    # a few retries, each of the stuck one alone
    assert info["messages_sent"] + info["messages_resent"] <= 20, info
    assert "holds this seq" in info["drain_wait"]["reason"]
    async with proc_bus.connect(2, "IN") as receiver:
        held = await receiver.get(timeout=WAIT_S)
        assert held.body == b"first"
        await receiver.confirm(held.seq)
        got = []
        for _ in range(2):
            message = await receiver.get(timeout=WAIT_S)
            got.append((message.body, message.delivery_status))
            await receiver.confirm(message.seq)
        assert got == [(b"second", ClientStatus.CONFIRMREQ), (b"third", ClientStatus.CONFIRMREQ)]
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)
    info = await wait_for_link(proc_bus, 1, 2, "up", backlog=0)
    assert info["messages_sent"] + info["messages_resent"] <= 25, info
    log = (proc_bus.directory / "group2.log").read_text(errors="replace")
    assert len(re.findall(r"WARNING.*under seqs this group holds already", log)) <= 4
