"""Links used as their operators and senders use them, and broken on purpose: real `mrs
serve` processes behind the fault proxy (sim.proxy), real sockets, real LMDB.

- A short outage is two lines on each group: down with the reason, up again with how
  long it was down and what waits in the SAF (docs/links.md).
- `mrs_link_messages_sent_total` counts each message once; resends (a drain that
  waits for room in a full DQF, RETRY, a cut) count in `mrs_link_messages_resent_total`,
  so `rate()` of the first is the drain rate (docs/operations.md).
- A dialer falls back to an earlier release's Hello (no incarnation) only for a peer
  it never met with one, and refuses a Welcome without the incarnation its Hello asked
  for (docs/links.md, "A peer that comes back with other journals").
- A keyed AK put re-sent while the link is down, its first copy already stored by the
  peer, brings no second MRS_ACK (docs/timeouts-and-duplicates.md).
"""

from __future__ import annotations

import re
import struct
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
import trio

from clients import DeliveryMode, MrsError, NoMoreMessages, Status, Uma
from mrs import protocol as wire
from sim.bus import LinkedBus
from tests.process.test_links import wait_for_link

QUEUES = """
[[group.queue]]
id = 10
name = "IN"
[[group.queue]]
id = 11
name = "OUT"
[[group.queue]]
id = 12
name = "ACKS"
"""
METRICS = '[group.ops]\nmetrics_listen = "127.0.0.1:0"\n'
WAIT_S = 30.0
"""How long a wait for another process's state lasts at most on a loaded machine."""


@pytest.fixture
async def bus(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[LinkedBus]:
    """Groups 1 and 2 linked through a fault proxy; group 1 serves its metrics; group
    2's DQF holds 1 message."""
    linked = LinkedBus(
        tmp_path / "bus",
        queues=QUEUES,
        group_extras={1: METRICS},
        group_limits={2: "dqf_messages_max = 1"},
    )
    await linked.start_proxies(nursery)
    await trio.to_thread.run_sync(linked.start)
    await wait_for_link(linked, 1, 2)
    yield linked
    linked.stop()


def _log_lines(bus: LinkedBus, group: int, start: int, about: str) -> list[str]:
    """The lines of group `group`'s log after byte `start` that mention `about`."""
    text = (bus.directory / f"group{group}.log").read_text(errors="replace")[start:]
    return [line for line in text.splitlines() if about in line]


def _log(bus: LinkedBus, group: int) -> str:
    return (bus.directory / f"group{group}.log").read_text(errors="replace")


def _log_size(bus: LinkedBus, group: int) -> int:
    return len(_log(bus, group))


async def test_a_short_outage_is_one_line_down_and_one_line_up_on_each_group(
    bus: LinkedBus,
) -> None:
    """Before, the dialing group wrote three lines for one outage ("link to group 2
    lost: connection closed", "link to group 2 down", a redial failing) and the line
    saying it was up again did not say for how long it had been down."""
    sizes = {group: _log_size(bus, group) for group in (1, 2)}
    bus.proxy(1, 2).cut()
    await wait_for_link(bus, 1, 2, "down")
    await wait_for_link(bus, 2, 1, "down")
    async with bus.connect(1, "OUT") as sender:
        psb = await sender.put(b"kept", target="2.10", delivery=DeliveryMode.WF_SAF)
    assert psb.delivery_status == Status.STORED
    bus.proxy(1, 2).heal()
    await wait_for_link(bus, 1, 2, "up", backlog=0)
    await wait_for_link(bus, 2, 1, "up")
    dialer = _log_lines(bus, 1, sizes[1], "group 2")
    assert len(dialer) == 2, dialer
    assert re.search(r"WARNING mrs\.links: link to group 2 down: \S", dialer[0]), dialer
    assert re.search(
        r"INFO mrs\.links: link to group 2 up after \d+\.\d s down \(SAF backlog 1\)", dialer[1]
    ), dialer
    acceptor = _log_lines(bus, 2, sizes[2], "group 1")
    assert len(acceptor) == 2, acceptor
    assert "WARNING mrs.links: link from group 1 down: " in acceptor[0], acceptor
    assert re.search(r"link to group 1 up after \d+\.\d s down", acceptor[1]), acceptor


async def _link_samples(bus: LinkedBus) -> dict[str, float]:
    """Group 1's link metrics for peer 2, scraped from its metrics endpoint."""
    async with bus.connect(1, None) as client:
        url = (await client.status())["endpoints"]["metrics"]

    def scrape() -> str:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode()

    text = await trio.to_thread.run_sync(scrape)
    pattern = r'^(mrs_link_messages_\w+_total)\{group="1",peer="2"\} (\S+)$'
    return {name: float(value) for name, value in re.findall(pattern, text, re.MULTILINE)}


async def _take_and_confirm(bus: LinkedBus, count: int) -> list[bytes]:
    bodies = []
    async with bus.connect(2, "IN") as receiver:
        for _ in range(count):
            message = await receiver.get(timeout=WAIT_S)
            bodies.append(message.body)
            await receiver.confirm(message.seq)
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)
    return bodies


