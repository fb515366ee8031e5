"""Two linked groups: every mode across the link, store-and-forward while it is cut,
FIFO drain, duplicates, confirms travelling back. The rules run in process under
MockClock (`bus`); restarts and a one-way blackhole use real processes
behind a fault proxy (`proc_bus`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from clients import DeliveryMode, NoMoreMessages, Status, Uma
from mrs import protocol as wire
from mrs.group.incarnation import INCARNATION_KEY
from sim.bus import LinkedBus

MODE = DeliveryMode
QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-in-order"
[[group.queue]]
id = 11
name = "OUT"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 12
name = "IN2"
confirm = "explicit-out-of-order"
"""
LINK_WAIT_S = 20.0


async def link_state(bus, group: int, peer: int) -> dict:
    async with bus.connect(group, None) as client:
        return (await client.status())["links"][str(peer)]


async def wait_for_link(
    bus: LinkedBus,
    group: int,
    peer: int,
    state: str = "up",
    backlog: int | None = None,
    *,
    condition: Callable[[dict], bool] | None = None,
) -> dict:
    """Poll the group's status until the link reaches `state` (and `backlog`), or
    until `condition` holds of it when one is given (another process's state: there is
    no event to await, so this polls with a short pause; on the in-process bus the
    pause is MockClock time and costs nothing)."""
    with trio.fail_after(LINK_WAIT_S):
        while True:
            info = await link_state(bus, group, peer)
            if condition is not None:
                if condition(info):
                    return info
            elif info["state"] == state and (backlog is None or info["saf_backlog"] == backlog):
                return info
            await trio.sleep(0.02)


@pytest.fixture
async def bus(make_mem_linked):
    """Groups 1 and 2 in this trio run (the link rules need no process)."""
    linked = await make_mem_linked(queues=QUEUES)
    await wait_for_link(linked, 1, 2)
    return linked


@pytest.fixture
async def proc_bus(tmp_path, nursery):
    """Two real `mrs serve` processes behind a fault proxy: for restarts, a one-way
    blackhole and raw sockets."""
    linked = LinkedBus(tmp_path / "bus", queues=QUEUES)
    await linked.start_proxies(nursery)
    await trio.to_thread.run_sync(linked.start)
    await wait_for_link(linked, 1, 2)
    yield linked
    linked.stop()


async def drain(client, expected: int) -> list:
    messages = []
    for _ in range(expected):
        message = await client.get(timeout=10)
        messages.append(message)
        if message.needs_confirm:
            await client.confirm(message.seq)
    with pytest.raises(NoMoreMessages):
        await client.get(timeout=0)
    return messages


@pytest.mark.parametrize("mode", [MODE.WF_DQF, MODE.WF_SAF])
async def test_wf_recoverable_across_the_link(bus, mode) -> None:
    async with bus.connect(1, "OUT") as sender, bus.connect(2, "IN") as receiver:
        psb = await sender.put(b"x", target="2.10", delivery=mode, uma=Uma.DISC)
        assert (psb.delivery_status, psb.uma_status) == (Status.STORED, Status.NO_UMA)
        message = await receiver.get(timeout=10)
        assert (message.seq, message.delivery_status) == (psb.seq, Status.CONFIRMREQ)
        assert str(message.source) == "1.11" and str(message.target) == "2.10"


@pytest.mark.parametrize("mode", [MODE.AK_DQF, MODE.AK_SAF, MODE.AK_MEM])
async def test_mrs_ack_comes_back_across_the_link(bus, mode) -> None:
    async with bus.connect(1, "OUT") as sender, bus.connect(2, "IN") as receiver:
        psb = await sender.put(b"x", target="G2.IN", delivery=mode, uma=Uma.DISC)
        ack = await sender.get(timeout=10)
        assert ack.is_mrs_ack and ack.ack_psb().seq == psb.seq
        assert ack.ack_psb().delivery_status in (Status.STORED, Status.ENQUEUED)
        assert (await receiver.get(timeout=10)).body == b"x"


async def test_nn_modes_across_the_link(bus) -> None:
    async with bus.connect(1, "OUT") as sender, bus.connect(2, "IN") as receiver:
        for mode in (MODE.NN_DQF, MODE.NN_SAF, MODE.NN_MEM):
            await sender.put(mode.name.encode(), target="2.10", delivery=mode, uma=Uma.DISC)
        bodies = [message.body for message in await drain(receiver, 3)]
        with pytest.raises(NoMoreMessages):
            await sender.get(timeout=0)
    assert sorted(bodies) == sorted([b"NN_DQF", b"NN_SAF", b"NN_MEM"])


