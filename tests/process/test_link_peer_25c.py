"""A link peer that lies or misbehaves, as a scripted fake group speaking the link
protocol over a real TCP socket, against real `mrs serve` processes; then the real
peer replaces it. The honest group keeps every SAF record until the real peer has it
(each delivered once), keeps serving its clients, and says what the liar does in one
line per kind per interval, not one per connection or per lie."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest
import trio

from clients import DeliveryMode, Status, Uma
from mrs import protocol as wire
from mrs.limits import LINK_FRAME_OVERHEAD_BYTES, LINK_TRANSFER_BYTES_MAX
from sim.bus import LinkedBus
from tests.process.test_link_probes import GUARDS, QUEUES
from tests.process.test_links import drain, wait_for_link

_STORED, _BEHIND = int(Status.STORED), int(Status.LINK_DOWN)

Script = Callable[["Liar", object], list[object] | None]
"""What the fake peer sends for an event it received (events, or raw bytes), None
to close the connection."""


def _frame_limit(message_bytes_max: int) -> int:
    """The frame size a group accepts at most (mrs.server.group_server)."""
    return max(message_bytes_max, LINK_TRANSFER_BYTES_MAX) + LINK_FRAME_OVERHEAD_BYTES


def _too_big() -> bytes:
    """A frame header one byte over a group's limit (default limits), and a little of
    its body: refused as soon as its header is read."""
    return struct.pack(">I", _frame_limit(1 << 20) + 1) + bytes(64)


class LinkPeer:
    """Group 2 as a scripted fake speaking the link protocol over a real TCP socket
    (shared with tests.process.test_link_ack_26): it serves group 1's link dials and
    sends, for each event it receives, what `_replies` says (events, or raw bytes),
    None to close the connection. Left to itself it welcomes the link as group 2
    (`welcome`), answers pings, and answers each notice as taken. A subclass is a
    dataclass with a `changed` event: `_count` and `wait_for` count on it."""

    changed: trio.Event

    async def serve(self, port: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await trio.serve_tcp(self._connection, port, host="127.0.0.1", task_status=task_status)

    async def _connection(self, stream: trio.SocketStream) -> None:
        connection = wire.Connection("server")
        async with stream:
            while data := await stream.receive_some(65536):
                connection.receive_data(data)
                for event in connection.events():
                    replies = self._replies(event)
                    if replies is None:
                        return
                    for reply in replies:
                        raw = reply if isinstance(reply, bytes) else connection.send(reply)  # type: ignore[arg-type]
                        await stream.send_all(raw)

    def welcome(self) -> wire.Welcome:
        """Group 2's Welcome, with no incarnation: the real group 2 is admitted after."""
        return wire.Welcome(wire.PROTOCOL_VERSION, 2, "G2", 0)

    def _replies(self, event: object) -> list[object] | None:
        if isinstance(event, wire.Hello):
            return [self.welcome()]
        if isinstance(event, wire.Ping):
            return [wire.Pong(event.nonce)]
        if isinstance(event, wire.LinkNotice):
            results = [wire.LinkResult(notice.seq, 1, notice.seq) for notice in event.notices]
            return [wire.LinkAck(event.request_id, results)]
        return []

    def _count(self, what: str) -> None:
        setattr(self, what, getattr(self, what) + 1)
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, what: str, count: int) -> None:
        while getattr(self, what) < count:
            await self.changed.wait()


@dataclass
class Liar(LinkPeer):
    """A `LinkPeer` that answers everything but pings and notices as `script` says
    (and a Hello after its Welcome). Counts connections and transfers."""

    script: Script
    connections: int = 0
    transfers: int = 0
    changed: trio.Event = field(default_factory=trio.Event)

    def _replies(self, event: object) -> list[object] | None:
        if isinstance(event, wire.Hello):
            self._count("connections")
            return [self.welcome(), *(self.script(self, event) or [])]
        if isinstance(event, wire.Ping | wire.LinkNotice):
            return super()._replies(event)
        if isinstance(event, wire.LinkTransfer):
            self._count("transfers")
        return self.script(self, event)


