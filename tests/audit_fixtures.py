"""Shared by the Spark audit tests: ONE local Spark session per test session, a
two-group journal made through real `mrs serve` processes, and direct counts over it.

Import the fixtures into a test module (`from tests.audit_fixtures import ...`).
"""

from __future__ import annotations

import collections
import datetime
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, ForceJrn, NoMoreMessages, Status, Uma, connect
from journals import CorruptRecord, Journal, JournalStore
from mrs.model import status_of
from sim.bus import LinkedBus

QUEUES = """
[[group.queue]]
id = 10
name = "ORDERS"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 11
name = "TRADES"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 13
name = "SENDER"
"""
WAIT_S = 60.0
PUTS = (  # (sending group, target, count, class)
    (1, "1.ORDERS", 24, 3),
    (1, "2.ORDERS", 18, 4),
    (1, "2.TRADES", 10, 5),
    (2, "1.TRADES", 9, 6),
    (2, "2.ORDERS", 6, 7),
)
DEAD_LETTERS = ((1, 3), (2, 2))
"""(group, count) of puts to a queue that does not exist, with UMA DLJ."""
REDELIVERED = 4
"""Messages of 1.ORDERS handed out, not confirmed, then handed out again (POSSDUPL)."""


@dataclass
class AuditJournal:
    """A bus that ran a workload and stopped; what the clients saw."""

    bus: LinkedBus
    confirmed_statuses: dict[tuple[int, int], Status] = field(default_factory=dict)
    """(group, seq) -> delivery status of the copy the receiver confirmed."""
    dead_lettered: int = 0

    @property
    def config(self) -> Path:
        return self.bus.config_path

    def sources(self) -> dict[str, str]:
        return {"config": str(self.config), "groups": "1,2"}

    def records(self, journal: Journal) -> list[tuple[int, object]]:
        """(group, Record or CorruptRecord) straight from LMDB, both groups."""
        return journal_records([(self.bus.data_dir(g) / "journals", g) for g in (1, 2)], journal)


def journal_records(sources, journal: Journal) -> list[tuple[int, object]]:
    found = []
    for path, group in sources:
        store = JournalStore(path, readonly=True)
        try:
            found.extend((group, item) for _, item in store.scan(journal))
        finally:
            store.close()
    return found


async def _put_all(bus: LinkedBus, tally: AuditJournal) -> None:
    for group, target, count, msg_class in PUTS:
        async with connect(bus.address(group), queue="SENDER") as sender:
            for index in range(count):
                psb = await sender.put(
                    f"{target} #{index}".encode() * (1 + index % 4),
                    target=target,
                    delivery=DeliveryMode.WF_DQF,
                    uma=Uma.SAF,
                    msg_class=msg_class,
                    msg_type=index % 3,
                    correlation_id=f"{group}:{target}:{index}".encode(),
                )
                assert psb.delivery_status == Status.STORED, psb
    for group, count in DEAD_LETTERS:
        async with connect(bus.address(group), queue="SENDER") as sender:
            for index in range(count):
                psb = await sender.put(
                    b"nowhere %d" % index, target=f"{group}.50",
                    delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ,
                )  # fmt: skip
                assert psb.uma_status == Status.DLJ_SUCCESS, psb
                tally.dead_lettered += 1


async def _receive_all(bus: LinkedBus, tally: AuditJournal) -> None:
    async with connect(bus.address(1), queue="ORDERS") as receiver:
        for _ in range(REDELIVERED):  # handed out, never confirmed: the reconnect redelivers
            await receiver.get(timeout=WAIT_S)
    for group in (1, 2):
        for queue in ("ORDERS", "TRADES"):
            async with connect(bus.address(group), queue=queue) as receiver:
                while True:
                    try:
                        message = await receiver.get(timeout=0)
                    except NoMoreMessages:
                        break
                    await receiver.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)
                    tally.confirmed_statuses[(group, message.seq)] = message.delivery_status


async def _workload(bus: LinkedBus, tally: AuditJournal) -> None:
    async with trio.open_nursery() as nursery:
        await bus.start_proxies(nursery)
        await trio.to_thread.run_sync(bus.start)
        try:
            with trio.fail_after(WAIT_S):
                while True:
                    async with connect(bus.address(1), None) as client:
                        if (await client.status())["links"]["2"]["state"] == "up":
                            break
                    await trio.sleep(0.05)
                await _put_all(bus, tally)
                await _receive_all(bus, tally)
        finally:
            await trio.to_thread.run_sync(bus.stop)
            nursery.cancel_scope.cancel()


def make_audit_journal(directory: Path) -> AuditJournal:
    bus = LinkedBus(directory, queues=QUEUES)
    tally = AuditJournal(bus)
    trio.run(_workload, bus, tally)
    expected = sum(count for _, _, count, _ in PUTS)
    assert len(tally.confirmed_statuses) == expected
    return tally


