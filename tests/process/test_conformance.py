"""MessageQ conformance (issue 9): SAF drain progress into a partly-full remote DQF,
each put's own UMA after DQF_FULL, FIFO across a link in RETRY, timeout 0, RTS original
target, MRS_ACKs that survive restarts and travel to another group. The rules run on
the in-process bus under MockClock; the restarts on real `mrs serve` processes linked
through a fault proxy."""

from __future__ import annotations

import pytest
import trio

from clients import DeliveryMode, NoMoreMessages, Status, Uma
from sim.bus import LinkedBus
from tests.conftest import STANDARD_QUEUES

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
name = "OTHER"
confirm = "explicit-out-of-order"
"""
WAIT_S = 30.0


async def status_of(bus, group: int) -> dict:
    async with bus.connect(group, None) as client:
        return await client.status()


async def wait_until(bus, group: int, predicate) -> dict:
    """Poll a group's status until `predicate(status)` holds (no event to await across
    processes, so a short pause between looks; in process it is MockClock time)."""
    with trio.fail_after(WAIT_S):
        while True:
            status = await status_of(bus, group)
            if predicate(status):
                return status
            await trio.sleep(0.02)


async def start_bus(tmp_path, nursery, **options) -> LinkedBus:
    bus = LinkedBus(tmp_path / "bus", **{"queues": QUEUES, **options})
    await bus.start_proxies(nursery)
    await trio.to_thread.run_sync(bus.start)
    await wait_until(bus, 1, lambda status: status["links"]["2"]["state"] == "up")
    return bus


async def start_mem_bus(make_mem_linked, **options):
    """`start_bus`'s groups in this trio run (sim/membus.MemoryLinkedBus)."""
    bus = await make_mem_linked(**{"queues": QUEUES, **options})
    await wait_until(bus, 1, lambda status: status["links"]["2"]["state"] == "up")
    return bus


async def cut(bus) -> None:
    bus.proxy(1, 2).cut()
    await wait_until(bus, 1, lambda status: status["links"]["2"]["state"] == "down")


# ---------------------------------------------------------------------- item 1
async def test_saf_drain_progresses_one_free_slot_at_a_time(make_mem_linked) -> None:
    """A backlog of 12 into a DQF of 3: each transfer stores what fits, in order, and
    the drain resumes from the first refused message as the receiver confirms."""
    count = 12
    bus = await start_mem_bus(make_mem_linked, group_limits={2: "dqf_messages_max = 3"})
    try:
        async with bus.connect(1, "OUT") as sender:
            await cut(bus)
            for index in range(count):
                await sender.put(b"%02d" % index, target="2.10", delivery=MODE.WF_SAF)
            bus.proxy(1, 2).heal()
            waiting = await wait_until(
                bus, 1, lambda status: status["links"]["2"].get("drain_wait") is not None
            )
            wait = waiting["links"]["2"]["drain_wait"]
            assert wait["status"] == "DQF_FULL" and "DQF" in wait["reason"]
            receiving = await status_of(bus, 2)
            assert receiving["dqf_messages"] == 3
            assert "1" in receiving["dqf_held_for_drains"]  # group 1's drain waits in line
        bodies = []
        async with bus.connect(2, "IN") as receiver:
            for _ in range(count):
                message = await receiver.get(timeout=WAIT_S)
                bodies.append(message.body)
                await receiver.confirm(message.seq)
        assert bodies == [b"%02d" % index for index in range(count)]
        await wait_until(bus, 1, lambda status: status["links"]["2"]["saf_backlog"] == 0)
    finally:
        bus.stop()


async def test_saf_drain_is_not_starved_by_local_senders(tmp_path, nursery) -> None:
    """Group 2's own sender puts as fast as slots free up; the drain still gets them.
    (Real processes: the competitor never waits, so under MockClock the link's
    reconnect delay would never pass.)"""
    count = 10
    bus = await start_bus(tmp_path, nursery, group_limits={2: "dqf_messages_max = 2"})
    try:
        async with bus.connect(1, "OUT") as sender:
            await cut(bus)
            for index in range(count):
                await sender.put(b"%02d" % index, target="2.10", delivery=MODE.WF_SAF)
        done = trio.Event()
        competitor_stored = [0]

        async def competitor() -> None:
            async with (
                bus.connect(2, "OUT") as local,
                bus.connect(2, "OTHER") as other,
            ):
                while not done.is_set():
                    psb = await local.put(b"local", target="2.12", delivery=MODE.WF_DQF)
                    if psb.delivery_status == Status.STORED:
                        competitor_stored[0] += 1
                        message = await other.get(timeout=WAIT_S)
                        await other.confirm(message.seq)
                    else:
                        await trio.sleep(0)

        bodies = []
        async with trio.open_nursery() as inner:
            inner.start_soon(competitor)
            bus.proxy(1, 2).heal()
            async with bus.connect(2, "IN") as receiver:
                with trio.fail_after(WAIT_S):
                    for _ in range(count):
                        message = await receiver.get(timeout=WAIT_S)
                        bodies.append(message.body)
                        await receiver.confirm(message.seq)
            done.set()
        assert bodies == [b"%02d" % index for index in range(count)]
    finally:
        bus.stop()


