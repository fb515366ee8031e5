"""The Spark audit's figures after histories an operator makes: messages confirmed
after a crash restart (POSSDUPL), confirm values at the int64 edges, empty, binary and
large bodies, correlation ids that are not UTF-8, a PCJ rolled mid-run and its closed
segment archived to Parquet, a PCJ replayed and the DLJ redriven with `mrs jplay`,
and a copy of a group's data directory that holds dead letters only.

Real `mrs serve` processes, the real `mrs jplay`, `mrs pcj archive` and `mrs audit`
in child processes, and the test session's one local Spark session (`spark`). Every
expected figure is what the test's own clients did, not a count over the journals.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from clients import DeliveryMode, ForceJrn, NoMoreMessages, Status, Uma
from mrs.audit.report import compute, export
from tests.audit_fixtures import spark  # noqa: F401 - fixture
from tests.cli_helpers import run_mrs
from tests.journal_helpers import REPLAY_QUEUES

pytestmark = pytest.mark.xdist_group("spark")
"""One worker for every test that may use the test session's Spark session."""

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
ORDERS = (  # (body, correlation id, confirm value), in put order
    (b"", b"ORD-0000", INT64_MAX),
    (b"\xff\xfe\x00 not text", b"ORD-0001", INT64_MIN),
    (b"x" * 300_000, b"\xff\x00\x80-7", 0),
    (b"ok", b"\xc3\x28", -1),
    (b"four", b"ORD-0004", 7),
    (b"five", b"ORD-0005", 9),
)
HANDED_OUT_BEFORE_THE_CRASH = 2
"""The first orders, handed out and not confirmed when the server is killed."""
CLOSED = 3
"""Orders confirmed before the PCJ is rolled (its closed segment, then archived)."""
DEAD_AFTER = 2
"""The dead letters are put after this many orders: inside the sender's seqs."""
REPLAYED = (3, 4)
"""The orders whose PCJ records `mrs jplay pcj` replays (live, not archived)."""


async def _put(bus) -> tuple[list[int], list[int]]:
    """The orders (WF_DQF to 1.ORDERS) and two dead letters (to a queue that does not
    exist, UMA DLJ) among them, from 1.SENDER: (order seqs, dead letter seqs)."""
    orders, dead = [], []
    async with bus.connect("SENDER") as sender:
        for index, (body, cid, _value) in enumerate(ORDERS):
            if index == DEAD_AFTER:
                for number in range(2):
                    psb = await sender.put(b"nowhere", target="1.50",
                                           correlation_id=b"DEAD-%d" % number,
                                           delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)  # fmt: skip
                    assert psb.uma_status == Status.DLJ_SUCCESS, psb
                    dead.append(psb.seq)
            psb = await sender.put(body, target="1.ORDERS", correlation_id=cid,
                                   delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)  # fmt: skip
            assert psb.delivery_status == Status.STORED, psb
            orders.append(psb.seq)
    return orders, dead


async def _confirm(receiver, orders: list[int], indexes: range) -> list[Status]:
    statuses = []
    for index in indexes:
        message = await receiver.get(timeout=30)
        assert message.seq == orders[index]
        statuses.append(message.delivery_status)
        await receiver.confirm(message.seq, confirm_value=ORDERS[index][2],
                               force_j=ForceJrn.FORCE_JRN)  # fmt: skip
    return statuses


def _jplay(bus, *args: str) -> dict:
    done = run_mrs("jplay", "--config", str(bus.config_path), "--group", "1", "--address",
                   bus.address, *args, "--to", "RESTORE", "--json", timeout_s=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def _confirm_copies(bus) -> list[int]:
    copies = []
    async with bus.connect("RESTORE") as receiver:
        while True:
            try:
                message = await receiver.get(timeout=0)
            except NoMoreMessages:
                return copies
            await receiver.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)
            copies.append(message.seq)


