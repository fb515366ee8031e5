"""Dead letters: the MQDLH-style header, applications' own DLQ messages, the channel
rules on a link, and what a SIGKILL keeps (the DLJ) and loses (the DLQ, memory only).
The cause x UMA matrix itself is in test_uma_matrix.py."""

from __future__ import annotations

import calendar
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from clients import Address, DeliveryMode, MrsError, NoMoreMessages, Status, Uma
from journals import Journal, JournalStore
from sim.processes import GroupProcess

MODE = DeliveryMode
ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 20.0
DLQ_MESSAGES_MAX = 10_000
"""Queue 96's messages_max (it is not configurable)."""
LINK_QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 11
name = "OUT"
confirm = "explicit-out-of-order"
"""


def header_time_ns(header: dict) -> int:
    """A dead-letter header's put date and time (UTC, hundredths of a second) in ns."""
    stamp = time.strptime(header["put_date"] + header["put_time"][:6], "%Y%m%d%H%M%S")
    return (calendar.timegm(stamp) * 100 + int(header["put_time"][6:8])) * 10_000_000


def hundredths(time_ns: int) -> int:
    return time_ns // 10_000_000 * 10_000_000


def dlj_records(journals: Path) -> list:
    store = JournalStore(journals, readonly=True)
    try:
        return [record for _key, record in store.scan(Journal.DLJ)]
    finally:
        store.close()


def saf_seqs(journals: Path) -> list[int]:
    store = JournalStore(journals, readonly=True)
    try:
        return [record.seq for _key, record in store.scan(Journal.SAF)]
    finally:
        store.close()


# ---------------------------------------------------------------------- the header
async def test_system_dead_letter_header(mem_bus) -> None:
    """A message the DLQ UMA moves carries an MQDLH-style header; its body and
    descriptor are the original ones."""
    body = bytes(range(256))  # binary, untouched
    async with (
        mem_bus.connect(queue="SENDER") as sender,
        mem_bus.connect(queue="DLQ") as dlq,
    ):
        before_ns = time.time_ns()
        psb = await sender.put(
            body,
            target="1.50",
            delivery=MODE.WF_DQF,
            uma=Uma.DLQ,
            msg_class=12,
            msg_type=34,
            priority=9,
            correlation_id=b"order-17",
            headers={"app": "billing"},
        )
        after_ns = time.time_ns()
        assert (psb.delivery_status, psb.uma_status) == (Status.NO_DQF, Status.DLQ_SUCCESS)
        message = await dlq.get(timeout=5)
    header = message.dead_letter_header
    assert header == {
        "struc_id": "DLH ",
        "version": 1,
        "reason": 2085,  # MQRC_UNKNOWN_OBJECT_NAME
        "mrs_status": int(Status.NO_DQF),
        "mrs_status_name": "NO_DQF",
        "dest_q_name": "50",
        "dest_q_mgr_name": "1",
        "encoding": 546,  # MQENC_NATIVE: describes the data after the header
        "coded_char_set_id": 1208,
        "format": "MRS",
        "put_appl_type": "MRS",
        "put_appl_name": "NYC",  # the group's name: MRS itself redirected it
        "put_date": header["put_date"],
        "put_time": header["put_time"],
        "text": "no DQF for target 1.50",
    }
    assert re.fullmatch(r"\d{8}", header["put_date"]) and re.fullmatch(r"\d{8}", header["put_time"])
    assert hundredths(before_ns) <= header_time_ns(header) <= after_ns
    assert message.body == body
    assert (message.seq, message.source, message.target) == (
        psb.seq,
        Address(1, 13),
        Address(1, 96),
    )
    assert (message.msg_class, message.msg_type, message.priority) == (12, 34, 9)
    assert (message.delivery, message.correlation_id) == (MODE.WF_DQF, b"order-17")
    assert message.headers == {"app": "billing"}
    assert before_ns <= message.put_time_ns <= after_ns
    # A get from the DLQ is a lease (mrs.group.dlq_leases): it leaves only when confirmed.
    assert message.delivery_status == Status.CONFIRMREQ and message.needs_confirm


