"""Time probes (session 19): WF timeouts against redelivery, SAF refusals dead-lettered
across a SIGKILL, and RETRY/RETRYINT into a full DQF. Each pins a behaviour the
probes found correct, so a later change that breaks it is caught."""

from __future__ import annotations

import pytest
import trio

from clients import BadParameter, DeliveryMode, MrsTimeout, NoMoreMessages, Status, Uma
from clients.saf_drain import IDEMPOTENCY_HEADER
from journals import Journal
from sim.bus import LinkedBus
from tests.client_helpers import take_all
from tests.process.test_dlq_handler import run_handler
from tests.process.test_links import QUEUES, wait_for_link

MODE = DeliveryMode
MQRC_MSG_TOO_BIG_FOR_Q = 2030
KEY_K1 = {IDEMPOTENCY_HEADER: "k1"}


async def test_wf_conf_timeout_then_receiver_gone_redelivers_possdupl_once(bus) -> None:
    """A WF_CONF put times out while its message is handed out unconfirmed; the
    receiver leaves and the group is SIGKILLed: the sender had TIMEOUT only, and the
    message comes back once, POSSDUPL (a timeout never discards a stored message)."""
    async with bus.connect(queue="SENDER") as sender, bus.connect(queue="ANYORDER") as receiver:
        outcomes: list[object] = []

        async def put() -> None:
            try:
                outcomes.append(
                    await sender.put(
                        b"conf-me",
                        target="ANYORDER",
                        delivery=MODE.WF_CONF,
                        uma=Uma.DLJ,
                        timeout=0.3,
                    )
                )
            except MrsTimeout as timeout:
                outcomes.append(timeout.status)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(put)
            first = await receiver.get(timeout=5)
        assert outcomes == [Status.TIMEOUT]
        assert first.delivery_status == Status.CONFIRMREQ
    bus.restart()
    async with bus.connect(queue="ANYORDER") as receiver:
        again = await receiver.get(timeout=5)
        assert (again.seq, again.delivery_status) == (first.seq, Status.POSSDUPL)
        await receiver.confirm(again.seq)
        try:
            extra = await receiver.get(timeout=0)
        except NoMoreMessages:
            extra = None
        assert extra is None


async def test_saf_refused_over_the_link_is_dead_lettered_once_across_sigkill(
    tmp_path, nursery
) -> None:
    """SAF messages wait for a cut link; the receiving group comes back with a smaller
    message_bytes_max. When the link heals, each refused message is on the sender's
    recoverable DLQ once (reason MQRC_MSG_TOO_BIG_FOR_Q, destination 2.10), still once
    after a SIGKILL of the sender; the others arrive in order."""
    linked = LinkedBus(
        tmp_path / "bus", queues=QUEUES, group_extras={1: "dead_letter_queue_recoverable = true"}
    )
    await linked.start_proxies(nursery)
    await trio.to_thread.run_sync(linked.start)
    try:
        await wait_for_link(linked, 1, 2)
        linked.proxy(1, 2).cut()
        await wait_for_link(linked, 1, 2, "down")
        async with linked.connect(1, "OUT") as sender:
            for index in range(6):
                body = b"%d" % index * (2000 if index % 2 == 0 else 10)
                psb = await sender.put(body, target="2.10", delivery=MODE.WF_SAF, uma=Uma.DLJ)
                assert psb.delivery_status == Status.STORED, psb
        linked.group_limits = {2: "message_bytes_max = 1024"}
        assert linked.config_path is not None
        linked.config_path.write_text(linked._config_text())
        await trio.to_thread.run_sync(linked.processes[2].kill)
        await trio.to_thread.run_sync(linked.processes[2].start)
        linked.proxy(1, 2).heal()
        await wait_for_link(linked, 1, 2, "up", backlog=0)
        await trio.to_thread.run_sync(linked.processes[1].kill)
        await trio.to_thread.run_sync(linked.processes[1].start)
        async with linked.connect(1, "DLQ") as dlq:
            letters = await take_all(dlq)
        async with linked.connect(2, "IN") as receiver:
            arrived = await take_all(receiver)
    finally:
        linked.stop()
    assert [letter.body[:1] for letter in letters] == [b"0", b"2", b"4"]
    for letter in letters:
        header = letter.dead_letter_header
        assert (header["reason"], header["dest_q_mgr_name"], header["dest_q_name"]) == (
            MQRC_MSG_TOO_BIG_FOR_Q,
            "2",
            "10",
        )
    assert [message.body for message in arrived] == [b"1" * 10, b"3" * 10, b"5" * 10]