@pytest.mark.parametrize("mode", [MODE.WF_CONF, MODE.WF_DEQ, MODE.WF_ACK])
async def test_wf_modes_that_wait_for_the_remote_receiver(bus, mode) -> None:
    results: list = []
    async with (
        bus.connect(1, "OUT") as sender,
        bus.connect(2, "IN") as receiver,
        trio.open_nursery() as nursery,
    ):
        done = trio.Event()

        async def put() -> None:
            results.append(await sender.put(b"w", target="2.10", delivery=mode, uma=Uma.DISC))
            done.set()

        nursery.start_soon(put)
        message = await receiver.get(timeout=10)
        if mode != MODE.WF_DEQ:
            assert not done.is_set()
            await receiver.confirm(message.seq)
        await done.wait()
    assert results[0].delivery_status == Status.SUCCESS and results[0].seq == message.seq


async def test_ak_conf_confirm_that_could_not_travel_is_retried(bus) -> None:
    async with bus.connect(1, "OUT") as sender, bus.connect(2, "IN") as receiver:
        psb = await sender.put(b"c", target="2.10", delivery=MODE.AK_CONF, uma=Uma.DISC)
        message = await receiver.get(timeout=10)
        bus.proxy(1, 2).cut()
        await wait_for_link(bus, 2, 1, "down")
        await receiver.confirm(message.seq)  # the notice is journaled in group 2
        assert (await link_state(bus, 2, 1))["notices_pending"] == 1
        with pytest.raises(NoMoreMessages):
            await sender.get(timeout=0)
        bus.proxy(1, 2).heal()
        ack = await sender.get(timeout=20)
        assert ack.ack_psb().seq == psb.seq and ack.ack_psb().delivery_status == Status.SUCCESS


