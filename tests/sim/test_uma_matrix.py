"""Every cause that makes a message undeliverable x every UMA the reference allows.

One test per (cause x UMA) cell asserts the PSB (delivery status = the cause, UMA
status = what the UMA did) and where the message ends up: nowhere (DISC), one line in
the event log (DISCL), back on the sender's queue marked MSGUNDEL (RTS), on queue 96
with a dead-letter header (DLQ), in the dead letter journal (DLJ), in the sender's
SAF and delivered once the cause clears (SAF). Then each UMA's own failure, and the
mode/UMA pairs MessageQ refuses.

Each cell runs on its own in-process bus (sim/membus.py: the real server code on the
in-memory network and journals, under MockClock): it arms its cause (a journal fault
word, a full DQF), puts and checks.
"""

from __future__ import annotations

import calendar
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from clients import (
    Address,
    Client,
    DeliveryMode,
    MrsError,
    NoMoreMessages,
    NoSuchQueue,
    NotSupported,
    Psb,
    Status,
    Uma,
)
from journals import Journal
from mrs import protocol as wire
from sim.membus import MemoryLinkedBus

MODE = DeliveryMode
WAIT_S = 20.0
QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 13
name = "SENDER"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 14
name = "SMALL"
messages_max = 2
[[group.queue]]
id = 15
name = "TEMP"
permanent = false
[[group.queue]]
id = 16
name = "RAW"
[[group.queue]]
id = 17
name = "FULLSENDER"
confirm = "explicit-out-of-order"
messages_max = 1
"""
SENDER = Address(1, 13)
FULL_SENDER = Address(1, 17)
DLQ = "1.96"
SMALL_BODY = 16
BIG_BODY = 2000
"""Over group 2's message_bytes_max (1000), under group 1's (the default 1 MiB)."""
MQRC = {
    Status.DQF_FULL: 2053,  # MQRC_Q_FULL
    Status.EXCEEDQUOTA: 2053,  # MQRC_Q_FULL
    Status.NO_DQF: 2085,  # MQRC_UNKNOWN_OBJECT_NAME
    Status.NOSUCHQUEUE: 2085,  # MQRC_UNKNOWN_OBJECT_NAME
    Status.MSGTOOBIG: 2030,  # MQRC_MSG_TOO_BIG_FOR_Q
    Status.LINK_DOWN: 2059,  # MQRC_Q_MGR_NOT_AVAILABLE
    Status.NOTACTIVE: 2051,  # MQRC_PUT_INHIBITED
    Status.MRS_RES_EXH: 2071,  # MQRC_STORAGE_NOT_AVAILABLE
    Status.DQF_DEVICE_FAIL: 2102,  # MQRC_RESOURCE_PROBLEM
    Status.SAF_DEVICE_FAIL: 2102,  # MQRC_RESOURCE_PROBLEM
}
"""The reason a system-written dead-letter header carries for each cause."""
EVENT_KEYS = {"time_ns", "seq", "sender", "target", "cause", "reason"}


# ---------------------------------------------------------------------- the buses
@dataclass
class Env:
    """One cell's in-process bus (groups 1-3; those not started are down)."""

    linked: MemoryLinkedBus

    def address(self, group: int) -> str:
        return self.linked.address(group)

    def connect(self, group: int, queue):
        return self.linked.connect(group, queue)

    def store(self, group: int):
        return self.linked.store(group)

    def event_log(self, group: int) -> Path:
        return self.linked.data_dir(group) / "events.jsonl"

    def fail(self, group: int, word: str) -> None:
        """Every commit of `group` fails with `word` ("": none), as MRS_FAULT_FILE."""
        self.linked.memory.faults[group] = word or None

    def clock_ns(self) -> int:
        return self.linked.clock_ns()

    async def start(self, group: int) -> None:
        await self.linked.memory.start(group)

    def kill(self, group: int) -> None:
        self.linked.kill(group)

    async def fresh_link(self, group: int, peer: int) -> None:
        """Cut and heal the link so that it runs on a new connection."""
        proxy = self.linked.proxy(group, peer)
        proxy.cut()
        await wait_for_link(self, group, peer, lambda info: info["state"] == "down")
        proxy.heal()
        await wait_for_link(self, group, peer, lambda info: info["state"] == "up")