async def test_resends_into_a_full_dqf_are_counted_apart_from_first_sends(
    bus: LinkedBus,
) -> None:
    """Group 2's DQF holds 1: of a backlog of 3 drained at once, 1 is stored and 2
    are refused, then sent again as room frees. Before, mrs_link_messages_sent_total
    counted 5 for 3 messages (the resends with the first sends: its rate() was not the
    drain rate while a receiver refused), and no metric counted resends alone."""
    bus.proxy(1, 2).cut()
    await wait_for_link(bus, 1, 2, "down")
    async with bus.connect(1, "OUT") as sender:
        for body in (b"a", b"b", b"c"):
            await sender.put(body, target="2.10", delivery=DeliveryMode.WF_SAF)
    bus.proxy(1, 2).heal()
    await wait_for_link(bus, 1, 2, condition=lambda link: link.get("room_credit") == 0)
    waiting = await _link_samples(bus)
    assert waiting["mrs_link_messages_sent_total"] == 3, waiting
    assert await _take_and_confirm(bus, 3) == [b"a", b"b", b"c"]
    info = await wait_for_link(bus, 1, 2, "up", backlog=0)
    assert (info["messages_sent"], info["messages_resent"]) == (3, 2), info
    drained = await _link_samples(bus)
    assert drained == {
        "mrs_link_messages_sent_total": 3,
        "mrs_link_messages_resent_total": 2,
    }, drained


# ------------------------------------------------- who the dialer believes at the address
def _frame(fields: list) -> bytes:
    payload = msgspec.msgpack.encode(fields)
    return struct.pack(">I", len(payload)) + payload


async def _read_frame(stream: trio.SocketStream) -> list | None:
    """One frame's fields, or None if the stream ends first."""
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    return msgspec.msgpack.decode(data[4 : 4 + struct.unpack(">I", data[:4])[0]])


async def _pipe(source: trio.SocketStream, sink: trio.SocketStream) -> None:
    with trio.CancelScope() as scope:
        try:
            while chunk := await source.receive_some(65536):
                await sink.send_all(chunk)
        except trio.BrokenResourceError:
            scope.cancel()