async def test_link_down_takes_the_uma_or_stores_and_forwards(bus) -> None:
    async with bus.connect(1, "OUT") as sender, bus.connect(2, "IN") as receiver:
        bus.proxy(1, 2).cut()
        await wait_for_link(bus, 1, 2, "down")
        discarded = await sender.put(b"lost", target="2.10", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert (discarded.delivery_status, discarded.uma_status) == (
            Status.LINK_DOWN,
            Status.DISC_SUCCESS,
        )
        memory = await sender.put(b"lost", target="2.10", delivery=MODE.WF_MEM)
        assert memory.delivery_status == Status.LINK_DOWN
        saf_uma = await sender.put(b"1", target="2.10", delivery=MODE.WF_DQF, uma=Uma.SAF)
        assert (saf_uma.delivery_status, saf_uma.uma_status) == (
            Status.LINK_DOWN,
            Status.SAF_SUCCESS,
        )
        stored = await sender.put(b"2", target="2.10", delivery=MODE.WF_SAF, uma=Uma.DISC)
        assert stored.delivery_status == Status.STORED
        forced = await sender.put(b"3", target="2.10", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert (forced.delivery_status, forced.uma_status) == (Status.SAF_FORCED, Status.NO_UMA)
        info = await link_state(bus, 1, 2)
        assert info == {**info, "state": "down", "saf_backlog": 3}
        bus.proxy(1, 2).heal()
        await wait_for_link(bus, 1, 2, "up", backlog=0)
        after = await sender.put(b"4", target="2.10", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert after.delivery_status == Status.STORED
        messages = await drain(receiver, 4)
    assert [m.body for m in messages] == [b"1", b"2", b"3", b"4"]
    assert all(m.delivery_status == Status.CONFIRMREQ for m in messages)


async def test_backlog_drains_fifo_before_newer_messages(bus) -> None:
    count = 300
    async with bus.connect(1, "OUT") as sender:
        bus.proxy(1, 2).cut()
        await wait_for_link(bus, 1, 2, "down")
        for index in range(count // 2):
            await sender.put(b"%04d" % index, target="2.10", delivery=MODE.WF_SAF, uma=Uma.DISC)
        bus.proxy(1, 2).heal()
        statuses = set()
        for index in range(count // 2, count):  # while the backlog drains
            psb = await sender.put(
                b"%04d" % index, target="2.10", delivery=MODE.WF_DQF, uma=Uma.DISC
            )
            statuses.add(psb.delivery_status)
    assert statuses <= {Status.SAF_FORCED, Status.STORED}
    async with bus.connect(2, "IN") as receiver:
        messages = await drain(receiver, count)
    assert [m.body for m in messages] == [b"%04d" % index for index in range(count)]


async def test_message_resent_after_a_lost_ack_is_stored_once(proc_bus) -> None:
    """The receiving group stores the message; its acknowledgement is blackholed; the
    link is cut and healed; the sender's SAF resends; group 2 recognises (origin, seq)."""
    async with proc_bus.connect(1, "OUT") as sender:
        proc_bus.proxy(1, 2).blackhole("backward")
        results: list = []
        async with trio.open_nursery() as nursery:

            async def put() -> None:
                results.append(
                    await sender.put(
                        b"once", target="2.10", delivery=MODE.WF_DQF, uma=Uma.DISC, timeout=20
                    )
                )

            nursery.start_soon(put)
            with trio.fail_after(LINK_WAIT_S):
                while (await _status(proc_bus, 2))["dqf_messages"] == 0:
                    await trio.sleep(0.02)
            proc_bus.proxy(1, 2).cut()
            proc_bus.proxy(1, 2).heal()
        # In flight when the link dropped: kept in the SAF and resent, whatever the UMA.
        assert (results[0].delivery_status, results[0].uma_status) == (
            Status.SAF_FORCED,
            Status.NO_UMA,
        )
        await wait_for_link(proc_bus, 1, 2, "up", backlog=0)
    async with proc_bus.connect(2, "IN") as receiver:
        [message] = await drain(receiver, 1)
    assert message.body == b"once" and message.seq == results[0].seq


async def test_restart_of_either_group_keeps_saf_and_dqf(proc_bus) -> None:
    async with proc_bus.connect(1, "OUT") as sender:
        proc_bus.proxy(1, 2).cut()
        await wait_for_link(proc_bus, 1, 2, "down")
        for index in range(5):
            await sender.put(b"%d" % index, target="2.10", delivery=MODE.WF_SAF, uma=Uma.DISC)
    await trio.to_thread.run_sync(proc_bus.processes[1].restart)
    assert (await link_state(proc_bus, 1, 2))["saf_backlog"] == 5
    proc_bus.proxy(1, 2).heal()
    await wait_for_link(proc_bus, 1, 2, "up", backlog=0)
    await trio.to_thread.run_sync(proc_bus.processes[2].restart)
    async with proc_bus.connect(2, "IN") as receiver:
        messages = await drain(receiver, 5)
    assert [m.body for m in messages] == [b"%d" % index for index in range(5)]


async def test_status_shows_links_backlog_and_queue_depth(bus) -> None:
    async with bus.connect(1, "OUT") as sender:
        for body in (b"a", b"b"):
            await sender.put(body, target="1.12", delivery=MODE.WF_DQF, uma=Uma.DISC)
        await sender.put(b"m", target="1.12", delivery=MODE.WF_MEM)
    status = await _status(bus, 1)
    assert status["links"]["2"]["state"] == "up"
    assert status["queues"]["1.12"]["pending"] == 3
    assert status["queues"]["1.12"]["dqf_depth"] == 2
    assert (await _status(bus, 2))["links"]["1"]["state"] == "up"


async def _status(bus: LinkedBus, group: int) -> dict:
    async with bus.connect(group, None) as client:
        return await client.status()


@pytest.mark.parametrize(("program", "group"), [("group:7", 7), ("group:2", 2), ("nonsense", 0)])
async def test_link_from_a_wrong_group_is_refused(bus, program, group, caplog) -> None:
    """Group 2 accepts a link only from group 1 (linked, lower-numbered)."""
    from mrs import protocol as wire

    host, port = bus.address(2).rsplit(":", 1)
    connection = wire.Connection("client")
    stream = await bus.memory.network.node("clients").connect(host, int(port))
    async with stream:
        hello = wire.Hello(wire.PROTOCOL_VERSION, program, "link", group)
        await stream.send_all(connection.send(hello))
        events = []
        while not events:
            data = await stream.receive_some(65536)
            connection.receive_data(data)
            events = [e for e in connection.events() if e is not wire.CLOSED]
            if not data:
                break
    assert isinstance(events[0], wire.Fatal) and program in events[0].message
    assert "refused link from" in caplog.text and repr(program) in caplog.text
    assert (await link_state(bus, 1, 2))["state"] == "up"


def group_1_hello(bus) -> wire.Hello:
    """The link Hello group 1 sends, with its journals' incarnation read from them:
    group 2 recorded it when the link came up, and refuses a Hello without it
    (mrs.group.incarnation)."""
    incarnation = bus.store(1).meta_get(INCARNATION_KEY)
    assert incarnation, "group 1 has linked: its journals have an incarnation"
    return wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1, False, bytes(incarnation))


async def test_a_second_link_connection_that_ends_leaves_the_link_up(bus) -> None:
    """A link Hello from group 1 on a new connection replaces the live one (a redial
    while the old one is half-open). When the new one then ended, group 2 counted
    the link down for good: the old connection stayed open and answered group 1's
    heartbeats, so group 1 never dialed again. The replaced connection is now told
    it is over (Fatal), group 1 dials again, and the link is up both ways."""
    from mrs import protocol as wire

    host, port = bus.address(2).rsplit(":", 1)
    connection = wire.Connection("client")
    stream = await bus.memory.network.node("clients").connect(host, int(port))
    async with stream:
        await stream.send_all(connection.send(group_1_hello(bus)))
        events = []
        while not events:
            connection.receive_data(await stream.receive_some(65536))
            events = [e for e in connection.events() if e is not wire.CLOSED]
        assert isinstance(events[0], wire.Welcome)
    await wait_for_link(bus, 2, 1, "down")
    await wait_for_link(bus, 2, 1, "up")
    async with bus.connect(2, "IN2") as client:
        psb = await client.put(b"back", target="1.10", delivery=MODE.WF_DQF, uma=Uma.DLJ)
    assert psb.delivery_status == Status.STORED


async def test_a_peer_that_sends_more_than_a_group_sends_in_one_frame_is_refused(bus) -> None:
    """A group sends LINK_TRANSFER_MESSAGES_MAX messages in a transfer at most; a
    lying peer's 257 was stored (a frame of tiny messages could hold a million, in
    one commit). It is refused with a Fatal naming the count, nothing is stored, and
    the real group 1 dials again."""
    from mrs import protocol as wire
    from mrs.limits import LINK_TRANSFER_MESSAGES_MAX

    host, port = bus.address(2).rsplit(":", 1)
    connection = wire.Connection("client")
    stream = await bus.memory.network.node("clients").connect(host, int(port))
    count = LINK_TRANSFER_MESSAGES_MAX + 1
    fields = (10, 1, 11, b"x", 0, 0, 0, int(MODE.WF_DQF), int(Uma.DISC), b"", 1, None, False)
    messages = [wire.TransferredMessage(1_000 + index, *fields) for index in range(count)]
    async with stream:
        await stream.send_all(connection.send(group_1_hello(bus)))
        await stream.send_all(connection.send(wire.LinkTransfer(1, messages)))
        events: list = []
        while not any(isinstance(event, wire.Fatal) for event in events):
            data = await stream.receive_some(65536)
            assert data, events
            connection.receive_data(data)
            events += [e for e in connection.events() if e is not wire.CLOSED]
    assert [type(event) for event in events] == [wire.Welcome, wire.Fatal]
    assert f"LinkTransfer of {count} messages" in events[1].message
    await wait_for_link(bus, 2, 1, "up")
    async with bus.connect(2, "IN") as receiver:
        assert (await receiver.pending(["IN"])) == [0]


async def test_receiver_forgets_dedupe_keys_once_the_sender_cannot_resend(bus) -> None:
    """Dedupe keys live only while a resend is possible: the journal does not grow."""
    async with bus.connect(1, "OUT") as sender:
        for index in range(20):
            await sender.put(b"%d" % index, target="2.10", delivery=MODE.WF_DQF, uma=Uma.DISC)
        bus.proxy(1, 2).cut()
        await wait_for_link(bus, 1, 2, "down")
        for index in range(20, 30):
            await sender.put(b"%d" % index, target="2.10", delivery=MODE.WF_SAF, uma=Uma.DISC)
        bus.proxy(1, 2).heal()
        await wait_for_link(bus, 1, 2, "up", backlog=0)
    with trio.fail_after(LINK_WAIT_S):
        while (await _status(bus, 2))["dedupe_keys"]:
            await trio.sleep(0.02)
    async with bus.connect(2, "IN") as receiver:
        assert len(await drain(receiver, 30)) == 30


async def test_a_peer_refused_again_and_again_is_one_line_with_a_count(bus, caplog) -> None:
    """A misconfigured peer dials every few seconds, forever: its refusal is logged
    once per interval (with the count of those not shown), not once per dial."""
    from mrs import protocol as wire

    host, port = bus.address(2).rsplit(":", 1)
    for _ in range(5):
        connection = wire.Connection("client")
        stream = await bus.memory.network.node("clients").connect(host, int(port))
        async with stream:
            await stream.send_all(
                connection.send(wire.Hello(wire.PROTOCOL_VERSION, "g7", "link", 7))
            )
            while await stream.receive_some(65536):
                pass  # its Fatal, then the server closes the connection
    lines = [r for r in caplog.records if "refused link from" in r.message]
    assert len(lines) == 1 and "claiming group 7" in lines[0].message