@pytest.fixture
async def quiet(make_mem_linked) -> Env:
    return await make_quiet(make_mem_linked)


async def make_quiet(make_mem_linked) -> Env:
    """Causes that need no arming. Group 2 takes bodies of at most 1000 bytes; group 3
    is configured and linked but not running (its link is down); the SMALL queues
    (messages_max = 2) of groups 1 and 2 are full; TEMP is never attached."""
    linked = await make_mem_linked(
        group_ids=(1, 2, 3),
        queues=QUEUES,
        group_limits={2: "message_bytes_max = 1000"},
        started=(1, 2),
    )
    env = Env(linked)
    await _prepare_quiet(env)
    return env


async def _prepare_quiet(env: Env) -> None:
    await wait_for_link(env, 1, 2, lambda info: info["state"] == "up")
    async with env.connect(1, str(SENDER)) as sender:
        for target in ("1.14", "2.14"):
            for index in range(2):
                psb = await sender.put(b"fill %d" % index, target=target, delivery=MODE.WF_MEM)
                assert psb.delivery_status in (Status.ENQUEUED, Status.UNATTACHEDQ)


@pytest.fixture
async def armed(make_mem_linked) -> Env:
    return await make_armed(make_mem_linked)


async def make_armed(make_mem_linked) -> Env:
    """Causes a cell arms and disarms: a fault word per group and a DQF of at most 2
    messages."""
    linked = await make_mem_linked(queues=QUEUES, limits="dqf_messages_max = 2")
    env = Env(linked)
    await wait_for_link(env, 1, 2, lambda info: info["state"] == "up")
    return env


# ---------------------------------------------------------------------- helpers
async def group_status(env: Env, group: int) -> dict:
    async with env.connect(group, None) as client:
        return await client.status()


async def wait_for_link(env: Env, group: int, peer: int, condition) -> dict:
    """Poll a group's status until its link to `peer` meets `condition` (a short pause
    between looks: MockClock time, so it costs no wall time)."""
    with trio.fail_after(WAIT_S):
        while True:
            info = (await group_status(env, group))["links"][str(peer)]
            if condition(info):
                return info
            await trio.sleep(0.02)


@asynccontextmanager
async def attached(env: Env, group: int, queue: str) -> AsyncIterator[Client]:
    """connect() to a queue. The previous test's connection to the same queue may still
    be closing on the server (QUEUE_BUSY until it reads the EOF): retry briefly."""
    deadline = trio.current_time() + WAIT_S
    while True:
        stack = AsyncExitStack()
        try:
            client = await stack.enter_async_context(env.connect(group, queue))
            break
        except MrsError as error:
            if error.status != Status.QUEUE_BUSY or trio.current_time() > deadline:
                raise
        await trio.sleep(0.02)
    async with stack:
        yield client


async def take_all(client: Client) -> list:
    """Every message waiting on the client's queue (gets until NOMOREMSG)."""
    messages = []
    while True:
        try:
            messages.append(await client.get(timeout=0))
        except NoMoreMessages:
            return messages


def journal_records(store, journal: Journal, seq: int) -> list:
    return [record for _key, record in store.scan(journal) if record.seq == seq]


def event_lines(event_log: Path, seq: int) -> list[dict]:
    if not event_log.is_file():
        return []
    lines = [json.loads(line) for line in event_log.read_text().splitlines()]
    return [line for line in lines if line["seq"] == seq]


def header_time_ns(header: dict) -> int:
    """The put date and time of a dead-letter header (UTC, hundredths) in ns."""
    stamp = time.strptime(header["put_date"] + header["put_time"][:6], "%Y%m%d%H%M%S")
    return (calendar.timegm(stamp) * 100 + int(header["put_time"][6:8])) * 10_000_000


def now_bound_ns() -> int:
    """At least any in-process group's clock now (wall time plus all MockClock skipped
    in this run): an upper bound for times the groups wrote."""
    return time.time_ns() + int(trio.current_time() * 1e9)


def assert_put_between(header: dict, before_ns: int, after_ns: int) -> None:
    hundredth = 10_000_000
    assert before_ns // hundredth * hundredth <= header_time_ns(header) <= after_ns


