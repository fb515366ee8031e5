"""`clients.open_journal` (pams_open_jrn / read_jrn / close_jrn): a group's PCJ and DLJ
read from their files by an application, read-only, while a real `mrs serve` writes
them; selection by seq, time, queue, class and type; bad arguments refused with one
line."""

from __future__ import annotations

import time

import pytest
import trio

from clients import (
    Address,
    BadParameter,
    DeliveryMode,
    ForceJrn,
    JournalRecord,
    MrsError,
    PutItem,
    Status,
    Uma,
    open_journal,
)
from mrs.limits import JOURNAL_READ_CHUNK_MESSAGES


async def _put_get_confirm(client, count: int, *, msg_class: int = 0) -> list[int]:
    """`count` messages to the client's own queue, each got and confirmed to the PCJ
    with confirm value = its index; returns their seqs."""
    items = [PutItem(b"m%d" % i, "1.10", msg_class=msg_class, msg_type=i % 3) for i in range(count)]
    for psb in await client.put_many(items):
        assert psb.status == Status.SUCCESS
    seqs = []
    for index in range(count):
        message = await client.get(timeout=10)
        await client.confirm(message.seq, index, ForceJrn.FORCE_JRN)
        seqs.append(message.seq)
    return seqs


async def test_an_application_reads_the_pcj_with_every_field(bus) -> None:
    before_ns = time.time_ns()
    async with bus.connect("ORDERS") as client:
        seqs = await _put_get_confirm(client, 6, msg_class=7)
    with open_journal(bus.data_dir, "pcj") as journal:
        records = list(journal)
    assert [record.seq for record in records] == seqs
    first = records[0]
    assert isinstance(first, JournalRecord)
    assert (first.journal, first.body, first.target, first.source) == (
        "pcj",
        b"m0",
        Address(1, 10),
        Address(1, 10),
    )
    assert (first.msg_class, first.msg_type, first.delivery) == (7, 0, DeliveryMode.WF_DQF)
    assert [record.confirm_value for record in records] == list(range(6))
    assert all(record.status == Status.SUCCESS for record in records)
    assert all(before_ns <= record.write_time_ns <= time.time_ns() for record in records)
    assert journal.corrupt == []

    def selected(**selection) -> list[int]:
        with open_journal(bus.data_dir, "pcj", **selection) as reader:
            return [record.seq for record in reader]

    assert selected(seq=(seqs[1], seqs[3])) == seqs[1:4]
    assert selected(seq=seqs[2]) == [seqs[2]]
    assert selected(seq=(seqs[4], None)) == seqs[4:]
    assert selected(msg_type=[1, 2]) == [s for i, s in enumerate(seqs) if i % 3 != 0]
    assert selected(msg_class=8) == []
    assert selected(target="1.10", source=Address(1, 10), limit=2) == seqs[:2]
    assert selected(target=["1.11"]) == []
    assert selected(since=(records[3].write_time_ns - 1000) / 1e9) == seqs[3:]  # 1 µs early
    assert selected(until=before_ns / 1e9) == []


async def test_the_dlj_gives_why_a_message_was_dead_lettered(bus) -> None:
    """dqf_messages_max = 40: the 41st recoverable message goes to the DLJ (its UMA)."""
    async with bus.connect("ORDERS") as client:
        await client.put_many([PutItem(b"fill", "1.10") for _ in range(40)])
        psb = await client.put(b"over", "1.10", msg_class=3, uma=Uma.DLJ)
        assert psb.uma_status == Status.DLJ_SUCCESS
    with open_journal(bus.data_dir / "journals", "dlj", msg_class=3) as journal:
        (record,) = list(journal)
    assert (record.body, record.target, record.status) == (b"over", Address(1, 10), Status.DQF_FULL)
    assert record.confirm_value == 0


async def test_reading_the_pcj_while_the_group_writes_it(make_bus) -> None:
    """One reader iterates while the group confirms into the PCJ: every record it reads
    is whole, none twice, in seq order; read on after the writes, it has them all."""
    bus = make_bus(group_extra="pcj_default = true")
    count = 3 * JOURNAL_READ_CHUNK_MESSAGES
    read: list[int] = []
    async with bus.connect("ORDERS") as client:
        for psb in await client.put_many([PutItem(b"x%d" % i, "1.10") for i in range(count)]):
            assert psb.status == Status.SUCCESS
        journal = open_journal(bus.data_dir, "pcj")
        confirmed: list[int] = []

        async def confirm_all() -> None:
            for _ in range(count):
                message = await client.get(timeout=10)
                await client.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)
                confirmed.append(message.seq)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(confirm_all)
            while len(read) < count:
                async for record in journal:  # ends when it has caught up with the writer
                    assert record.body == b"x%d" % len(read)
                    read.append(record.seq)
                await trio.sleep(0)
        journal.close()
    assert read == confirmed
    assert read == sorted(set(read))
    with pytest.raises(MrsError) as closed:
        journal.read_chunk()
    assert closed.value.status == Status.NOTACTIVE


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"journal": "dqf"}, "journal is 'pcj' or 'dlj'"),
        ({"seq": (9, 2)}, "selects nothing"),
        ({"seq": -1}, "seq bounds"),
        ({"seq": "5"}, "seq is an int"),
        ({"target": "ORDERS"}, "not a queue address"),
        ({"target": []}, "empty list"),
        ({"msg_class": "7"}, "msg_class is an int"),
        ({"since": 10.0, "until": 5.0}, "since is after until"),
        ({"since": "yesterday"}, "since is a datetime"),
        ({"limit": 0}, "limit is a positive int"),
    ],
)
def test_bad_arguments_are_refused_with_one_line(bus, arguments, words) -> None:
    with pytest.raises(BadParameter) as refused:
        open_journal(bus.data_dir, **arguments)
    assert refused.value.status == Status.BADPARAM
    assert words in refused.value.message and "\n" not in refused.value.message


def test_no_journal_there_is_nosuchpcj_and_nothing_is_created(tmp_path) -> None:
    with pytest.raises(MrsError) as missing:
        open_journal(tmp_path / "nowhere", "pcj")
    assert missing.value.status == Status.NOSUCHPCJ
    with pytest.raises(MrsError):
        open_journal(tmp_path, "dlj")
    assert list(tmp_path.iterdir()) == []