async def test_recoverable_retry_into_a_full_dqf_waits_retryint_and_stores_once(
    make_mem_bus,
) -> None:
    """A recoverable dead letter (DQF_FULL) is RETRYed every RETRYINT while the DQF is
    full; a refused attempt registers no idempotency key, so once room is made the
    next attempt stores it (not answered as a duplicate of a copy never stored)."""
    group = await make_mem_bus(limits="dqf_messages_max = 3")
    async with group.connect(queue="SENDER") as sender:
        for index in range(3):
            await sender.put(b"fill%d" % index, target="ANYORDER", delivery=MODE.WF_DQF)
        psb = await sender.put(b"late", target="ANYORDER", delivery=MODE.WF_DQF, uma=Uma.DLQ)
        assert (psb.delivery_status, psb.uma_status) == (Status.DQF_FULL, Status.DLQ_SUCCESS)
    table = "RETRYINT(1)\nREASON(MQRC_Q_FULL) ACTION(RETRY) RETRY(30)\n"
    results: list = []
    async with trio.open_nursery() as nursery:

        async def handle() -> None:
            results.append(await run_handler(group, table))

        nursery.start_soon(handle)
        await trio.sleep(2.5)  # virtual: attempts at 0, 1 and 2 s fail
        async with group.connect(queue="ANYORDER") as consumer:
            assert [m.body for m in await take_all(consumer)] == [b"fill0", b"fill1", b"fill2"]
    [(_handler, events)] = results
    assert [event["attempt"] for event in events] == list(range(1, len(events) + 1))
    assert [event["outcome"] for event in events] == ["failed"] * (len(events) - 1) + ["retried"]
    assert 3 <= len(events) <= 5
    async with group.connect(queue="ANYORDER") as consumer:
        assert [m.body for m in await take_all(consumer)] == [b"late"]
    async with group.connect(queue="DLQ") as dlq:
        assert await take_all(dlq) == []


async def test_a_passed_put_time_outside_int64_is_refused_not_stored_undeliverable(bus) -> None:
    """A DLQ reader passes the original put time (`pass_context`). One past int64 was
    answered STORED and then refused by every delivery of it (quarantined to the DLJ,
    never delivered): now the put is refused BADPARAM, and int64's largest is
    delivered with that put time."""
    largest_ns = (1 << 63) - 1
    async with bus.connect(queue="DLQ") as reader:
        with pytest.raises(BadParameter, match="put_time_ns must be an int from 0 to"):
            await reader.put(
                b"too-late",
                target="ORDERS",
                delivery=MODE.WF_DQF,
                uma=Uma.DLJ,
                headers={"pass_context": {"source": "1.13", "put_time_ns": largest_ns + 1}},
            )
        stored = await reader.put(
            b"latest",
            target="ORDERS",
            delivery=MODE.WF_DQF,
            uma=Uma.DLJ,
            headers={"pass_context": {"source": "1.13", "put_time_ns": largest_ns}},
        )
        assert stored.delivery_status == Status.STORED
    async with bus.connect(queue="ORDERS") as receiver:
        got = await receiver.get(timeout=5)
        assert (got.body, got.put_time_ns, str(got.source)) == (b"latest", largest_ns, "1.13")
        await receiver.confirm(got.seq)


async def test_a_saf_message_whose_dlq_copy_fails_stays_in_the_saf(make_mem_linked) -> None:
    """A SAF message the peer refuses for good moves to the sender's recoverable DLQ:
    the copy and the SAF record's deletion were two batches of one commit, and when
    that commit failed the writer tried each alone, so the deletion could land while
    the copy failed (here: every commit holding a DQF put fails map full), and the
    message was in neither. Now the deletion waits on the copy: the message stays in
    the SAF, the link backs off (RETRY) between tries of the copy instead of resending
    at its round-trip rate, and the message moves to the DLQ once the journal takes
    the copy."""
    bus = await make_mem_linked(
        queues=QUEUES, group_extras={1: "dead_letter_queue_recoverable = true"}
    )
    await wait_for_link(bus, 1, 2)
    async with bus.connect(1, "OUT") as sender:
        first = await sender.put(b"first", target="2.10", delivery=MODE.WF_SAF, headers=KEY_K1)
        assert first.delivery_status == Status.STORED
        bus.proxy(1, 2).cut()
        await wait_for_link(bus, 1, 2, "down")
        # The same key with another body: the peer will refuse it KEY_REUSED, for good.
        psb = await sender.put(b"second", target="2.10", delivery=MODE.WF_SAF, headers=KEY_K1)
        assert psb.delivery_status == Status.STORED
    store = bus.store(1)
    refused_copies: list[int] = []

    def fail_dqf_puts(batches) -> str | None:
        if any(journal is Journal.DQF for batch in batches for journal, _, _ in batch.puts):
            refused_copies.append(len(batches))
            return "MAPFULL"
        return None

    store.fault = fail_dqf_puts
    bus.proxy(1, 2).heal()
    await wait_for_link(bus, 1, 2, condition=lambda _info: len(refused_copies) >= 1)
    await trio.sleep(10)  # MockClock: the link's RETRY backoff, not a resend per round trip
    assert [key for key, _ in store.raw_items(Journal.SAF)] != []  # not deleted
    assert 2 <= len(refused_copies) <= 10, len(refused_copies)
    store.fault = None
    info = await wait_for_link(bus, 1, 2, "up", backlog=0)
    assert info["saf_backlog"] == 0
    async with bus.connect(1, "DLQ") as dlq:
        letters = await take_all(dlq)
    assert [(letter.body, letter.dead_letter_header["mrs_status_name"]) for letter in letters] == [
        (b"second", "KEY_REUSED")
    ]