# ---------------------------------------------------------------------- the causes
@dataclass(frozen=True)
class Cause:
    label: str
    status: Status
    """The delivery status the PSB reports."""
    env: str
    """Fixture serving it."""
    target: str
    mode: DeliveryMode = MODE.WF_DQF
    fault: tuple[int, str] | None = None
    """(group, word): the word is in that group's fault file while the put runs."""
    fill: int = 0
    """Messages stored in the target queue first, to fill its group's DQF."""
    body_size: int = SMALL_BODY
    saf_then: str = ""
    """What follows a successful UMA SAF: "retry" (the peer refuses while the cause
    lasts, then takes it), "link" (the link comes up), "dlq" (the peer refuses it for
    good as too big for the link: the channel rules move it to group 1's DLQ) or
    "receiver-dlq" (the peer has no such queue: it puts it on its own DLQ)."""

    @property
    def fresh_link(self) -> bool:
        """A transient refusal by the peer (DQF full, journal failing) makes it refuse
        every later recoverable message of the same link connection, to keep FIFO,
        until the sender starts over from its SAF. Such a cell starts on a new
        connection so that it does not depend on the cells before it."""
        return self.env == "armed" and self.target_address.group != 1

    @property
    def target_address(self) -> Address:
        return Address.parse(self.target)

    @property
    def umas(self) -> list[Uma]:
        """The UMAs MessageQ allows with this cause's mode."""
        allowed = [Uma.DISC, Uma.DISCL, Uma.RTS, Uma.DLQ]
        if self.mode.recoverable:
            allowed.append(Uma.DLJ)
            if self.mode.interest_point != "SAF":
                allowed.append(Uma.SAF)
        return allowed

    def expected_uma_status(self, uma: Uma) -> Status:
        if uma is Uma.DLJ and self.fault is not None and self.fault[0] == 1:
            return Status.DLJ_FAILED  # the DLJ lives on the same failing journal
        if uma is Uma.SAF and self.target_address.group == 1:
            return Status.SAF_FAILED  # no SAF towards the sender's own group
        return {
            Uma.DISC: Status.DISC_SUCCESS,
            Uma.DISCL: Status.DISCL_SUCCESS,
            Uma.RTS: Status.RTS_SUCCESS,
            Uma.DLQ: Status.DLQ_SUCCESS,
            Uma.DLJ: Status.DLJ_SUCCESS,
            Uma.SAF: Status.SAF_SUCCESS,
        }[uma]


CAUSES = [
    # link down: group 3 is linked but not running
    Cause("LINK_DOWN", Status.LINK_DOWN, "quiet", "3.10", saf_then="link"),
    Cause("LINK_DOWN-WF_MEM", Status.LINK_DOWN, "quiet", "3.10", MODE.WF_MEM),
    # the target group's DQF holds dqf_messages_max
    Cause("DQF_FULL-remote", Status.DQF_FULL, "armed", "2.10", fill=2, saf_then="retry"),
    Cause("DQF_FULL-local", Status.DQF_FULL, "armed", "1.10", fill=2),
    # no DQF for the target queue (no such queue)
    Cause("NO_DQF-remote", Status.NO_DQF, "quiet", "2.50", saf_then="receiver-dlq"),
    Cause("NO_DQF-local", Status.NO_DQF, "quiet", "1.50"),
    # journal device failure on commit
    Cause(
        "DQF_DEVICE_FAIL-EIO-remote",
        Status.DQF_DEVICE_FAIL,
        "armed",
        "2.10",
        fault=(2, "EIO"),
        saf_then="retry",
    ),
    Cause(
        "DQF_DEVICE_FAIL-ENOSPC-remote",
        Status.DQF_DEVICE_FAIL,
        "armed",
        "2.10",
        fault=(2, "ENOSPC"),
        saf_then="retry",
    ),
    Cause("DQF_DEVICE_FAIL-EIO-local", Status.DQF_DEVICE_FAIL, "armed", "1.10", fault=(1, "EIO")),
    Cause("SAF_DEVICE_FAIL", Status.SAF_DEVICE_FAIL, "armed", "2.10", MODE.WF_SAF, (1, "EIO")),
    # MRS resource exhaustion: the LMDB map is full
    Cause(
        "MRS_RES_EXH-remote",
        Status.MRS_RES_EXH,
        "armed",
        "2.10",
        fault=(2, "MAPFULL"),
        saf_then="retry",
    ),
    Cause("MRS_RES_EXH-local", Status.MRS_RES_EXH, "armed", "1.10", fault=(1, "MAPFULL")),
    # too big for the target group (group 2: message_bytes_max = 1000)
    Cause("MSGTOOBIG", Status.MSGTOOBIG, "quiet", "2.10", body_size=BIG_BODY, saf_then="dlq"),
    Cause("MSGTOOBIG-WF_MEM", Status.MSGTOOBIG, "quiet", "2.10", MODE.WF_MEM, body_size=BIG_BODY),
    # nonrecoverable only: over quota, not attached, no such queue
    Cause("EXCEEDQUOTA-local", Status.EXCEEDQUOTA, "quiet", "1.14", MODE.WF_MEM),
    Cause("EXCEEDQUOTA-local-WF_ACK", Status.EXCEEDQUOTA, "quiet", "1.14", MODE.WF_ACK),
    Cause("EXCEEDQUOTA-remote", Status.EXCEEDQUOTA, "quiet", "2.14", MODE.WF_MEM),
    Cause("NOTACTIVE-local", Status.NOTACTIVE, "quiet", "1.15", MODE.WF_MEM),
    Cause("NOTACTIVE-remote-WF_DEQ", Status.NOTACTIVE, "quiet", "2.15", MODE.WF_DEQ),
    Cause("NOSUCHQUEUE-local", Status.NOSUCHQUEUE, "quiet", "1.50", MODE.WF_MEM),
    Cause("NOSUCHQUEUE-remote", Status.NOSUCHQUEUE, "quiet", "2.50", MODE.WF_MEM),
]
CELLS = [
    pytest.param(cause, uma, id=f"{cause.label}-{uma.name}")
    for cause in CAUSES
    for uma in cause.umas
]