# ---------------------------------------------------------------------- item 2
async def test_each_put_takes_its_own_uma_after_a_remote_dqf_full(make_mem_linked) -> None:
    """A full remote DQF: every WF_DQF put with uma=DLJ is answered DQF_FULL +
    DLJ_SUCCESS, not just the first (none is quietly moved to the SAF)."""
    bus = await start_mem_bus(make_mem_linked, group_limits={2: "dqf_messages_max = 2"})
    try:
        async with bus.connect(1, "OUT") as sender:
            for body in (b"a", b"b"):
                psb = await sender.put(body, target="2.10", delivery=MODE.WF_DQF)
                assert psb.delivery_status == Status.STORED
            answers = []
            for body in (b"c", b"d", b"e"):
                psb = await sender.put(body, target="2.10", delivery=MODE.WF_DQF, uma=Uma.DLJ)
                answers.append((psb.delivery_status, psb.uma_status))
            assert answers == [(Status.DQF_FULL, Status.DLJ_SUCCESS)] * 3
            assert (await status_of(bus, 1))["links"]["2"]["saf_backlog"] == 0
    finally:
        bus.stop()


# ---------------------------------------------------------------------- item 7
async def test_link_in_retry_keeps_fifo_behind_the_stuck_message(make_mem_linked) -> None:
    """A SAF message group 2 refuses (too big there) and group 1 has no DLQ: the link
    goes into RETRY and the three messages behind it wait, retry after retry (status
    shows the stuck message, why, and how many wait). Before the fix they overtook it.
    (tests/process/test_dead_letters.py shows the rest arriving in order once a DLQ has room.)"""
    bus = await start_mem_bus(
        make_mem_linked,
        group_limits={2: "message_bytes_max = 100"},
        group_extras={1: "dead_letter_queue = false"},
    )
    try:
        async with bus.connect(1, "OUT") as sender:
            big = await sender.put(b"x" * 200, target="2.10", delivery=MODE.WF_DQF, uma=Uma.SAF)
            assert (big.delivery_status, big.uma_status) == (Status.MSGTOOBIG, Status.SAF_SUCCESS)
            for body in (b"1", b"2", b"3"):
                psb = await sender.put(body, target="2.10", delivery=MODE.WF_DQF)
                assert psb.delivery_status == Status.SAF_FORCED
            status = await wait_until(
                bus, 1, lambda status: status["links"]["2"].get("drain_wait") is not None
            )
            wait = status["links"]["2"]["drain_wait"]
            assert wait["stuck_seq"] == big.seq and wait["status"] == "MSGTOOBIG"
            assert wait["waiting_behind"] == 3 and "DLQ" in wait["reason"]
            # a negative check over time: let two more retry passes go by (0.2 + 0.4 s)
            await trio.sleep(0.7)
        async with bus.connect(2, "IN") as receiver:
            with pytest.raises(NoMoreMessages):
                await receiver.get(timeout=0)
        assert (await status_of(bus, 1))["links"]["2"]["saf_backlog"] == 4
    finally:
        bus.stop()


# ---------------------------------------------------------------------- item 5
async def test_put_timeout_zero_means_the_default(make_mem_bus) -> None:
    """MessageQ code passes timeout 0 for "the default" (30 s): a WF_CONF put whose
    receiver confirms after half a second succeeds instead of a false TIMEOUT."""
    group = await make_mem_bus()
    results = []
    async with (
        group.connect("SENDER") as sender,
        group.connect("ANYORDER") as receiver,
        trio.open_nursery() as inner,
    ):

        async def put() -> None:
            results.append(
                await sender.put(b"slow", target="1.11", delivery=MODE.WF_CONF, timeout=0)
            )

        inner.start_soon(put)
        message = await receiver.get(timeout=WAIT_S)
        await trio.sleep(0.5)  # the receiver takes its time (longer than 1 ms)
        await receiver.confirm(message.seq)
    assert results[0].status == Status.SUCCESS
    assert (results[0].delivery_status, results[0].seq) == (Status.SUCCESS, message.seq)


# ---------------------------------------------------------------------- item 6
EXTRA_QUEUES = """
[[group.queue]]
id = 17
name = "REPLIES"
[[group.queue]]
id = 18
name = "MEMONLY"
recoverable = false
"""


