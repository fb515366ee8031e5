"""The Spark audit reads every PCJ segment: a group rolled its PCJ (`Client.set_pcj`,
MRS_SET_PCJ) while confirming, and `mrs-pcj` gives the records of both segments,
each once, beside the server that keeps writing."""

from __future__ import annotations

import pytest

from clients import ForceJrn, PutItem, Status, open_journal
from tests.audit_fixtures import spark  # noqa: F401 - fixture

pytestmark = pytest.mark.xdist_group("spark")
"""One worker for the Spark tests: one local Spark session per test session."""


async def _confirm(client, count: int, tag: bytes) -> list[int]:
    items = [PutItem(tag, "1.11") for _ in range(count)]
    assert all(psb.status == Status.SUCCESS for psb in await client.put_many(items))
    seqs = []
    for _ in range(count):
        message = await client.get(timeout=10)
        await client.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)
        seqs.append(message.seq)
    return seqs


async def test_the_audit_reads_both_segments(spark, make_bus) -> None:  # noqa: F811
    bus = make_bus()
    async with bus.connect("ANYORDER") as client:
        before = await _confirm(client, 9, b"closed")
        assert (await client.set_pcj(roll=True)).closed_segment == 0
        after = await _confirm(client, 5, b"open")
    with open_journal(bus.data_dir, "pcj") as journal:
        segments = {record.seq: record.segment for record in journal}
    assert segments == {**dict.fromkeys(before, 0), **dict.fromkeys(after, 1)}
    rows = spark.read.format("mrs-pcj").load(str(bus.data_dir)).collect()
    assert sorted(row.seq for row in rows) == sorted(before + after)
    bodies = {row.seq: row.body for row in rows}
    assert bodies == {**dict.fromkeys(before, b"closed"), **dict.fromkeys(after, b"open")}