def _behind_nothing(_liar: Liar, event: object) -> list[object]:
    """Every transfer answered LINK_DOWN ("refused behind an earlier failure") for
    each message, with no failure to be behind; then, falsely, STORED, a second
    answer to the same transfer that must change nothing."""
    if not isinstance(event, wire.LinkTransfer):
        return []
    seqs = [message.seq for message in event.messages]
    behind = wire.LinkAck(event.request_id, [wire.LinkResult(seq, _BEHIND, 0) for seq in seqs])
    stored = wire.LinkAck(event.request_id, [wire.LinkResult(seq, _STORED, seq) for seq in seqs])
    return [behind, stored]


async def _group_1_with_a_backlog(tmp_path: Path, count: int) -> tuple[LinkedBus, list[bytes]]:
    """A real group 1, its link down, with `count` WF_SAF messages for group 2."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, direct=True, group_extra=GUARDS)
    await trio.to_thread.run_sync(bus.processes[1].start)
    bodies = [b"m%d" % index for index in range(count)]
    async with bus.connect(1, "OUT") as sender:
        for body in bodies:
            psb = await sender.put(body, target="2.10", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC)
            assert psb.delivery_status == Status.STORED
    return bus, bodies


async def _real_group_2_gets_each_once(bus: LinkedBus, bodies: list[bytes]) -> None:
    """The real group 2 replaces the liar: group 1's SAF drains, and a receiver gets
    every message once."""
    await trio.to_thread.run_sync(bus.processes[2].start)
    await wait_for_link(bus, 1, 2, backlog=0)
    async with bus.connect(2, "IN") as receiver:
        got = await drain(receiver, len(bodies))
    assert sorted(message.body for message in got) == bodies


def _lines(bus: LinkedBus, group: int, words: str) -> list[str]:
    text = (bus.directory / f"group{group}.log").read_text()
    return [line for line in text.splitlines() if words in line]


async def test_link_down_answers_behind_no_failure_put_the_drain_in_retry(
    tmp_path, nursery
) -> None:
    """A peer that answered every SAF transfer LINK_DOWN for each message ("refused
    behind an earlier failure") with no failure named had the drain restarted at
    once each time: the backlog was read, sent and refused again at the link's
    round-trip rate (5,679 transfers in 4 s), with no line and `drain` "running".
    Now the second such answer running is a RETRY (0.2 s doubling), with one WARNING
    naming the message; the STORED answer the liar sends after each refusal, to a
    transfer already answered, deletes nothing: the real peer then gets all five."""
    bus, bodies = await _group_1_with_a_backlog(tmp_path, 5)
    liar = Liar(_behind_nothing)
    try:
        async with trio.open_nursery() as tasks:
            await tasks.start(liar.serve, bus.ports[2])
            with trio.fail_after(20):
                await liar.wait_for("transfers", 3)
                started_s = trio.current_time()
                await liar.wait_for("transfers", 6)
            elapsed_s = trio.current_time() - started_s
            info = (await wait_for_link(bus, 1, 2, backlog=5))["drain_wait"]
            tasks.cancel_scope.cancel()
        await _real_group_2_gets_each_once(bus, bodies)
    finally:
        bus.stop()
    assert elapsed_s >= 0.6, f"3 transfers refused in {elapsed_s:.3f} s: no backoff"
    assert info is not None and info["status"] == "LINK_DOWN", info
    assert len(_lines(bus, 1, "that it never named")) == 1
    assert not _lines(bus, 1, "Traceback")


def _second_welcome(_liar: Liar, event: object) -> list[object]:
    if isinstance(event, wire.Hello):  # a second Welcome, encoded by hand
        payload = msgspec.msgpack.encode([2, wire.PROTOCOL_VERSION, 2, "G2"])
        return [struct.pack(">I", len(payload)) + payload]
    return []


def _oversized(_liar: Liar, event: object) -> list[object]:
    return [_too_big()] if isinstance(event, wire.Hello) else []


def _closes_before_the_ack(_liar: Liar, event: object) -> list[object] | None:
    return None if isinstance(event, wire.LinkTransfer) else []


@pytest.mark.parametrize(
    ("script", "why"),
    [
        (_second_welcome, "protocol error: server sent a second Welcome"),
        (_oversized, "protocol error: frame of"),
        (_closes_before_the_ack, "down: the peer closed the connection"),
    ],
    ids=["second-welcome", "frame-over-the-limit", "closes-before-the-ack"],
)
async def test_a_peer_that_breaks_each_link_at_once_is_one_line_per_interval(
    tmp_path, nursery, script: Script, why: str
) -> None:
    """A peer that takes the link and breaks it at once (a second Welcome, a frame one
    byte over the limit, a close between the transfer and its ack) was logged two
    lines per connection (down, then up), every 2 s for as long as it lasted. Now
    a connection after two that broke at once says "up" only once it has served 2 s,
    and the end of one that did not is one line per kind per 10 s, with the count
    not shown (the last word on a link that keeps breaking is "down"); and
    nothing the liar was sent leaves the SAF: the real peer gets each once."""
    bus, bodies = await _group_1_with_a_backlog(tmp_path, 3)
    liar = Liar(script)
    try:
        async with trio.open_nursery() as tasks:
            await tasks.start(liar.serve, bus.ports[2])
            with trio.fail_after(20):
                await liar.wait_for("connections", 6)
            tasks.cancel_scope.cancel()
        down_lines = _lines(bus, 1, why)
        said = _lines(bus, 1, "link to group 2 ")
        await _real_group_2_gets_each_once(bus, bodies)
        with trio.fail_after(10):  # the real one's "up", once it has served 2 s
            while len(_lines(bus, 1, "link to group 2 up after")) < 2:
                await trio.sleep(0.1)
    finally:
        bus.stop()
    assert 1 <= len(down_lines) <= 3, down_lines
    assert " down" in said[-1], f"the log's last word on a link that keeps breaking: {said[-1]}"
    assert len(_lines(bus, 1, "link to group 2 up")) == 3  # the liar's first two, the real one
    assert not _lines(bus, 1, "Traceback")


async def _dial_as_group_1_and_send(port: int, raw: bytes) -> object:
    """A fake group 1: dial, say the link Hello, send `raw` after the Welcome; the
    last event group 2 sent before it closed (its Fatal)."""
    connection = wire.Connection("client")
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    last: object = None
    async with stream:
        hello = wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1)
        await stream.send_all(connection.send(hello))
        while data := await stream.receive_some(65536):
            connection.receive_data(data)
            for event in connection.events():
                last = event
                if isinstance(event, wire.Welcome):
                    await stream.send_all(raw)
    return last


async def test_a_dialer_that_breaks_each_link_at_once_is_one_line_per_interval(
    tmp_path, nursery
) -> None:
    """The group that accepts a link has no backoff of its own: a fake group 1 that
    dialed 40 times in a row, each time sending a frame one byte over the limit,
    wrote 80 lines on group 2 (each link up, each link down). Now it is 5: the
    first two connections' up and down, then one line per kind per 10 s (each
    dial is still told why, in its Fatal),
    group 2 serves its own clients meanwhile, and the real group 1 links after it."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, direct=True, group_extra=GUARDS)
    await trio.to_thread.run_sync(bus.processes[2].start)
    try:
        async with bus.connect(2, "IN") as local:
            for _ in range(40):
                with trio.fail_after(10):
                    fatal = await _dial_as_group_1_and_send(bus.ports[2], _too_big())
                assert isinstance(fatal, wire.Fatal) and "frame of" in fatal.message, fatal
            await local.put(b"local", target="2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
            assert (await local.get(timeout=5)).body == b"local"
        down_lines = _lines(bus, 2, "link from group 1 down")
        up_lines = _lines(bus, 2, "link to group 1 up")
        await trio.to_thread.run_sync(bus.processes[1].start)
        await wait_for_link(bus, 2, 1)
    finally:
        bus.stop()
    assert len(down_lines) == 3 and "exceeds frame_bytes_max" in down_lines[0], down_lines
    assert len(up_lines) == 2, up_lines
    assert not _lines(bus, 2, "Traceback")