@pytest.mark.parametrize(
    "cause_target, delivery, status, reason",
    [
        ("1.14", MODE.WF_MEM, Status.EXCEEDQUOTA, 2053),  # SMALL holds 2 already
        ("1.15", MODE.WF_MEM, Status.NOTACTIVE, 2051),  # TEMP, not attached
        ("1.50", MODE.WF_MEM, Status.NOSUCHQUEUE, 2085),
    ],
    ids=["EXCEEDQUOTA", "NOTACTIVE", "NOSUCHQUEUE"],
)
async def test_header_reason_for_nonrecoverable_causes(
    mem_bus, cause_target, delivery, status, reason
) -> None:
    async with (
        mem_bus.connect(queue="SENDER") as sender,
        mem_bus.connect(queue="DLQ") as dlq,
    ):
        for _ in range(2):
            await sender.put(b"fill", target="1.14", delivery=MODE.WF_MEM)
        psb = await sender.put(b"m", target=cause_target, delivery=delivery, uma=Uma.DLQ)
        assert (psb.delivery_status, psb.uma_status) == (status, Status.DLQ_SUCCESS)
        header = (await dlq.get(timeout=5)).dead_letter_header
    assert (header["reason"], header["mrs_status_name"]) == (reason, status.name)
    assert f"{header['dest_q_mgr_name']}.{header['dest_q_name']}" == cause_target


# ---------------------------------------------------------------------- applications
APP_HEADER = {
    "reason": 2053,
    "dest_q_name": "ORDERS",
    "dest_q_mgr_name": "LDN",
    "format": "JSON",
    "put_appl_name": "order-router",
    "put_appl_type": "PYTHON",
    "put_date": "20260101",
    "put_time": "12000000",
}


async def test_application_puts_its_own_dead_letter_header(mem_bus) -> None:
    async with (
        mem_bus.connect(queue="SENDER") as sender,
        mem_bus.connect(queue="DLQ") as dlq,
    ):
        psb = await sender.put(
            b'{"order": 17}',
            target="DLQ",
            delivery=MODE.WF_MEM,
            headers={"dead_letter_header": APP_HEADER},
        )
        assert psb.delivery_status == Status.ENQUEUED  # the DLQ handler is attached
        message = await dlq.get(timeout=5)
    assert message.dead_letter_header == APP_HEADER  # exactly as given, nothing added
    assert message.body == b'{"order": 17}'
    assert (message.source, message.target) == (Address(1, 13), Address(1, 96))


@pytest.mark.parametrize(
    "header, problem",
    [
        (["reason", 2053], "must be a dict"),
        ({"dest_q_name": "Q", "dest_q_mgr_name": "G"}, "reason is missing (an int)"),
        ({**APP_HEADER, "reason": "2053"}, "reason must be an int, got str"),
        ({**APP_HEADER, "reason": True}, "reason must be an int, got bool"),
        ({**APP_HEADER, "dest_q_name": 10}, "dest_q_name must be a str, got int"),
        ({"reason": 2053, "dest_q_name": "Q"}, "dest_q_mgr_name is missing (a str)"),
        ({**APP_HEADER, "put_appl_name": "x" * 3000}, "put_appl_name has 3000 characters"),
        ({**APP_HEADER, "dest_q_name": "Q" * 49}, "MQDLH holds at most 48"),
    ],
    ids=[
        "not-a-dict",
        "no-reason",
        "reason-str",
        "reason-bool",
        "queue-int",
        "no-group",
        "appl-name-too-long",
        "queue-name-too-long",
    ],
)
async def test_malformed_dead_letter_header_is_badparam(mem_bus, header, problem) -> None:
    async with (
        mem_bus.connect(queue="SENDER") as sender,
        mem_bus.connect(queue="DLQ") as dlq,
    ):
        with pytest.raises(MrsError) as refused:
            await sender.put(
                b"x", target="DLQ", delivery=MODE.WF_MEM, headers={"dead_letter_header": header}
            )
        assert refused.value.status == Status.BADPARAM
        assert problem in refused.value.message
        with pytest.raises(NoMoreMessages):
            await dlq.get(timeout=0)


