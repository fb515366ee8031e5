"""Shared by the dump/jplay tests: records written straight into a group's journals,
a bus with sender and receiver queues for replays, and a way to run `mrs`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from journals import Journal, JournalStore, Record, WriteBatch, group_key, queue_key, seq_key
from tests.conftest import STANDARD_QUEUES, Bus

SEQ_BASE = 3 << 60
"""Seqs of records the tests write themselves: far above any seq a server allocates,
so a server writing its own DLJ/PCJ records never overwrites one."""
HOUR_NS = 3_600_000_000_000
T0_NS = 1_700_000_000_000_000_000
"""2023-11-14T22:13:20Z: record times are fixed, so selections are exact."""

REPLAY_QUEUES = (
    STANDARD_QUEUES
    + """
[[group.queue]]
id = 20
name = "REPLAY"
[[group.queue]]
id = 21
name = "RESTORE"
confirm = "explicit-out-of-order"
"""
)


def record(index: int, **fields) -> Record:
    """A record with distinct, predictable fields; `fields` override them."""
    values = dict(
        seq=SEQ_BASE + index,
        target_group=1,
        target_queue=10,
        source_group=1,
        source_queue=13,
        body=f"order {index}".encode(),
        msg_class=5,
        msg_type=index % 3,
        priority=index % 10,
        delivery=26,
        uma=2,
        correlation_id=f"corr-{index}".encode(),
        put_time_ns=T0_NS + index * 1_000_000_000 - 1000,
        written_time_ns=T0_NS + index * 1_000_000_000,
        extra={},
    )
    values.update(fields)
    return Record(**values)


def key_for(journal: Journal, item: Record) -> bytes:
    if journal is Journal.DQF:
        return queue_key(item.target_queue, item.seq)
    if journal is Journal.SAF:
        return group_key(item.target_group, item.seq)
    return seq_key(item.seq)


def write_records(journals: Path, journal: Journal, records: Iterable[Record]) -> None:
    store = JournalStore(journals)
    try:
        batch = WriteBatch.empty()
        for item in records:
            batch.put_record(journal, key_for(journal, item), item)
        store.commit_now(batch)
    finally:
        store.close()


def write_raw(journals: Path, journal: Journal, key: bytes, value: bytes) -> None:
    store = JournalStore(journals)
    try:
        store.commit_now(WriteBatch.empty().put_raw(journal, key, value))
    finally:
        store.close()


def journal_seqs(journals: Path, journal: Journal) -> list[int]:
    store = JournalStore(journals, readonly=True)
    try:
        return [item.seq for _key, item in store.scan(journal)]
    finally:
        store.close()


def stopped_bus(directory: Path, **options) -> Bus:
    """A configured group whose server is not started yet (write journals first)."""
    bus = Bus(directory, queues=options.pop("queues", REPLAY_QUEUES), **options)
    (bus.data_dir / "journals").mkdir(parents=True, exist_ok=True)
    return bus


def mrs(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrs", *args], capture_output=True, text=True, timeout=timeout
    )


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]