@pytest.mark.parametrize(
    "mode, target, cause",
    [(MODE.WF_MEM, "1.15", Status.NOTACTIVE), (MODE.WF_DQF, "1.18", Status.NO_DQF)],
)
async def test_returned_message_says_where_it_was_going_and_why(
    make_mem_bus, mode, target, cause
) -> None:
    group = await make_mem_bus(queues=STANDARD_QUEUES + EXTRA_QUEUES)
    async with group.connect("SENDER") as sender:
        psb = await sender.put(
            b"back", target=target, delivery=mode, uma=Uma.RTS, resp_q="1.17", headers={"k": 1}
        )
        assert (psb.delivery_status, psb.uma_status) == (cause, Status.RTS_SUCCESS)
    async with group.connect("REPLIES") as replies:
        returned = await replies.get(timeout=WAIT_S)
    assert (returned.body, returned.delivery_status) == (b"back", Status.MSGUNDEL)
    assert str(returned.original_target) == target and returned.return_reason == cause
    assert returned.headers["k"] == 1  # the sender's own headers are kept


# ---------------------------------------------------------------------- item 3
async def test_ak_conf_ack_survives_a_restart_of_the_senders_group_local(make_bus) -> None:
    group = make_bus()
    async with group.connect("SENDER") as sender:
        psb = await sender.put(b"conf me", target="1.11", delivery=MODE.AK_CONF)
        assert psb.status == Status.SUCCESS
        with trio.fail_after(WAIT_S):  # AK answers at once; wait until it is durable
            while (await sender.status())["dqf_messages"] != 1:
                await trio.sleep(0.02)
        # The count includes a record whose commit may still be to come (a status is
        # answered as soon as it is read); commits keep the order batches came in, so
        # a WF put answered STORED after it means the AK_CONF record is durable too.
        marker = await sender.put(b"marker", target="1.10", delivery=MODE.WF_DQF, uma=Uma.DLJ)
        assert marker.delivery_status == Status.STORED
    await trio.to_thread.run_sync(group.restart)  # SIGKILL before the receiver confirms
    async with (
        group.connect("SENDER") as sender,
        group.connect("ANYORDER") as receiver,
    ):
        message = await receiver.get(timeout=WAIT_S)
        await receiver.confirm(message.seq)
        ack = await sender.get(timeout=WAIT_S)
        assert ack.is_mrs_ack and ack.ack_psb().seq == psb.seq
        assert ack.ack_psb().delivery_status == Status.SUCCESS
        with pytest.raises(NoMoreMessages):
            await sender.get(timeout=0)


@pytest.mark.parametrize("restarted", [1, 2])
async def test_ak_conf_ack_survives_a_restart_of_either_group_remote(
    tmp_path, nursery, restarted
) -> None:
    bus = await start_bus(tmp_path, nursery)
    try:
        async with bus.connect(1, "OUT") as sender:
            psb = await sender.put(b"conf me", target="2.10", delivery=MODE.AK_CONF)
        await wait_until(bus, 2, lambda status: status["dqf_messages"] == 1)
        await trio.to_thread.run_sync(bus.processes[restarted].restart)  # SIGKILL
        async with bus.connect(2, "IN") as receiver:
            message = await receiver.get(timeout=WAIT_S)
            await receiver.confirm(message.seq)
        async with bus.connect(1, "OUT") as sender:
            ack = await sender.get(timeout=WAIT_S)
            assert ack.is_mrs_ack and ack.ack_psb().seq == psb.seq
            assert ack.ack_psb().delivery_status == Status.SUCCESS
            await wait_until(bus, 2, lambda status: status["links"]["1"]["notices_pending"] == 0)
            with pytest.raises(NoMoreMessages):
                await sender.get(timeout=0)
    finally:
        bus.stop()


# ---------------------------------------------------------------------- item 4
async def test_mrs_ack_for_a_response_queue_in_another_group(make_mem_linked) -> None:
    """AK_DQF from group 1 with resp_q 2.12: the MRS_ACK travels to group 2."""
    bus = await start_mem_bus(make_mem_linked)
    try:
        async with (
            bus.connect(1, "OUT") as sender,
            bus.connect(2, "OTHER") as replies,
        ):
            local = await sender.put(b"a", target="1.10", delivery=MODE.AK_DQF, resp_q="2.12")
            remote = await sender.put(b"b", target="2.10", delivery=MODE.AK_DQF, resp_q="2.12")
            seqs = set()
            for _ in range(2):
                ack = await replies.get(timeout=WAIT_S)
                assert ack.is_mrs_ack and ack.ack_psb().delivery_status == Status.STORED
                seqs.add(ack.ack_psb().seq)
            assert seqs == {local.seq, remote.seq}
            with pytest.raises(NoMoreMessages):
                await sender.get(timeout=0)
    finally:
        bus.stop()