async def test_the_dlq_takes_no_recoverable_messages(mem_bus) -> None:
    """Queue 96 is memory only: a recoverable put to it has no DQF (NO_DQF)."""
    async with mem_bus.connect(queue="SENDER") as sender:
        psb = await sender.put(b"x", target="DLQ", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert (psb.delivery_status, psb.uma_status) == (Status.NO_DQF, Status.DISC_SUCCESS)


async def fill_dead_letter_queue(sender) -> None:
    """Put DLQ_MESSAGES_MAX messages on the DLQ (pipelined through one connection)."""

    async def worker(first: int) -> None:
        for index in range(first, DLQ_MESSAGES_MAX, 50):
            await sender.put(b"%d" % index, target="DLQ", delivery=MODE.NN_MEM)

    async with trio.open_nursery() as nursery:
        for first in range(50):
            nursery.start_soon(worker, first)


async def test_full_dlq_answers_dlq_failed(mem_bus) -> None:
    async with mem_bus.connect(queue="SENDER") as sender:
        await fill_dead_letter_queue(sender)
        assert (await sender.status())["queues"]["1.96"]["pending"] == DLQ_MESSAGES_MAX
        psb = await sender.put(b"x", target="1.50", delivery=MODE.WF_DQF, uma=Uma.DLQ)
        assert (psb.delivery_status, psb.uma_status) == (Status.NO_DQF, Status.DLQ_FAILED)
        assert (await sender.status())["queues"]["1.96"]["pending"] == DLQ_MESSAGES_MAX


# ---------------------------------------------------------------------- crash
async def test_sigkill_keeps_the_dlj_and_loses_the_dlq(bus) -> None:
    """The DLJ is a journal (committed before DLJ_SUCCESS is answered); the DLQ is a
    queue in memory, as in MessageQ: a crash loses what it held."""
    async with bus.connect(queue="SENDER") as sender:
        journaled = await sender.put(
            b"keep me",
            target="1.50",
            delivery=MODE.WF_CONF,
            uma=Uma.DLJ,
            msg_class=3,
            msg_type=4,
            priority=7,
            correlation_id=b"c-1",
        )
        queued = await sender.put(b"lose me", target="1.50", delivery=MODE.WF_DQF, uma=Uma.DLQ)
        assert (journaled.delivery_status, journaled.uma_status) == (
            Status.NO_DQF,
            Status.DLJ_SUCCESS,
        )
        assert (queued.delivery_status, queued.uma_status) == (Status.NO_DQF, Status.DLQ_SUCCESS)
        assert (await sender.status())["queues"]["1.96"]["pending"] == 1
    await trio.to_thread.run_sync(bus.restart)  # SIGKILL, then start again
    [record] = dlj_records(bus.data_dir / "journals")
    # Everything needed to resend it later (mrs jplay does).
    assert (record.seq, record.body, record.reason) == (
        journaled.seq,
        b"keep me",
        int(Status.NO_DQF),
    )
    assert (record.target_group, record.target_queue) == (1, 50)
    assert (record.source_group, record.source_queue) == (1, 13)
    assert (record.msg_class, record.msg_type, record.priority) == (3, 4, 7)
    assert (record.delivery, record.uma, record.correlation_id) == (
        int(MODE.WF_CONF),
        int(Uma.DLJ),
        b"c-1",
    )
    assert 0 < record.put_time_ns <= record.written_time_ns
    async with bus.connect(queue="DLQ") as dlq:
        with pytest.raises(NoMoreMessages):
            await dlq.get(timeout=0)
        assert (await dlq.status())["queues"]["1.96"]["pending"] == 0


# ---------------------------------------------------------------------- channel rules
async def link_info(linked, group: int, peer: int) -> dict:
    async with linked.connect(group, None) as client:
        return (await client.status())["links"][str(peer)]


async def wait_link(linked, condition, group: int = 1, peer: int = 2) -> dict:
    """Poll a group's link status until `condition` (MockClock time: costs nothing)."""
    with trio.fail_after(WAIT_S):
        while True:
            info = await link_info(linked, group, peer)
            if condition(info):
                return info
            await trio.sleep(0.02)


@pytest.fixture
async def make_linked(make_mem_linked):
    """Groups 1 and 2 (group 2: message_bytes_max = 1000) linked, in this trio run."""

    async def make(**options):
        linked = await make_mem_linked(
            queues=LINK_QUEUES, group_limits={2: "message_bytes_max = 1000"}, **options
        )
        await wait_link(linked, lambda info: info["state"] == "up")
        return linked

    return make


def saf_seqs_of(linked, group: int) -> list[int]:
    return [record.seq for _key, record in linked.store(group).scan(Journal.SAF)]


@pytest.mark.parametrize(
    "target, body, delivery, uma, answered, reason",
    [
        # the SAF interest point is reached at once; group 2 has no queue 50: the
        # receiving group refuses it, so it goes to the receiving group's DLQ
        ("2.50", b"nowhere", MODE.WF_SAF, Uma.DISC, (Status.STORED, Status.NO_UMA), 2085),
        # too big for group 2: UMA SAF stores it; group 2 refuses it over the link
        (
            "2.10",
            b"B" * 2000,
            MODE.WF_DQF,
            Uma.SAF,
            (Status.MSGTOOBIG, Status.SAF_SUCCESS),
            2030,
        ),
    ],
    ids=["NO_DQF", "MSGTOOBIG"],
)
async def test_saf_message_refused_for_good_moves_to_the_dlq(
    make_linked, target, body, delivery, uma, answered, reason
) -> None:
    """Channel rules: the peer refuses a SAF message permanently. A queue it does not
    have is the receiver's refusal: the message goes to the receiving group's DLQ; too
    big for the link is the sender's own: it moves from its SAF to its own DLQ. Either
    way the header says why, since when, and which group put it there."""
    linked = await make_linked()
    receiver = reason == 2085
    dlq_group = 2 if receiver else 1
    async with (
        linked.connect(1, queue="OUT") as sender,
        linked.connect(dlq_group, queue="DLQ") as dlq,
    ):
        linked.proxy(1, 2).cut()
        await wait_link(linked, lambda info: info["state"] == "down")
        psb = await sender.put(body, target=target, delivery=delivery, uma=uma)
        assert (psb.delivery_status, psb.uma_status) == answered
        assert saf_seqs_of(linked, 1) == [psb.seq]
        await trio.sleep(0.05)  # let time pass: the DLQ put time is the move, not the put
        healed_ns = linked.clock_ns()
        linked.proxy(1, 2).heal()
        await wait_link(linked, lambda info: info["state"] == "up" and info["saf_backlog"] == 0)
        message = await dlq.get(timeout=10)
        moved_ns = linked.clock_ns()
    assert saf_seqs_of(linked, 1) == []
    assert (message.seq, message.body, message.source) == (psb.seq, body, Address(1, 11))
    assert message.put_time_ns < hundredths(healed_ns)  # the descriptor keeps the original
    header = message.dead_letter_header
    assert header["reason"] == reason
    assert f"{header['dest_q_mgr_name']}.{header['dest_q_name']}" == target
    assert header["put_appl_name"] == f"G{dlq_group}"  # the group (MQ: queue manager)
    assert message.target == Address(dlq_group, 96)
    assert hundredths(healed_ns) <= header_time_ns(header) <= moved_ns


async def test_application_dead_letter_header_travels_over_a_link(make_linked) -> None:
    linked = await make_linked()
    async with linked.connect(1, queue="OUT") as sender:
        psb = await sender.put(
            b"for LDN's handler",
            target="2.96",
            delivery=MODE.WF_MEM,
            headers={"dead_letter_header": APP_HEADER},
        )
        assert psb.delivery_status in (Status.ENQUEUED, Status.UNATTACHEDQ)
    async with linked.connect(2, queue="DLQ") as dlq:
        message = await dlq.get(timeout=5)
    assert (message.body, message.dead_letter_header) == (b"for LDN's handler", APP_HEADER)


@pytest.mark.parametrize("no_dlq", ["dead_letter_queue = false", "DLQ full"])
async def test_refused_saf_message_without_a_dlq_puts_the_drain_in_retry(
    make_linked, no_dlq
) -> None:
    """Channel rules: when the DLQ put fails too (no DLQ, or it is full) the message
    stays in the SAF and the link's drain goes into RETRY (backing off 0.2 s doubling
    to 5 s, each time starting again from the oldest SAF record).

    While it sits in the SAF, the target group has a SAF backlog, so every later
    recoverable put to group 2 -- even to a valid queue -- is SAF_FORCED, and it waits
    behind the stuck message (FIFO holds: nothing overtakes it). Once the DLQ has room,
    the next retry moves the stuck message there and the later ones follow in order.
    (Too big for the link is the sender's own refusal, so the sender's DLQ it is.)"""
    group_1 = "dead_letter_queue = false" if no_dlq.startswith("dead") else ""
    linked = await make_linked(group_extras={1: group_1})
    async with linked.connect(1, queue="OUT") as sender:
        if no_dlq == "DLQ full":
            await fill_dead_letter_queue(sender)
        refused = await sender.put(b"B" * 2000, target="2.10", delivery=MODE.WF_DQF, uma=Uma.SAF)
        assert (refused.delivery_status, refused.uma_status) == (
            Status.MSGTOOBIG,
            Status.SAF_SUCCESS,
        )
        await wait_link(linked, lambda info: info["drain"] == "retry")
        assert (await link_info(linked, 1, 2))["saf_backlog"] == 1
        assert saf_seqs_of(linked, 1) == [refused.seq]

        later = await sender.put(b"valid", target="2.10", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert (later.delivery_status, later.uma_status) == (Status.SAF_FORCED, Status.NO_UMA)
        info = await wait_link(linked, lambda info: info["drain_wait"] is not None)
        assert info["drain_wait"]["stuck_seq"] == refused.seq
        assert info["drain_wait"]["status"] == "MSGTOOBIG"
        async with linked.connect(2, queue="IN") as receiver:
            await trio.sleep(0.7)  # a negative check: two more retry passes go by (bus time)
            with pytest.raises(NoMoreMessages):
                await receiver.get(timeout=0)
            assert saf_seqs_of(linked, 1) == [refused.seq, later.seq]
            assert (await link_info(linked, 1, 2))["state"] == "up"

            if no_dlq == "DLQ full":
                # A DLQ handler makes room: the next retry moves the message there,
                # and the one behind it follows.
                async with linked.connect(1, queue="DLQ") as dlq:
                    await dlq.get(timeout=0)
                    message = await receiver.get(timeout=10)
                    await receiver.confirm(message.seq)
                    assert (message.seq, message.body) == (later.seq, b"valid")
                    await wait_link(linked, lambda info: info["saf_backlog"] == 0)
                    assert (await dlq.status())["queues"]["1.96"]["pending"] == DLQ_MESSAGES_MAX
                assert saf_seqs_of(linked, 1) == []


# ---------------------------------------------------------------------- the docs
@pytest.fixture
def docs_server(tmp_path):
    config = (ROOT / "docs/examples/bus.toml").read_text().replace("127.0.0.1:7001", "127.0.0.1:0")
    (tmp_path / "bus.toml").write_text(config)
    server = GroupProcess(tmp_path / "bus.toml", 1)
    server.start()
    yield server
    server.terminate()


def test_the_example_in_the_docs_runs(docs_server, tmp_path) -> None:
    page = (ROOT / "docs/undeliverable.md").read_text()
    [example] = re.findall(r"<!-- runnable -->\n```python\n(.*?)```", page, re.DOTALL)
    script = tmp_path / "undeliverable_example.py"
    script.write_text(example)
    result = subprocess.run(
        [sys.executable, str(script), docs_server.address],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    [printed] = re.findall(r"It prints:\n\n```text\n(.*?)```", page, re.DOTALL)
    assert result.stdout == printed
