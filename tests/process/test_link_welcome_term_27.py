"""A replicated group's old active that accepts a lower-numbered group's link is
refused by the dialer: the link Welcome says the accepting active's term (to a dialer
whose Hello asked for it, `welcome_term`), and the dialer refuses one older than a
term it linked with (mrs.group.incarnation `admit_term`), before anything on that
connection is taken.

Why: the Hello carried the dialer's term, so an old active that dialed was refused,
but the other direction was open (docs/links.md said "Not fenced yet"): group 2's
active b, paused past its lease while c (term 3) drained b's SAF to group 1 and had
group 1 forget the dedupe keys, came back still taking links, welcomed group 1's next
dial and drained the same records again: stored and delivered twice, unmarked.

Real `mrs serve` for group 1 (the dialer); group 2 is a scripted fake speaking the
link protocol over a real socket, as the term it is told to be.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest
import trio

from clients import DeliveryMode, MrsError, Status, Uma
from mrs import protocol as wire
from mrs.config.bus import load_config
from mrs.core.seqspace import GROUP_SHIFT
from mrs.group.incarnation import PeerIncarnations
from mrs.group.link_driver import PeerWithoutTerms, PeerWithoutWelcomeTerms, _refusal
from mrs.server.links import link_welcome
from sim.bus import LinkedBus
from sim.ports import free_port
from tests.process.test_link_probes import GUARDS, QUEUES
from tests.process.test_links import wait_for_link

WAIT_S = 20.0
INCARNATION = os.urandom(16)
"""The fake group 2's journals' incarnation (group 1 records it at the first link)."""
EARLIER_REFUSAL = "client sent Hello frame has 8 fields, expected 7"
"""How a group of the release before the Welcome's term refuses this release's link
Hello (its `explain` wording for an array one field longer than it knows)."""
OLD_ACTIVE = "group 2's instance that welcomed this link is the active of term 2"


def _replicated_bus(directory: Path) -> LinkedBus:
    """Group 1 (run by the test) and group 2, a replicated group of three instances
    (played by the fake) at whose address group 1's link dials."""
    instances = "".join(
        f'[[group.instance]]\nname = "{name}"\nlisten = "127.0.0.1:{free_port()}"\n'
        f'replication = "127.0.0.1:{free_port()}"\ndata_dir = "g2{name}"\n'
        for name in "abc"
    )
    bus = LinkedBus(
        directory, queues=QUEUES, direct=True, group_extra=GUARDS, group_extras={2: instances}
    )
    assert bus.config_path is not None
    with bus.config_path.open("a") as config:
        config.write('\n[coordinator]\netcd = ["http://127.0.0.1:2379"]\n')
    return bus


def _transfer(request_id: int, body: bytes) -> wire.LinkTransfer:
    """Group 2 drains one message of its SAF to group 1's queue IN (10)."""
    message = wire.TransferredMessage(
        (2 << GROUP_SHIFT) | request_id, 10, 2, 11, body, 0, 0, 0,
        int(DeliveryMode.WF_DQF), int(Uma.SAF), b"", 5, None, True,
    )  # fmt: skip
    return wire.LinkTransfer(request_id, [message])