SPARK_SESSION = pytest.mark.xdist_group("spark")
"""Mark of a test that uses the test session's one Spark session or cluster (`spark`,
`cluster`, `audit_journal`, `loss_journal`): those run on one worker, which starts
them once. A test that only runs `mrs audit` starts its own JVM and is left unmarked,
so it runs on any worker beside that one: with them the group was some 500 s of one
worker's time on a quiet machine, near the suite's whole run."""


@pytest.fixture(scope="session")
def spark():
    """The one local Spark session of the test session (formats registered)."""
    from mrs.audit.session import build_session

    session = build_session("local[2]", app_name="mrs audit tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def audit_journal(tmp_path_factory) -> AuditJournal:
    return make_audit_journal(tmp_path_factory.mktemp("audit-bus"))


# ---------------------------------------------------------------------- direct counts
def _utc(ns: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ns // 1000 / 1e6, datetime.UTC)


def percentile(values: list[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (what Spark's `percentile` does)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def direct_figures(pcj: list[tuple[int, object]], dlj: list[tuple[int, object]]) -> dict:
    """Every report figure, counted in plain Python over records read from LMDB."""
    good = [r for _, r in pcj if not isinstance(r, CorruptRecord)]
    dead = [r for _, r in dlj if not isinstance(r, CorruptRecord)]
    target = collections.Counter(f"{r.target_group}.{r.target_queue}" for r in good)
    latency: dict[str, list[float]] = collections.defaultdict(list)
    for r in good:
        latency[f"{r.target_group}.{r.target_queue}"].append(
            (r.confirm_time_ns // 1000 - r.put_time_ns // 1000) / 1000.0
        )
    hours = collections.Counter(
        _utc(r.confirm_time_ns).replace(minute=0, second=0, microsecond=0) for r in good
    )
    return {
        "confirmed": len(good),
        "dead_letters": len(dead),
        "possdupl": sum(1 for r in good if r.extra.get("deliveries", 1) > 1),
        "replayed": sum(1 for r in good if "replay" in (r.extra.get("headers") or {})),
        "corrupt_records": sum(isinstance(r, CorruptRecord) for _, r in pcj + dlj),
        "per_queue": dict(target),
        "per_sender": dict(collections.Counter(f"{r.source_group}.{r.source_queue}" for r in good)),
        "per_hour": dict(hours),
        "cross_group": dict(collections.Counter((r.source_group, r.target_group) for r in good)),
        "latency": {
            queue: tuple(percentile(values, f) for f in (0.5, 0.95, 0.99))
            for queue, values in latency.items()
        },
        "dead_letters_by_reason": dict(
            collections.Counter(getattr(status_of(r.reason), "name", str(r.reason)) for r in dead)
        ),
    }


def report_figures(report_json: dict) -> dict:
    """The same figures out of a report's JSON (`Report.as_json()` or `--json`)."""
    totals = report_json["totals"]

    def hour(text: str) -> datetime.datetime:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))

    return {
        **{
            k: totals[k]
            for k in ("confirmed", "dead_letters", "possdupl", "replayed", "corrupt_records")
        },  # fmt: skip
        "per_queue": {r["target"]: r["messages"] for r in report_json["per_queue"]},
        "per_sender": {r["source"]: r["messages"] for r in report_json["per_sender"]},
        "per_hour": {hour(r["hour"]): r["messages"] for r in report_json["per_hour"]},
        "cross_group": {
            (r["source_group"], r["target_group"]): r["messages"]
            for r in report_json["cross_group"]
        },
        "latency": {
            r["target"]: (r["p50_ms"], r["p95_ms"], r["p99_ms"]) for r in report_json["latency"]
        },
        "dead_letters_by_reason": {
            r["dead_letter_reason"]: r["messages"] for r in report_json["dead_letters"]
        },
    }


# ---------------------------------------------------------------------- a writer process
WRITER = r"""
import random, sys, time
from pathlib import Path
from journals import Journal, JournalStore, Record, WriteBatch, seq_key
path, stop = Path(sys.argv[1]), Path(sys.argv[2])
store = JournalStore(path)
rng = random.Random(7)
seqs = rng.sample(range(1, 10_000_000), 2_000_000)  # out of key order, like confirms
position = 0
while not stop.exists() and position < len(seqs):
    batch = WriteBatch.empty()
    now = time.time_ns()
    for seq in seqs[position:position + 200]:
        batch.put_record(Journal.PCJ, seq_key(seq), Record(
            seq=seq, target_group=4, target_queue=10 + seq % 3, source_group=4,
            source_queue=13, body=b"body %d" % seq, put_time_ns=now - 1000,
            written_time_ns=now, confirm_time_ns=now, confirm_value=seq % 1000))
    store.commit_now(batch)
    position += 200
    print(position, flush=True)
    time.sleep(0.02)  # a steady writer, not a flood: the scans must stay short
store.close()
"""


def start_writer(path: Path, stop_file: Path) -> subprocess.Popen:
    """A separate process committing batches of PCJ records (fsync each) until told."""
    root = Path(__file__).resolve().parent.parent
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(stop_file)],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )


# ---------------------------------------------------------------------- losses on purpose
LOSS_ORDERS = 12
"""Puts to 1.ORDERS; the first LOSS_CONFIRMED are confirmed, the rest stay in the DQF."""
LOSS_CONFIRMED = 6
LOSS_DEAD = 2
"""Puts to a queue that does not exist (UMA DLJ): the DLJ."""
LOSS_SAF = 3
"""Puts to 2.TRADES while the link is cut (UMA SAF): group 1's SAF."""
LOSS_DELETED = 8
"""The index of the 1.ORDERS message whose DQF record the test deletes."""


@dataclass
class LossJournal:
    """A bus whose journals hold a message in every place, and one lost on purpose."""

    bus: LinkedBus
    seqs: dict[str, int] = field(default_factory=dict)
    """correlation id -> seq the client got back."""
    deleted_seq: int = 0

    @property
    def config(self) -> Path:
        return self.bus.config_path

    def sources(self) -> dict[str, str]:
        return {"config": str(self.config), "groups": "1,2"}

    def records(self, journal: Journal) -> list[tuple[int, object]]:
        return journal_records([(self.bus.data_dir(g) / "journals", g) for g in (1, 2)], journal)


async def _link_state(bus: LinkedBus, state: str) -> None:
    with trio.fail_after(WAIT_S):
        while True:
            async with connect(bus.address(1), None) as client:
                if (await client.status())["links"]["2"]["state"] == state:
                    return
            await trio.sleep(0.05)


async def _loss_workload(bus: LinkedBus, tally: LossJournal) -> None:
    async with trio.open_nursery() as nursery:
        await bus.start_proxies(nursery)
        await trio.to_thread.run_sync(bus.start)
        try:
            await _link_state(bus, "up")
            async with connect(bus.address(1), queue="SENDER") as sender:
                for index in range(LOSS_ORDERS):
                    cid = f"ord-{index:04d}"
                    psb = await sender.put(cid.encode(), target="1.ORDERS",
                                           correlation_id=cid.encode(),
                                           delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)  # fmt: skip
                    assert psb.delivery_status == Status.STORED, psb
                    tally.seqs[cid] = psb.seq
                for index in range(LOSS_DEAD):
                    cid = f"dead-{index}"
                    psb = await sender.put(b"x", target="1.50", correlation_id=cid.encode(),
                                           delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)  # fmt: skip
                    assert psb.uma_status == Status.DLJ_SUCCESS, psb
                    tally.seqs[cid] = psb.seq
                bus.proxy(1, 2).cut()
                await _link_state(bus, "down")
                for index in range(LOSS_SAF):
                    cid = f"saf-{index}"
                    psb = await sender.put(b"y", target="2.TRADES", correlation_id=cid.encode(),
                                           delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)  # fmt: skip
                    assert Status.SAF_FORCED in (psb.delivery_status, psb.uma_status) or (
                        psb.uma_status == Status.SAF_SUCCESS
                    ), psb
                    tally.seqs[cid] = psb.seq
            async with connect(bus.address(1), queue="ORDERS") as receiver:
                for _ in range(LOSS_CONFIRMED):
                    message = await receiver.get(timeout=WAIT_S)
                    await receiver.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)
        finally:
            await trio.to_thread.run_sync(bus.stop)
            nursery.cancel_scope.cancel()


def make_loss_journal(directory: Path) -> LossJournal:
    """Run the workload, stop the bus, then delete one DQF record with the journals
    library: the message was stored (its client got STORED) and is now nowhere."""
    from journals import WriteBatch, queue_key

    bus = LinkedBus(directory, queues=QUEUES)
    tally = LossJournal(bus)
    trio.run(_loss_workload, bus, tally)
    tally.deleted_seq = tally.seqs[f"ord-{LOSS_DELETED:04d}"]
    store = JournalStore(bus.data_dir(1) / "journals")
    try:
        key = queue_key(10, tally.deleted_seq)
        assert store.get(Journal.DQF, key) is not None
        store.commit_now(WriteBatch.empty().delete(Journal.DQF, key))
    finally:
        store.close()
    return tally


@pytest.fixture(scope="session")
def loss_journal(tmp_path_factory) -> LossJournal:
    return make_loss_journal(tmp_path_factory.mktemp("audit-loss"))