@asynccontextmanager
async def cause_armed(env: Env, cause: Cause, sender: Client) -> AsyncIterator[None]:
    """Make the cause true for the duration of the block, then undo it."""
    if cause.fill:
        for index in range(cause.fill):
            psb = await sender.put(
                b"fill %d" % index, target=cause.target, delivery=MODE.WF_DQF, uma=Uma.DISC
            )
            assert psb.delivery_status == Status.STORED
    if cause.fault is not None:
        env.fail(cause.fault[0], cause.fault[1])
    try:
        yield
    finally:
        if cause.fault is not None:
            env.fail(cause.fault[0], "")
        if cause.fill:
            target = cause.target_address
            async with attached(env, target.group, str(target)) as receiver:
                for index in range(cause.fill):
                    message = await receiver.get(timeout=10)
                    assert message.body == b"fill %d" % index
                    await receiver.confirm(message.seq)


# ---------------------------------------------------------------------- the matrix
@pytest.fixture
async def env(request, make_mem_linked) -> Env:
    """The bus serving this cell's cause, "quiet" or "armed"."""
    make = {"quiet": make_quiet, "armed": make_armed}[request.node.callspec.params["cause"].env]
    return await make(make_mem_linked)


@pytest.mark.parametrize("cause, uma", CELLS)
async def test_cell(env: Env, cause: Cause, uma: Uma) -> None:
    expected_uma = cause.expected_uma_status(uma)
    body = f"{cause.label}/{uma.name}".encode().ljust(cause.body_size, b".")
    if cause.fresh_link:
        await env.fresh_link(1, cause.target_address.group)
    async with (
        attached(env, 1, str(SENDER)) as sender,
        attached(env, 1, DLQ) as dlq,
    ):
        async with cause_armed(env, cause, sender):
            before_ns = env.clock_ns()
            psb = await sender.put(
                body,
                target=cause.target,
                delivery=cause.mode,
                uma=uma,
                msg_class=7,
                msg_type=-3,
                priority=5,
                correlation_id=b"cell",
            )
            after_ns = env.clock_ns()
            assert (psb.status, psb.delivery_status, psb.uma_status) == (
                Status.SUCCESS,
                cause.status,
                expected_uma,
            )
            if uma is Uma.SAF and cause.saf_then in ("dlq", "receiver-dlq"):
                # The link is up: the SAF drains at once, the peer refuses the message
                # for good, and the channel rules move it to this group's DLQ.
                peer = cause.target_address.group
                await wait_for_link(env, 1, peer, lambda info: info["saf_backlog"] == 0)
            found = {
                "sender": await take_all(sender),
                "dlq": await take_all(dlq),
                "dlj": journal_records(env.store(1), Journal.DLJ, psb.seq),
                "saf": journal_records(env.store(1), Journal.SAF, psb.seq),
                "events": event_lines(env.event_log(1), psb.seq),
            }
            if uma is Uma.SAF and cause.saf_then == "receiver-dlq":
                async with attached(env, 2, "2.96") as receiver_dlq:
                    found["receiver-dlq"] = await take_all(receiver_dlq)
                    for message in found["receiver-dlq"]:
                        await receiver_dlq.confirm(message.seq)
            found = {place: items for place, items in found.items() if items}
            expected_place = {
                Status.DISCL_SUCCESS: "events",
                Status.RTS_SUCCESS: "sender",
                Status.DLQ_SUCCESS: "dlq",
                Status.DLJ_SUCCESS: "dlj",
                Status.SAF_SUCCESS: (
                    cause.saf_then if cause.saf_then in ("dlq", "receiver-dlq") else "saf"
                ),
            }.get(expected_uma)
            assert set(found) == ({expected_place} if expected_place else set())
            if expected_place is None:
                return
            [item] = found[expected_place]
            check = {
                "events": check_event_line,
                "sender": check_returned,
                "dlq": check_dead_lettered,
                "receiver-dlq": check_receiver_dead_lettered,
                "dlj": check_dlj_record,
                "saf": check_saf_record,
            }[expected_place]
            check(item, cause, uma, psb.seq, body, before_ns, after_ns)
            if expected_place in ("sender", "dlq"):
                if expected_place == "dlq":  # a DLQ get is a lease: the confirm removes it
                    await dlq.confirm(item.seq)
                queues = (await sender.status())["queues"]
                # A returned or dead-lettered copy is not waiting for a confirm.
                assert queues[str(SENDER)]["unconfirmed"] == 0
                assert queues[DLQ]["unconfirmed"] == 0
            if expected_place == "saf" and cause.saf_then == "retry":
                # The peer refuses it while the cause lasts: the drain is in RETRY.
                peer = cause.target_address.group
                await wait_for_link(env, 1, peer, lambda info: info["drain"] == "retry")
        if expected_place == "saf":
            await check_forwarded_after_recovery(env, cause, psb.seq, body)