class HelloGate:
    """At group 2's link address: passes connections through to group 2 until told
    otherwise. `refusing`: a link Hello with more fields than an earlier release reads
    is answered as that release does ("Hello frame has 6 fields, expected 5"), one it
    reads passed through. `bare_welcome`: every Hello is answered with a Welcome that
    carries no incarnation, and what the dialer sends next is kept in `after_welcome`
    (None: it closed). Every Hello's field count is kept."""

    EARLIER_FIELDS = 5

    def __init__(self, port: int, target_port: int) -> None:
        self.port, self.target_port = port, target_port
        self.refusing = self.bare_welcome = False
        self.after_welcome: list[list | None] = []
        self.hello_fields: list[int] = []
        self.heard = trio.Event()
        self.piping: list[trio.CancelScope] = []

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await trio.serve_tcp(self._handle, self.port, host="127.0.0.1", task_status=task_status)

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            hello = await _read_frame(stream)
            if hello is None:
                return
            self.hello_fields.append(len(hello) - 1)
            self.heard.set()
            if self.bare_welcome:
                await stream.send_all(_frame([2, wire.PROTOCOL_VERSION, 2, "G2", 1 << 20]))
                with trio.move_on_after(WAIT_S):
                    self.after_welcome.append(await _read_frame(stream))
                return
            if self.refusing and len(hello) - 1 > self.EARLIER_FIELDS:
                refusal = f"Hello frame has {len(hello) - 1} fields, expected 5"
                await stream.send_all(_frame([31, int(Status.PROTOCOL_ERROR), refusal]))
                return
            try:
                upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)
            except OSError:
                return  # group 2 not listening yet: the dialer tries again
            async with upstream:
                await upstream.send_all(_frame(hello))
                with trio.CancelScope() as piping:
                    self.piping.append(piping)
                    async with trio.open_nursery() as pipes:
                        pipes.start_soon(_pipe, stream, upstream)
                        pipes.start_soon(_pipe, upstream, stream)

    def cut(self) -> None:
        """End every connection passed through so far."""
        for piping in self.piping:
            piping.cancel()

    async def hellos(self, count: int) -> list[int]:
        """The field counts of the first `count` Hellos, once they came."""
        with trio.fail_after(WAIT_S):
            while len(self.hello_fields) < count:
                self.heard = trio.Event()
                await self.heard.wait()
        return self.hello_fields[:count]