@dataclass
class Active:
    """Group 2's active instance of `term`, as a fake: welcomes group 1's link saying
    its term (when the Hello asks for it), then drains `body` at once. `earlier`: a
    group of the release before the Welcome's term, which refuses a Hello that asks."""

    term: int
    body: bytes = b""
    earlier: bool = False
    hellos: list[wire.Hello] = field(default_factory=list)
    heard: list[object] = field(default_factory=list)
    """What group 1 sent after each Welcome (LinkAcks, a Fatal, ...)."""
    changed: trio.Event = field(default_factory=trio.Event)
    scopes: list[trio.CancelScope] = field(default_factory=list)

    async def serve(self, port: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await trio.serve_tcp(self._connection, port, host="127.0.0.1", task_status=task_status)

    def drop(self) -> None:
        """Close every connection (the instance stops serving the link)."""
        for scope in self.scopes:
            scope.cancel()

    async def _connection(self, stream: trio.SocketStream) -> None:
        connection = wire.Connection("server")
        closed = (trio.BrokenResourceError, trio.ClosedResourceError)
        with trio.CancelScope() as scope, contextlib.suppress(*closed):
            self.scopes.append(scope)
            async with stream:
                while data := await stream.receive_some(65536):
                    connection.receive_data(data)
                    for event in connection.events():
                        for reply in self._replies(event):
                            await stream.send_all(connection.send(reply))  # type: ignore[arg-type]
                        self.changed.set()
                        self.changed = trio.Event()

    def _replies(self, event: object) -> list[object]:
        if isinstance(event, wire.Hello):
            self.hellos.append(event)
            if self.earlier and event.welcome_term:
                return [wire.Fatal(int(Status.PROTOCOL_ERROR), EARLIER_REFUSAL)]
            term = self.term if event.welcome_term else 0
            welcome = wire.Welcome(wire.PROTOCOL_VERSION, 2, "G2", 0, INCARNATION, term)
            drained = [_transfer(len(self.hellos), self.body)] if self.body else []
            return [welcome, *drained]
        self.heard.append(event)
        if isinstance(event, wire.Ping):
            return [wire.Pong(event.nonce)]
        if isinstance(event, wire.LinkNotice):
            ok = int(Status.SUCCESS)
            results = [wire.LinkResult(notice.seq, ok, notice.seq) for notice in event.notices]
            return [wire.LinkAck(event.request_id, results)]
        return []

    async def wait_until(self, done) -> None:
        with trio.fail_after(WAIT_S):
            while not done():
                await self.changed.wait()

    def acks(self) -> list[wire.LinkAck]:
        return [event for event in self.heard if isinstance(event, wire.LinkAck)]

    def fatals(self) -> list[wire.Fatal]:
        return [event for event in self.heard if isinstance(event, wire.Fatal)]


def _lines(bus: LinkedBus, pattern: str) -> list[str]:
    text = (bus.directory / "group1.log").read_text(errors="replace")
    return [line for line in text.splitlines() if re.search(pattern, line)]


async def _bodies_in(bus: LinkedBus) -> list[bytes]:
    """Every message waiting in group 1's queue IN, taken."""
    bodies = []
    async with bus.connect(1, "IN") as receiver:
        while True:
            try:
                message = await receiver.get(timeout=0)
            except MrsError as error:
                assert error.status == Status.NOMOREMSG, error
                return bodies
            bodies.append(message.body)
            await receiver.confirm(message.seq)


async def test_an_old_active_that_welcomes_the_link_is_refused(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Group 2's active of term 3 links and drains "new"; it stops serving, and the
    old active of term 2 welcomes group 1's next dial and drains "stale" at once.
    Group 1 takes nothing from it (no LinkAck; "stale" is never queued), tells it why
    (a Fatal), logs one WARNING however often it redials meanwhile, and links
    again once an active of a newer term welcomes it. Before: the Welcome said no
    term, and "stale" was stored."""
    bus = _replicated_bus(tmp_path / "bus")
    active = Active(3, b"new")
    await nursery.start(active.serve, bus.ports[2])
    try:
        await trio.to_thread.run_sync(bus.processes[1].start)
        await active.wait_until(lambda: active.acks())
        assert active.hellos[0].welcome_term, active.hellos[0]
        assert active.acks()[0].results[0].status == int(Status.STORED)

        active.term, active.body, active.heard = 2, b"stale", []
        dials = len(active.hellos)
        active.drop()
        await active.wait_until(lambda: len(active.hellos) >= dials + 3)  # refused, redialed
        await wait_for_link(bus, 1, 2, "down")
        assert not active.acks(), active.heard
        # Told why, as far as it can hear it (the transfer it sent unread, the close
        # may reset the connection first):
        assert all(OLD_ACTIVE in fatal.message for fatal in active.fatals()), active.heard
        assert await _bodies_in(bus) == [b"new"]

        active.term, active.body = 4, b"newer"
        await active.wait_until(lambda: active.acks())
        await wait_for_link(bus, 1, 2)
        assert await _bodies_in(bus) == [b"newer"]
    finally:
        bus.stop()
    warned = _lines(bus, f"WARNING.*link to group 2 at .* refused: {OLD_ACTIVE}")
    assert len([line for line in warned if "more since the last" not in line]) == 1, warned
    assert not _lines(bus, "Traceback")


async def test_a_peer_of_the_release_before_is_dialed_again_without_asking(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """A group of the release before the Welcome's term refuses a Hello that asks for
    it (one field more than it reads): group 1 logs one WARNING and dials again at
    once without asking, and the link comes up with a Welcome of the old shape."""
    bus = _replicated_bus(tmp_path / "bus")
    peer = Active(0, b"drained", earlier=True)
    await nursery.start(peer.serve, bus.ports[2])
    try:
        await trio.to_thread.run_sync(bus.processes[1].start)
        await peer.wait_until(lambda: peer.acks())
        await wait_for_link(bus, 1, 2)
        assert await _bodies_in(bus) == [b"drained"]
    finally:
        bus.stop()
    first, second = peer.hellos[:2]
    assert first.welcome_term and first.incarnation == second.incarnation != b"", peer.hellos
    assert not second.welcome_term, second
    assert len(_lines(bus, "WARNING.*runs an earlier release.*linking without its term")) == 1


@pytest.mark.parametrize(
    ("refusal", "kind"),
    [
        ("Hello frame has 8 fields, expected 7", PeerWithoutWelcomeTerms),
        ("Hello frame has 8 fields, expected 6", PeerWithoutTerms),
    ],
)
def test_which_release_refused_the_hello(refusal: str, kind: type) -> None:
    assert isinstance(_refusal(f"protocol error: {refusal}", INCARNATION), kind)


class EarlierWelcome(msgspec.Struct, array_like=True, forbid_unknown_fields=True, tag=2):
    """The Welcome as the release before the Welcome's term decodes it."""

    protocol_version: int
    group_id: int
    group_name: str
    message_bytes_max: int = 0
    incarnation: bytes = b""


def _wire(welcome: wire.Welcome) -> bytes:
    """The msgpack of `welcome` as a link's acceptor sends it (after the Hello)."""
    hello = wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1, False, INCARNATION)
    connection = wire.Connection("server")
    connection.receive_data(wire.Connection("client").send(hello))
    connection.next_event()
    return connection.send(welcome)[4:]


def test_the_welcome_says_the_term_only_to_a_dialer_that_asks(tmp_path: Path) -> None:
    """A replicated group's active (term 5) answers a Hello that asks with its term; a
    replicated dialer of the release before says its own term but reads no Welcome
    term: it gets a Welcome that release decodes (the other it would refuse)."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, direct=True)
    assert bus.config_path is not None
    config = load_config(bus.config_path).group(2)
    incarnations = PeerIncarnations(None, 2, INCARNATION, str(bus.config_path), term=5)
    hello = wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1, False, INCARNATION, 3)
    asked = msgspec.structs.replace(hello, welcome_term=True)
    told = link_welcome(config, incarnations, asked)
    assert told.term == 5 and told.incarnation == INCARNATION
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(_wire(told), type=EarlierWelcome)
    welcome = link_welcome(config, incarnations, hello)
    assert welcome.term == 0
    assert msgspec.msgpack.decode(_wire(welcome), type=EarlierWelcome).incarnation == INCARNATION


@pytest.mark.parametrize(
    ("results", "why"),
    [
        ([], "LinkAck answers 0 notices, 2 were sent"),
        ([(5, 0), (9, 0)], "LinkAck.results[1].seq 9 does not answer notice 1 of LinkNotice 4"),
        ([(6, 0), (5, 0)], "LinkAck.results[0].seq 6 does not answer notice 0"),
    ],
)
def test_the_answer_to_a_link_notice_is_checked_where_a_transfers_is(
    results: list[tuple[int, int]], why: str
) -> None:
    """The connection keeps a LinkNotice's seqs as it keeps a LinkTransfer's, and
    refuses a LinkAck that does not name them, one result per notice, in order (the
    session judges only each result's status: mrs.group.link_session)."""
    dialer, acceptor = wire.Connection("client"), wire.Connection("server")
    hello = wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1, False, INCARNATION)
    acceptor.receive_data(dialer.send(hello))
    acceptor.next_event()
    dialer.receive_data(acceptor.send(wire.Welcome(wire.PROTOCOL_VERSION, 2, "G2")))
    dialer.next_event()
    notice = wire.LinkNotice(4, [wire.ConfNotice(5, 0), wire.DeqNotice(6, 0)])
    acceptor.receive_data(dialer.send(notice))
    acceptor.events()
    answer = [wire.LinkResult(seq, status, seq) for seq, status in results]
    dialer.receive_data(acceptor.send(wire.LinkAck(4, answer)))
    with pytest.raises(wire.RemoteProtocolError) as refused:
        dialer.events()
    assert why in str(refused.value)