async def _operators_history(bus) -> tuple[list[int], list[int], list[int]]:
    """Puts; two orders handed out, then the server killed and started again; every
    order confirmed (the PCJ rolled after CLOSED, and its closed segment archived);
    two PCJ records replayed and both dead letters redriven with --remove, each copy
    confirmed. (order seqs, dead letter seqs, copy seqs)."""
    orders, dead = await _put(bus)
    async with bus.connect("ORDERS") as receiver:
        for index in range(HANDED_OUT_BEFORE_THE_CRASH):
            assert (await receiver.get(timeout=30)).seq == orders[index]
    bus.restart()  # SIGKILL: the two come again, POSSDUPL
    async with bus.connect("ORDERS") as receiver:
        before = await _confirm(receiver, orders, range(CLOSED))
        assert before == [Status.POSSDUPL] * 2 + [Status.CONFIRMREQ]
        assert (await receiver.set_pcj(roll=True)).closed_segment == 0
        assert await _confirm(receiver, orders, range(CLOSED, len(ORDERS))) == [
            Status.CONFIRMREQ
        ] * (len(ORDERS) - CLOSED)
    archived = run_mrs("pcj", "archive", "--config", str(bus.config_path), "--group", "1",
                       "--closed", "--json")  # fmt: skip
    assert archived.returncode == 0, archived.stderr
    assert json.loads(archived.stdout)["archived"] == CLOSED
    first, last = (orders[i] for i in REPLAYED)
    assert _jplay(bus, "pcj", "--seq", f"{first}..{last}")["sent"] == len(REPLAYED)
    assert _jplay(bus, "dlj", "--remove")["removed"] == len(dead)
    copies = await _confirm_copies(bus)
    assert len(copies) == len(REPLAYED) + len(dead)
    bus.process.terminate()
    return orders, dead, copies


async def test_an_operators_history_reads_as_what_happened(spark, make_bus, tmp_path) -> None:  # noqa: F811
    """Before: each dead letter `mrs jplay dlj --remove` redrove was counted missing
    and charged to its sender (whose every message was confirmed); every PCJ record
    `mrs jplay pcj` replayed made its correlation id a `duplicate_confirms` and one
    more message; and an id that is not UTF-8 was a prefix of U+FFFD characters that
    `--trail` could not take. Now the report says what the clients did: each column,
    each count, each message once, across the crash, the roll and the archive."""
    bus = make_bus(queues=REPLAY_QUEUES, group_extra="pcj_default = true")
    orders, dead, copies = await _operators_history(bus)
    sources = {"paths": json.dumps([str(bus.data_dir)])}
    report = compute(spark, sources).as_json()
    totals = report["totals"]
    assert (totals["confirmed"], totals["possdupl"], totals["replayed"]) == (
        len(ORDERS) + len(copies), HANDED_OUT_BEFORE_THE_CRASH, len(copies))
    assert (totals["dead_letters"], totals["duplicates"], totals["corrupt_records"]) == (0, 0, 0)
    assert totals["body_bytes"] == sum(len(body) for body, _, _ in ORDERS) + sum(
        len(ORDERS[i][0]) for i in REPLAYED) + len(b"nowhere") * len(dead)
    senders = {row["source"]: row for row in report["reconciliation_sender"]}
    assert {s: (r["confirmed"], r["missing"], r["duplicates"]) for s, r in senders.items()} == {
        "1.13": (len(ORDERS), 0, 0), "1.20": (len(copies), 0, 0)}  # fmt: skip
    # The one gap is the crash's skipped block, between the sender's last put and the
    # first copy: no sender's message is missing.
    assert [(g["after_seq"], g["before_seq"], g["sender"]) for g in report["gaps"]] == [
        (orders[-1], min(copies), None)]  # fmt: skip
    correlation = {row["prefix"]: row for row in report["correlation"]}
    assert set(correlation) == {"ORD-", "DEAD-", "hex:ff00802d37", "hex:c328"}
    assert {p: (r["messages"], r["confirmed"], r["duplicate_confirms"])
            for p, r in correlation.items()} == {
        "ORD-": (4, 4, 0), "DEAD-": (2, 2, 0), "hex:ff00802d37": (1, 1, 0),
        "hex:c328": (1, 1, 0)}  # fmt: skip
    assert totals["correlation_duplicate_confirms"] == 0
    trail = run_mrs("audit", "--data-dir", str(bus.data_dir), "--trail", "hex:c328", "--json",
                    "--quiet")  # fmt: skip
    assert trail.returncode == 0, trail.stderr
    replay_of_order_3 = sorted(copies)[0]  # jplay sends in seq order, the PCJ first
    assert {e["seq"] for e in json.loads(trail.stdout)["events"]} == {orders[3], replay_of_order_3}
    _check_the_export(spark, sources, tmp_path / "parquet", orders, dead, copies)