async def test_a_peer_met_with_an_incarnation_cannot_talk_the_dialer_out_of_it(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Group 1 linked with group 2 (both record the other's journals), then whatever
    answers at group 2's address refuses the Hello as an earlier release would.
    Before, group 1 took the text at its word and dialed again without its
    incarnation: group 2 (of this release) took that for an earlier release's dialer
    and checked nothing. Now group 1 never drops it for a peer whose incarnation it
    recorded (no group goes back to an earlier release): the link stays down, one
    ERROR says what to do, and nothing waiting is lost."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES)
    gate = HelloGate(bus.proxy(1, 2).listen_port, bus.ports[2])
    await nursery.start(gate.serve)
    await trio.to_thread.run_sync(bus.start)
    try:
        await wait_for_link(bus, 1, 2)
        gate.refusing = True
        gate.cut()  # the link drops; group 1 redials
        await wait_for_link(bus, 1, 2, "down")
        async with bus.connect(1, "OUT") as sender:
            psb = await sender.put(b"kept", target="2.10", delivery=DeliveryMode.WF_SAF)
        assert psb.delivery_status == Status.STORED
        refused = "refused this release's link Hello as a group of an earlier release"
        with trio.fail_after(WAIT_S):  # the log line is the only trace: polled
            while refused not in _log(bus, 1) and min(gate.hello_fields) == 6:
                await trio.sleep(0.02)
        assert min(gate.hello_fields) == 6, gate.hello_fields  # before: 4 after a refusal
        await gate.hellos(len(gate.hello_fields) + 2)  # two more dials after it
        assert set(gate.hello_fields) == {6}, gate.hello_fields
        assert (await wait_for_link(bus, 1, 2, "down"))["saf_backlog"] == 1
        errors = [line for line in _log(bus, 1).splitlines() if refused in line]
        assert len(errors) == 1 and " ERROR " in errors[0], errors  # once, not per dial
        assert "mrs admin reset-link 2" in errors[0]
        assert "runs an earlier release" not in _log(bus, 1)
    finally:
        bus.stop()


async def test_a_welcome_without_the_incarnation_the_hello_asked_for_is_refused(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Group 1 linked with group 2, then whatever answers at group 2's address
    welcomes group 1's Hello (which says its incarnation) with a Welcome carrying
    none. A group of this release answers with its own; one of an earlier release
    refuses that Hello. Before, the Welcome was taken as an earlier release's, the
    link came up with the peer's journals unchecked and group 1's SAF drained into
    it. Now the dialer closes the connection and its message waits in the SAF."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES)
    gate = HelloGate(bus.proxy(1, 2).listen_port, bus.ports[2])
    await nursery.start(gate.serve)
    await trio.to_thread.run_sync(bus.start)
    try:
        await wait_for_link(bus, 1, 2)
        gate.bare_welcome = True
        gate.cut()
        await wait_for_link(bus, 1, 2, "down")
        async with bus.connect(1, "OUT") as sender:
            psb = await sender.put(b"kept", target="2.10", delivery=DeliveryMode.WF_SAF)
        assert psb.delivery_status == Status.STORED
        with trio.fail_after(WAIT_S):
            while len(gate.after_welcome) < 2:
                await trio.sleep(0.02)  # another process's dials: no event to await
        assert gate.after_welcome[:2] == [None, None]  # before: its LinkTransfer
        info = await wait_for_link(bus, 1, 2, "down")
        assert info["saf_backlog"] == 1 and info["messages_sent"] == 0, info
    finally:
        bus.stop()


# ------------------------------------------------------------- a keyed AK put sent again
async def _mrs_acks(bus: LinkedBus, count: int) -> list[tuple[int, Status, Status]]:
    """`count` MRS_ACKs from group 1's ACKS queue, then nothing more."""
    acks = []
    async with bus.connect(1, "ACKS") as client:
        for _ in range(count):
            psb = (await client.get(timeout=WAIT_S)).ack_psb()
            acks.append((psb.seq, psb.delivery_status, psb.uma_status))
        with pytest.raises(MrsError):  # TIMEOUT: no second one
            await client.get(timeout=0.5)
    return acks


def _answered(link: dict) -> bool:
    return link["messages_sent"] == 1 and link["in_flight"] == 0 and link["queued"] == 0


@pytest.mark.parametrize("mode", [DeliveryMode.AK_DQF, DeliveryMode.AK_CONF])
async def test_a_keyed_ak_put_sent_again_while_the_link_is_down_brings_one_mrs_ack(
    bus: LinkedBus, mode: DeliveryMode
) -> None:
    """The first copy crossed the link and group 2 stored it; the link goes down and
    the sender, unsure (its connection dropped before the answer), puts it again
    under its idempotency key. Before, the copy took its UMA into group 1's SAF and
    brought an MRS_ACK of its own (LINK_DOWN + SAF_SUCCESS, under a seq group 2
    never holds): two MRS_ACKs for one message. Now it is answered as the copy it
    is, nothing more is stored or sent, and the one MRS_ACK is the first copy's."""
    key = {"idempotency_key": "invoice-7"}
    async with bus.connect(1, "OUT") as sender:
        first = await sender.put(
            b"pay", target="2.10", delivery=mode, uma=Uma.SAF, resp_q="1.12", headers=key
        )
        await wait_for_link(bus, 1, 2, condition=_answered)  # group 2 stored it
        bus.proxy(1, 2).cut()
        await wait_for_link(bus, 1, 2, "down")
        again = await sender.put(
            b"pay", target="2.10", delivery=mode, uma=Uma.SAF, resp_q="1.12", headers=key
        )
    assert again.status == Status.SUCCESS  # an AK put: answered at once, UMA_NA
    assert (await wait_for_link(bus, 1, 2, "down"))["saf_backlog"] == 0  # before: 1
    bus.proxy(1, 2).heal()
    await wait_for_link(bus, 1, 2, "up")
    assert await _take_and_confirm(bus, 1) == [b"pay"]
    outcome = Status.STORED if mode is DeliveryMode.AK_DQF else Status.SUCCESS
    assert await _mrs_acks(bus, 1) == [(first.seq, outcome, Status.NO_UMA)]
