"""Priority order and selective gets against a real `mrs serve` process: a queue hands
out its messages highest priority first, then in arrival order, also after a crash;
a selective get takes the first message its Selection matches (by correlation id
from the queue's index), a parked one is woken only by a match, and a malformed
selection is refused BADPARAM with the connection kept."""

from __future__ import annotations

import pytest
import trio

from clients import (
    BadParameter,
    BadSequence,
    DeliveryMode,
    NoMoreMessages,
    PutItem,
    Status,
    TooManyUnconfirmed,
    Uma,
    connect,
)
from mrs import protocol as wire
from mrs.core.selection import Key, Selection, by_correlation_id, by_priority
from mrs.group.backlog import WINDOW_ENTRIES_MAX
from sim.bus import LinkedBus
from tests.process.test_links import QUEUES as LINK_QUEUES
from tests.process.test_links import link_state, wait_for_link

DQF = DeliveryMode.WF_DQF


async def put_items(bus, target: str, items: list[tuple[bytes, int, bytes]]) -> None:
    """(body, priority, correlation id) each, WF_DQF, one put_many."""
    async with connect(bus.address, queue="SENDER") as sender:
        puts = [
            PutItem(body, target, delivery=DQF, uma=Uma.DLJ, priority=priority, correlation_id=cid)
            for body, priority, cid in items
        ]
        for psb in await sender.put_many(puts):
            assert not isinstance(psb, Exception) and psb.delivery_status == Status.STORED


async def drain(client) -> list:
    """Every waiting message, in the order the queue hands them out, each confirmed."""
    got = []
    while True:
        try:
            message = await client.get(timeout=0)
        except NoMoreMessages:
            return got
        got.append(message)
        await client.confirm(message.seq)


async def test_priority_order_is_kept_across_a_crash(bus) -> None:
    sent = [(b"a0", 0, b""), (b"b5", 5, b""), (b"c99", 99, b""), (b"d5", 5, b""), (b"e0", 0, b"")]
    await put_items(bus, "ORDERS", sent + [(b"f99", 99, b"")])
    async with connect(bus.address, queue="ORDERS") as receiver:
        first = await receiver.get(timeout=0)  # delivered, never confirmed
    assert (first.body, first.priority, first.delivery_status) == (b"c99", 99, Status.CONFIRMREQ)
    bus.restart()
    async with connect(bus.address, queue="ORDERS") as receiver:
        got = await drain(receiver)
    assert [m.body for m in got] == [b"c99", b"f99", b"b5", b"d5", b"a0", b"e0"]
    assert [m.delivery_status for m in got[:2]] == [Status.POSSDUPL, Status.CONFIRMREQ]


async def test_a_higher_priority_behind_a_full_window_comes_first_after_a_restart(
    make_bus,
) -> None:
    bus = make_bus()
    low = [(b"low%d" % i, 0, b"") for i in range(WINDOW_ENTRIES_MAX + 200)]
    await put_items(bus, "ANYORDER", low)
    await put_items(bus, "ANYORDER", [(b"high1", 7, b""), (b"high2", 7, b"")])
    async with connect(bus.address, queue="ANYORDER") as receiver:
        assert (await receiver.get(timeout=0)).body == b"high1"  # from its cold lane
    bus.restart()
    async with connect(bus.address, queue="ANYORDER") as receiver:
        got = await drain(receiver)
    assert [m.body for m in got[:3]] == [b"high1", b"high2", b"low0"]
    assert [m.body for m in got[2:]] == [body for body, _, _ in low]


async def test_a_selective_get_takes_its_correlation_id_and_leaves_the_order(bus) -> None:
    items = [(b"m%d" % i, i % 3, b"cid-%d" % i) for i in range(30)]
    await put_items(bus, "ANYORDER", items)
    async with connect(bus.address, queue="ANYORDER") as receiver:
        chosen = await receiver.get(timeout=0, select=by_correlation_id(b"cid-13"))
        assert (chosen.body, chosen.correlation_id) == (b"m13", b"cid-13")
        await receiver.confirm(chosen.seq)
        top = await receiver.get_many(3, timeout=0, select=by_priority("ge", 2))
        assert [m.body for m in top] == [b"m2", b"m5", b"m8"]
        for message in top:
            await receiver.confirm(message.seq)
        none = Selection(Key("correlation_id", "eq", b"cid-13"))
        try:
            await receiver.get(timeout=0, select=none)
            raise AssertionError("a confirmed message was selected again")
        except NoMoreMessages as refused:
            assert "matching the selection" in str(refused)
        rest = await drain(receiver)
    expected = sorted(
        (item for item in items if item[0] not in (b"m13", b"m2", b"m5", b"m8")),
        key=lambda item: -item[1],
    )
    assert [m.body for m in rest] == [body for body, _, _ in expected]


async def test_a_parked_selective_get_is_woken_only_by_its_match(bus) -> None:
    async with connect(bus.address, queue="ANYORDER") as receiver:
        got = []

        async def wait_for_match() -> None:
            got.append(await receiver.get(timeout=30, select=by_correlation_id(b"wanted")))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_match)
            await put_items(bus, "ANYORDER", [(b"other", 50, b"not-it"), (b"plain", 0, b"")])
            assert got == []  # put answered STORED: both were offered, neither taken
            await put_items(bus, "ANYORDER", [(b"match", 0, b"wanted")])
        assert [m.body for m in got] == [b"match"]
        await receiver.confirm(got[0].seq)
        assert [m.body for m in await drain(receiver)] == [b"other", b"plain"]