def check_event_line(line, cause, uma, seq, body, before_ns, after_ns) -> None:
    assert set(line) >= EVENT_KEYS
    assert (line["sender"], line["target"], line["cause"]) == (
        str(SENDER),
        cause.target,
        cause.status.name,
    )
    assert before_ns <= line["time_ns"] <= after_ns
    assert isinstance(line["reason"], str) and line["reason"]


def check_returned(message, cause, uma, seq, body, before_ns, after_ns) -> None:
    assert message.delivery_status == Status.MSGUNDEL and not message.needs_confirm
    assert (message.seq, message.body, message.source, message.target) == (
        seq,
        body,
        SENDER,
        SENDER,
    )
    assert (message.msg_class, message.msg_type, message.priority) == (7, -3, 5)
    assert (message.delivery, message.correlation_id) == (cause.mode, b"cell")
    assert before_ns <= message.put_time_ns <= after_ns


def check_dead_lettered(message, cause, uma, seq, body, before_ns, after_ns) -> None:
    # The body and the descriptor are the original ones; only the header is added.
    assert (message.seq, message.body, message.source, message.target) == (
        seq,
        body,
        SENDER,
        Address(1, 96),
    )
    assert (message.msg_class, message.msg_type, message.priority) == (7, -3, 5)
    assert (message.delivery, message.correlation_id) == (cause.mode, b"cell")
    assert message.delivery_status == Status.CONFIRMREQ  # leased until confirmed
    assert before_ns <= message.put_time_ns <= after_ns
    header = message.dead_letter_header
    target = cause.target_address
    assert header == {
        **header,
        "struc_id": "DLH ",
        "version": 1,
        "reason": MQRC[cause.status],
        "mrs_status": int(cause.status),
        "dest_q_name": str(target.queue),
        "dest_q_mgr_name": str(target.group),
        "format": "MRS",
        "put_appl_type": "MRS",
    }
    if uma is Uma.SAF:  # moved by the channel rules when the peer refused it
        assert header["put_appl_name"] == "G1"  # the group that redirected it
        assert_put_between(header, before_ns, now_bound_ns())
    else:
        assert header["put_appl_name"] == "G1"
        assert_put_between(header, before_ns, after_ns)


