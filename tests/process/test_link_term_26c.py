"""A replicated group's old active, back after its successor drained its SAF, is
refused by the peer group: a link Hello says the dialing active's term, and a peer
refuses one older than a term it linked with (mrs.group.incarnation `admit_term`).

Why: `mrs sim swarm --replicated --seed 52113` delivered three messages again,
unmarked, after their confirm. Group 1's active (instance b, term 2) was paused with
a slow clock ("lease-expire") while its SAF held three messages for group 3. Instance
c won term 3, drained them to group 3 and deleted them; its "forget" notices made
group 3 drop their dedupe keys, and group 3's consumers got and confirmed them. Then
b resumed, still believing in its lease: its link dialed group 3, which took the
connection in place of c's, and b drained the same three records from its own stale
journals. Group 3 knew them no more (keys forgotten, DQF records confirmed): stored
and delivered a second time, CONFIRMREQ. b stepped down 0.37 s later.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import trio

from journals import Journal
from mrs import protocol as wire
from mrs.core.seqspace import GROUP_SHIFT
from mrs.group.link_driver import PeerOfEarlierRelease, PeerWithoutTerms, _refusal
from mrs.group.link_session import PeerLink
from mrs.model import DeliveryMode, Status, Uma
from sim.bus import LinkedBus
from sim.simulation import DEFAULT_WORKLOAD, replicated
from sim.swarm import run_seed
from tests.process.test_group_rooms import Node, open_node
from tests.process.test_links import QUEUES

WAIT_S = 20.0
INCARNATION = os.urandom(16)
"""Group 1's journals' incarnation, as the raw dialer below says it."""


def test_seed_52113_an_old_active_does_not_drain_again_what_its_successor_drained() -> None:
    logging.disable(logging.CRITICAL)
    try:
        _, verdict = run_seed(52113, shape=replicated(DEFAULT_WORKLOAD))
    finally:
        logging.disable(logging.NOTSET)
    assert verdict.ok, f"{verdict.counts()} (mrs sim swarm --replicated --seed 52113)"


async def _dial(bus: LinkedBus, term: int) -> wire.Welcome | wire.Fatal:
    """Group 1's link Hello saying `term`, as a replicated group's active dials; the
    event group 2 answers with."""
    host, port = bus.address(2).rsplit(":", 1)
    connection = wire.Connection("client")
    hello = wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1, False, INCARNATION, term)
    with trio.fail_after(WAIT_S):
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(connection.send(hello))
            while not (events := connection.events()):
                connection.receive_data(await stream.receive_some(65536))
    answer = events[0]
    assert isinstance(answer, wire.Welcome | wire.Fatal), answer
    return answer


async def test_a_link_hello_of_an_older_term_is_refused_also_after_a_restart(tmp_path) -> None:
    """Group 2 alone runs: "group 1" dials as the active of term 3, then as the old
    active of term 2 (refused, LINK_DOWN, saying why), across a restart of group 2
    (the term is in its journals); the same term and a newer one are taken."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES)
    await trio.to_thread.run_sync(bus.processes[2].start)
    try:
        assert isinstance(await _dial(bus, 3), wire.Welcome)
        refused = await _dial(bus, 2)
        assert isinstance(refused, wire.Fatal), refused
        assert refused.status == int(Status.LINK_DOWN)
        assert "term 2" in refused.message and "old active" in refused.message
        await trio.to_thread.run_sync(bus.processes[2].restart)
        assert isinstance(await _dial(bus, 2), wire.Fatal)
        assert isinstance(await _dial(bus, 3), wire.Welcome)
        assert isinstance(await _dial(bus, 4), wire.Welcome)
        assert isinstance(await _dial(bus, 3), wire.Fatal)
    finally:
        bus.stop()


def _dqf_records(node: Node) -> int:
    return sum(1 for _ in node.store.raw_items(Journal.DQF))


@dataclass(eq=False)
class _Channel:
    closed: bool = False
    sent: list = field(default_factory=list)

    def send(self, event: object) -> None:
        self.sent.append(event)


def test_a_transfer_on_a_replaced_connection_is_not_stored(tmp_path: Path) -> None:
    """An old active's connection taken before its successor's, then replaced by it:
    what still arrives on the old one is not stored (its sender, if it is still the
    peer, sends it again on its own connection). Real LMDB journals, group 2 driven
    in process through its link session."""
    node = open_node(tmp_path, 2)
    link = PeerLink(node.group.link_rooms, 1, now_s=lambda: 0.0)
    old, new = _Channel(), _Channel()
    link.up(old)
    link.up(new)  # the successor's connection replaces the old active's
    message = wire.TransferredMessage(
        (1 << GROUP_SHIFT) | 7, 10, 1, 11, b"stale", 0, 0, 0,
        int(DeliveryMode.WF_DQF), int(Uma.SAF), b"", 5, None, True,
    )  # fmt: skip
    link.handle(wire.LinkTransfer(1, [message]), old)
    node.commit()
    assert not any(isinstance(event, wire.LinkAck) for event in old.sent), old.sent
    assert _dqf_records(node) == 0
    link.handle(wire.LinkTransfer(1, [message]), new)  # on the live one: stored
    node.commit()
    assert _dqf_records(node) == 1


def test_a_peer_of_the_release_before_the_term_is_dialed_again_without_it() -> None:
    """A group of the release before the link term refuses a replicated group's Hello
    for its one field too many; that refusal names the 6 fields it reads, the
    incarnation among them: the next Hello leaves the term out and keeps the
    incarnation, also for a peer whose incarnation is recorded (before, the refusal
    was taken for journals changed, and the link stayed down until that peer was
    upgraded)."""
    message = "protocol error: Hello frame has 7 fields, expected 6"
    error = _refusal(message, INCARNATION, 2, _Recorded())  # type: ignore[arg-type]
    assert isinstance(error, PeerWithoutTerms), error
    before_incarnations = "protocol error: Hello frame has 6 fields, expected 5"
    assert isinstance(_refusal(before_incarnations, INCARNATION), PeerOfEarlierRelease)


@dataclass
class _Recorded:
    """PeerIncarnations' part `_refusal` reads: the peer's incarnation is recorded."""

    config_path: str = "bus.toml"
    group_id: int = 1

    def recorded(self, peer_id: int) -> bytes:
        return INCARNATION