async def test_a_malformed_selection_is_refused_badparam_and_the_connection_stays(bus) -> None:
    host, port = bus.address.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    connection = wire.Connection("client")
    answers: list = []

    async def ask(event) -> object:
        await stream.send_all(connection.send(event))
        while not answers:
            connection.receive_data(await stream.receive_some(65536))
            answers.extend(connection.events())
        return answers.pop(0)

    await ask(wire.Hello(wire.PROTOCOL_VERSION, "test"))
    assert isinstance(await ask(wire.Attach(1, "ANYORDER")), wire.Attached)
    for request_id, select in enumerate(
        (
            [["nope", "eq", 1]],
            [["priority", "gt", "high"]],
            [["correlation_id", "lt", b"x"]],
            [],
            [["priority"]],
        ),
        start=2,
    ):
        refused = await ask(wire.Get(request_id, 0, select))
        assert isinstance(refused, wire.Failure) and refused.status == Status.BADPARAM
        assert refused.message.startswith("bad selection:") and "\n" not in refused.message
    after = await ask(wire.Get(19, 0, [["priority", "ge", 0]]))
    assert isinstance(after, wire.Failure) and after.status == Status.NOMOREMSG
    await stream.aclose()
    async with connect(bus.address, queue="ANYORDER") as receiver:
        try:
            await receiver.get(timeout=0, select=[["priority", "eq", 1]])  # type: ignore[arg-type]
            raise AssertionError("a list is not a Selection")
        except BadParameter:
            pass


async def test_selective_gets_keep_the_confirmation_rules(bus) -> None:
    """Confirmation order is delivery order, whichever get delivered; a selective
    get counts against unconfirmed_max; on an implicit queue it confirms the
    message before, as a plain get does."""
    await put_items(bus, "ORDERS", [(b"a", 0, b"ca"), (b"b", 0, b"cb"), (b"c", 0, b"cc")])
    async with connect(bus.address, queue="ORDERS") as receiver:
        c = await receiver.get(timeout=0, select=by_correlation_id(b"cc"))
        a = await receiver.get(timeout=0)
        try:
            await receiver.confirm(a.seq)
            raise AssertionError("an in-order queue confirmed out of delivery order")
        except BadSequence as refused:
            assert f"confirm {c.seq} before {a.seq}" in str(refused)
        await receiver.confirm(c.seq)
        await receiver.confirm(a.seq)
    await put_items(bus, "SMALL", [(b"s%d" % n, 0, b"s%d" % n) for n in range(2)])
    async with connect(bus.address, queue="SMALL") as receiver:
        held = [await receiver.get(timeout=0) for _ in range(2)]
        async with connect(bus.address, queue="SENDER") as sender:
            await sender.put(b"s2", "SMALL", delivery=DQF, uma=Uma.DLJ, correlation_id=b"s2")
        try:
            await receiver.get(timeout=0, select=by_correlation_id(b"s2"))
            raise AssertionError("a selective get went past unconfirmed_max")
        except TooManyUnconfirmed:
            pass
        await receiver.confirm(held[0].seq)
        assert (await receiver.get(timeout=0, select=by_correlation_id(b"s2"))).body == b"s2"
    await put_items(bus, "IMPLICIT", [(b"i1", 0, b"i1"), (b"i2", 0, b"i2")])
    async with connect(bus.address, queue="IMPLICIT") as receiver:
        first = await receiver.get(timeout=0, select=by_correlation_id(b"i2"))
        second = await receiver.get(timeout=0, select=by_correlation_id(b"i1"))
        assert (first.body, second.body) == (b"i2", b"i1")
        assert await receiver.pending(["IMPLICIT"]) == [0]
    async with connect(bus.address, queue="IMPLICIT") as receiver:
        again = await receiver.get(timeout=0)  # i2 was confirmed by the get of i1
        assert (again.body, again.delivery_status) == (b"i1", Status.POSSDUPL)


@pytest.fixture
async def linked(tmp_path, nursery):
    """Groups 1 and 2 as real `mrs serve` processes behind a fault proxy."""
    bus = LinkedBus(tmp_path / "bus", queues=LINK_QUEUES)
    await bus.start_proxies(nursery)
    await trio.to_thread.run_sync(bus.start)
    await wait_for_link(bus, 1, 2)
    yield bus
    bus.stop()


async def test_priority_order_survives_a_saf_drain_and_both_restarts(linked) -> None:
    """Stored in group 1's SAF while the link is cut (priority in the SAF record),
    group 1 restarted, drained over the link, group 2 restarted (priority from its
    DQF's keys): group 2's queue hands them out by priority, then in put order."""
    sent = [(b"p%d-%d" % (priority, n), priority) for n in range(4) for priority in (0, 3, 60)]
    async with linked.connect(1, "OUT") as sender:
        linked.proxy(1, 2).cut()
        await wait_for_link(linked, 1, 2, "down")
        for body, priority in sent:
            psb = await sender.put(
                body, target="2.10", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC, priority=priority
            )
            assert psb.delivery_status == Status.STORED
    await trio.to_thread.run_sync(linked.processes[1].restart)
    assert (await link_state(linked, 1, 2))["saf_backlog"] == len(sent)
    linked.proxy(1, 2).heal()
    await wait_for_link(linked, 1, 2, "up", backlog=0)
    await trio.to_thread.run_sync(linked.processes[2].restart)
    async with linked.connect(2, "IN") as receiver:
        got = await drain(receiver)
    expected = sorted(sent, key=lambda item: -item[1])  # stable: put order within a priority
    assert [(m.body, m.priority) for m in got] == expected