def check_receiver_dead_lettered(message, cause, uma, seq, body, before_ns, after_ns) -> None:
    """The receiving group refused a SAF-drained message: on its own DLQ, put by it."""
    assert (message.seq, message.body, message.source, message.target) == (
        seq,
        body,
        SENDER,
        Address(2, 96),
    )
    header = message.dead_letter_header
    assert (header["reason"], header["put_appl_name"]) == (MQRC[cause.status], "G2")
    assert f"{header['dest_q_mgr_name']}.{header['dest_q_name']}" == cause.target
    assert_put_between(header, before_ns, now_bound_ns())


def check_dlj_record(record, cause, uma, seq, body, before_ns, after_ns) -> None:
    target = cause.target_address
    assert record.reason == int(cause.status)
    assert (record.seq, record.body, record.correlation_id) == (seq, body, b"cell")
    assert (record.target_group, record.target_queue) == (target.group, target.queue)
    assert (record.source_group, record.source_queue) == (SENDER.group, SENDER.queue)
    assert (record.msg_class, record.msg_type, record.priority) == (7, -3, 5)
    assert (record.delivery, record.uma) == (int(cause.mode), int(Uma.DLJ))
    assert before_ns <= record.put_time_ns <= record.written_time_ns <= after_ns


def check_saf_record(record, cause, uma, seq, body, before_ns, after_ns) -> None:
    target = cause.target_address
    assert (record.seq, record.body) == (seq, body)
    assert (record.target_group, record.target_queue) == (target.group, target.queue)
    assert (record.source_group, record.source_queue) == (SENDER.group, SENDER.queue)


async def check_forwarded_after_recovery(env: Env, cause: Cause, seq: int, body: bytes) -> None:
    """A message the SAF UMA stored is delivered once the cause has cleared."""
    target = cause.target_address
    if cause.saf_then == "link":
        await env.start(target.group)
    try:
        await wait_for_link(
            env,
            1,
            target.group,
            lambda info: info["state"] == "up" and info["saf_backlog"] == 0,
        )
        async with attached(env, target.group, str(target)) as receiver:
            message = await receiver.get(timeout=10)
            assert (message.seq, message.body) == (seq, body)
            assert message.delivery_status == Status.CONFIRMREQ
            await receiver.confirm(message.seq)
    finally:
        if cause.saf_then == "link":  # back to "group 3 is down" for the next cells
            env.kill(target.group)
            await wait_for_link(env, 1, target.group, lambda info: info["state"] == "down")


# ---------------------------------------------------------------------- AK notification
@pytest.mark.parametrize("uma", [Uma.DISC, Uma.RTS, Uma.DLJ], ids=lambda uma: uma.name)
async def test_ak_put_reports_cause_and_uma_in_the_mrs_ack(quiet: Env, uma: Uma) -> None:
    """AK_DQF: the put answers at once (UMA_NA); the outcome comes as an MRS_ACK."""
    async with attached(quiet, 1, str(SENDER)) as sender:
        psb = await sender.put(b"ak", target="1.50", delivery=MODE.AK_DQF, uma=uma)
        assert (psb.delivery_status, psb.uma_status) == (Status.SUCCESS, Status.UMA_NA)
        messages = [await sender.get(timeout=10)]
        while not messages[-1].is_mrs_ack:  # the ACK comes once the UMA is done
            messages.append(await sender.get(timeout=10))
        messages += await take_all(sender)
    [ack] = [message for message in messages if message.is_mrs_ack]
    uma_status = {Uma.DISC: Status.DISC_SUCCESS, Uma.RTS: Status.RTS_SUCCESS}.get(
        uma, Status.DLJ_SUCCESS
    )
    assert ack.ack_psb() == Psb(Status.SUCCESS, Status.NO_DQF, psb.seq, uma_status)
    returned = [message for message in messages if not message.is_mrs_ack]
    assert [(m.seq, m.delivery_status) for m in returned] == (
        [(psb.seq, Status.MSGUNDEL)] if uma is Uma.RTS else []
    )