def _check_the_export(spark, sources, out: Path, orders, dead, copies) -> None:  # noqa: F811
    """The export has a row per confirmed message (the archived closed segment and
    the live one, none twice) with each column as the clients saw it."""
    assert export(spark, sources, str(out)) == {"pcj": len(ORDERS) + len(copies), "dlj": 0}
    table = ds.dataset(out / "pcj", partitioning="hive").to_table()
    rows = {row["seq"]: row for row in table.to_pylist()}
    assert sorted(rows) == sorted(orders + copies)
    for index, seq in enumerate(orders):
        body, cid, value = ORDERS[index]
        row = rows[seq]
        redelivered = index < HANDED_OUT_BEFORE_THE_CRASH
        assert (row["body"], row["body_size"], row["correlation_id"], row["confirm_value"]) == (
            body, len(body), cid, value)  # fmt: skip
        assert (row["deliveries"], row["possdupl"], row["replayed_from"]) == (
            2 if redelivered else 1, redelivered, None)  # fmt: skip
    origins = [f"pcj:1:{orders[i]}" for i in REPLAYED] + [f"dlj:1:{seq}" for seq in dead]
    assert sorted(rows[seq]["replayed_from"] for seq in copies) == sorted(origins)
    assert all(rows[seq]["source"] == "1.20" for seq in copies)


async def test_a_copy_of_a_group_that_only_dead_lettered_is_that_group(
    spark, make_bus, tmp_path: Path  # noqa: F811
) -> None:
    """Before: the group of a data directory whose journals hold dead letters only
    (nothing confirmed, nothing waiting) came from the directory's name, so a backup
    copy `nyc-backup` was group 0: its trail said "dead-lettered in group 0" at
    `dlj:0:...`. Now it is the group the journals say wrote them."""
    bus = make_bus()
    async with bus.connect("SENDER") as sender:
        psb = await sender.put(b"nowhere", target="1.50", correlation_id=b"DEAD-0",
                               delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)  # fmt: skip
        assert psb.uma_status == Status.DLJ_SUCCESS, psb
    bus.process.terminate()
    copy = tmp_path / "nyc-backup"
    shutil.copytree(bus.data_dir, copy)
    trail = run_mrs("audit", "--data-dir", str(copy), "--trail", "DEAD-0", "--json")
    assert trail.returncode == 0, trail.stderr
    events = json.loads(trail.stdout)["events"]
    assert [(e["event"], e["group"]) for e in events] == [("put", 1), ("dead letter", 1)]
    assert "dead-lettered in group 1: NO_DQF" in events[-1]["detail"]
    report = compute(spark, {"paths": json.dumps([str(copy)])}).as_json()
    assert (report["totals"]["dead_letters"], report["totals"]["missing"]) == (1, 0)
    assert report["dead_letters"] == [{"dead_letter_reason": "NO_DQF", "messages": 1}]
    nothing = run_mrs("audit", "--data-dir", str(copy), "--trail", "ORD-1", "--quiet")
    assert nothing.returncode == 1
    assert nothing.stderr.strip().splitlines() == [
        "mrs audit: no record of correlation id 'ORD-1' in these journals"]  # fmt: skip