# ---------------------------------------------------------------------- UMA failures
@pytest.fixture
async def failing(make_mem_linked) -> Env:
    """Group 1 where every UMA that can fail does: the event log path is a directory,
    the sender's queue (FULLSENDER, messages_max = 1) holds one message, there is no
    DLQ, the DLJ (dlj_messages_max = 1) and the SAF (saf_messages_max = 1) each hold
    one message already. Groups 2 and 3 are not running."""
    linked = await make_mem_linked(
        group_ids=(1, 2, 3),
        queues=QUEUES,
        group_extras={1: "dead_letter_queue = false"},
        group_limits={1: "dlj_messages_max = 1\nsaf_messages_max = 1\ndqf_messages_max = 1"},
        started=(),
    )
    env = Env(linked)
    env.event_log(1).mkdir(parents=True)
    await env.start(1)
    await _prepare_failing(env)
    return env


async def _prepare_failing(env: Env) -> None:
    async with env.connect(1, str(FULL_SENDER)) as sender:
        psb = await sender.put(b"fills my queue", target=FULL_SENDER, delivery=MODE.WF_MEM)
        assert psb.delivery_status == Status.ENQUEUED
        psb = await sender.put(b"fills the DLJ", target="1.50", delivery=MODE.WF_DQF, uma=Uma.DLJ)
        assert (psb.delivery_status, psb.uma_status) == (Status.NO_DQF, Status.DLJ_SUCCESS)
        psb = await sender.put(b"fills the SAF", target="3.10", delivery=MODE.WF_SAF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED
        psb = await sender.put(b"fills the DQF", target="1.10", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED


FAILURES = {
    Uma.DISC: Status.DISC_SUCCESS,  # discarding cannot fail
    Uma.DISCL: Status.DISCL_FAILED,  # events.jsonl is a directory
    Uma.RTS: Status.RTS_FAIL,  # the sender's queue holds messages_max
    Uma.DLQ: Status.DLQ_FAILED,  # dead_letter_queue = false
    Uma.DLJ: Status.DLJ_FAILED,  # the DLJ holds dlj_messages_max
    Uma.SAF: Status.SAF_FAILED,  # the SAF holds saf_messages_max
}
FAILING_CAUSES = [
    Cause("NO_DQF-local", Status.NO_DQF, "failing", "1.50"),
    Cause("DQF_FULL-local", Status.DQF_FULL, "failing", "1.10"),
    Cause("LINK_DOWN", Status.LINK_DOWN, "failing", "2.10"),
    Cause("NOSUCHQUEUE-local", Status.NOSUCHQUEUE, "failing", "1.50", MODE.WF_MEM),
]


@pytest.mark.parametrize(
    "cause, uma",
    [
        pytest.param(cause, uma, id=f"{cause.label}-{uma.name}")
        for cause in FAILING_CAUSES
        for uma in cause.umas
    ],
)
async def test_uma_failure(failing: Env, cause: Cause, uma: Uma) -> None:
    """When the UMA itself fails the message is lost: the PSB says so."""
    async with attached(failing, 1, str(FULL_SENDER)) as sender:
        psb = await sender.put(b"doomed", target=cause.target, delivery=cause.mode, uma=uma)
        assert (psb.status, psb.delivery_status, psb.uma_status) == (
            Status.SUCCESS,
            cause.status,
            FAILURES[uma],
        )
        # Nowhere: the sender's queue still holds only its one message, and the DLJ,
        # the SAF and the (unwritable) event log have nothing new.
        assert (await sender.status())["queues"][str(FULL_SENDER)]["pending"] == 1
    assert journal_records(failing.store(1), Journal.DLJ, psb.seq) == []
    assert journal_records(failing.store(1), Journal.SAF, psb.seq) == []
    assert failing.event_log(1).is_dir()
    assert "1.96" not in (await group_status(failing, 1))["queues"]


async def test_a_group_without_dlq_has_no_queue_96(failing: Env) -> None:
    with pytest.raises(NoSuchQueue):
        async with failing.connect(1, DLQ):
            pass


# ---------------------------------------------------------------------- refused pairs
NOT_SUPPORTED = [
    pytest.param(mode, uma, id=f"{mode.name}-{uma.name}")
    for mode in DeliveryMode
    for uma in (Uma.DLJ, Uma.SAF)
    if not mode.recoverable or (uma is Uma.SAF and mode.interest_point == "SAF")
]


@pytest.mark.parametrize("mode, uma", NOT_SUPPORTED)
async def test_pair_not_supported(quiet: Env, mode: DeliveryMode, uma: Uma) -> None:
    """DLJ/SAF with a nonrecoverable mode, SAF with a SAF mode: the put is refused
    (NOTSUPPORTED) before anything is queued or stored."""
    async with attached(quiet, 1, str(SENDER)) as sender:
        with pytest.raises(NotSupported) as refused:
            await sender.put(b"refused", target="1.10", delivery=mode, uma=uma)
        assert refused.value.status == Status.NOTSUPPORTED
        assert (await sender.status())["queues"]["1.10"]["pending"] == 0


def test_the_refused_pairs_are_exactly_the_reference_ones() -> None:
    pairs = {(p.values[0].name, p.values[1].name) for p in NOT_SUPPORTED}
    nonrecoverable = ["WF_MEM", "AK_MEM", "NN_MEM", "WF_DEQ", "AK_DEQ", "WF_ACK", "AK_ACK"]
    assert pairs == (
        {(mode, uma) for mode in nonrecoverable for uma in ("DLJ", "SAF")}
        | {(mode, "SAF") for mode in ("WF_SAF", "AK_SAF", "NN_SAF")}
    )


async def _raw_put(env: Env, put: wire.Put) -> object:
    """Hello, attach to RAW, one Put, on a raw connection (no client library, which
    would refuse the put itself); the server's answer."""
    host, port = env.address(1).rsplit(":", 1)
    connection = wire.Connection("client")
    stream = await env.linked.memory.network.node("raw").connect(host, int(port))
    async with stream:
        await stream.send_all(
            connection.send(wire.Hello(wire.PROTOCOL_VERSION, "raw"))
            + connection.send(wire.Attach(1, "RAW"))
            + connection.send(put)
        )
        with trio.fail_after(10):
            while True:
                data = await stream.receive_some(65536)
                assert data, "the server closed the connection"
                connection.receive_data(data)
                for event in connection.events():
                    if getattr(event, "request_id", None) == put.request_id:
                        return event
                    assert not isinstance(event, wire.Failure | wire.Fatal), event


@pytest.mark.parametrize(
    "mode", [mode for mode in DeliveryMode if mode.recoverable], ids=lambda mode: mode.name
)
async def test_recoverable_put_without_uma_is_baduma(quiet: Env, mode: DeliveryMode) -> None:
    """MessageQ requires a UMA with recoverable modes. The client library defaults it
    (to DLJ), so the raw protocol shows the server's answer to uma = 0."""
    put = wire.Put(2, "1.10", b"no uma", int(mode), 0, 0, 0, 0, 0, b"", "", None)
    answer = await _raw_put(quiet, put)
    assert isinstance(answer, wire.Failure) and answer.status == Status.BADUMA


@pytest.mark.parametrize(
    "delivery, uma, status",
    [(MODE.WF_DQF, 7, Status.BADUMA), (99, Uma.DISC, Status.BADDELIVERY)],
    ids=["not-a-uma", "not-a-mode"],
)
async def test_values_that_are_no_mode_or_uma(quiet: Env, delivery, uma, status) -> None:
    async with attached(quiet, 1, str(SENDER)) as sender:
        with pytest.raises(NotSupported) as refused:
            await sender.put(b"x", target="1.10", delivery=delivery, uma=uma)
        assert refused.value.status == status


async def test_nonrecoverable_put_without_uma_defaults_to_disc(quiet: Env) -> None:
    put = wire.Put(2, "1.15", b"nobody there", int(MODE.WF_MEM), 0, 0, 0, 0, 0, b"", "", None)
    answer = await _raw_put(quiet, put)
    assert isinstance(answer, wire.PutDone)
    assert (answer.delivery_status, answer.uma_status) == (Status.NOTACTIVE, Status.DISC_SUCCESS)
