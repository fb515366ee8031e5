"""`Client.open_journal`: the PCJ and the DLJ read through the group by a reader on
another host (pams_open_jrn / read_jrn / close_jrn over the wire), against a real
`mrs serve`: the same records as the local reader, the same selection, in bounded
pages, safe while the group writes; refused without the admin right 'replay'."""

from __future__ import annotations

import pytest
import trio

from clients import (
    BadParameter,
    ForceJrn,
    MrsError,
    NotAuthorized,
    PutItem,
    Status,
    Uma,
    connect,
    connect_sync,
    open_journal,
)
from tests.auth_helpers import SecureBus, add_principal, creds


async def _confirm_six(client) -> list[int]:
    items = [PutItem(b"m%d" % i, "1.10", msg_class=7, msg_type=i % 3) for i in range(6)]
    assert all(psb.status == Status.SUCCESS for psb in await client.put_many(items))
    seqs = []
    for index in range(6):
        message = await client.get(timeout=10)
        await client.confirm(message.seq, index, ForceJrn.FORCE_JRN)
        seqs.append(message.seq)
    return seqs


async def test_the_wire_gives_the_local_readers_records_and_selection(bus) -> None:
    async with bus.connect("ORDERS") as client:
        seqs = await _confirm_six(client)
        with open_journal(bus.data_dir, "pcj") as local:
            expected = list(local)
        async with client.open_journal("pcj", page_records=2) as reader:
            records = [record async for record in reader]
        assert records == expected  # every field, by the one conversion
        assert reader.corrupt == []

        async def selected(**selection) -> list[int]:
            async with client.open_journal("pcj", **selection) as reader:
                return [record.seq async for record in reader]

        assert await selected(seq=(seqs[1], seqs[3])) == seqs[1:4]
        assert await selected(seq=seqs[2]) == [seqs[2]]
        assert await selected(msg_type=[1, 2], page_records=1) == [
            s for i, s in enumerate(seqs) if i % 3
        ]
        assert await selected(msg_class=8) == []
        assert await selected(target="1.10", source="1.10", limit=2) == seqs[:2]
        assert await selected(target=["1.11"]) == []
        assert await selected(since=(expected[3].write_time_ns - 1000) / 1e9) == seqs[3:]
        assert await selected(segment=1) == []
        with pytest.raises(BadParameter) as refused:
            client.open_journal("dqf")
        assert "journal is 'pcj' or 'dlj'" in refused.value.message
        with pytest.raises(BadParameter):
            client.open_journal("pcj", page_records=100_000)
        # the DLJ: dqf_messages_max = 40, the 41st goes to the DLJ (its UMA)
        await client.put_many([PutItem(b"fill", "1.10") for _ in range(40)])
        psb = await client.put(b"over", "1.10", msg_class=3, uma=Uma.DLJ)
        assert psb.uma_status == Status.DLJ_SUCCESS
        (dead,) = [record async for record in client.open_journal("dlj", msg_class=3)]
        assert (dead.body, dead.status) == (b"over", Status.DQF_FULL)

    def blocking() -> list[int]:
        with connect_sync(bus.address, None) as sync_client:
            reader = sync_client.open_journal("pcj", seq=(seqs[4], None))
            with reader:
                return [record.seq for record in reader]

    assert await trio.to_thread.run_sync(blocking) == seqs[4:]


async def test_reading_the_pcj_while_the_group_writes_it(make_bus) -> None:
    """A remote reader reads the PCJ again and again while a consumer confirms 1,300
    messages into it: every read is whole, in seq order, and a prefix of what was
    confirmed by its end, in pages of at most page_records; read after the writes, it
    has them all, and a selection that matches only the last record reads on through
    the pages that match nothing (the group looks at 1,024 records per page)."""
    bus = make_bus(group_extra="pcj_default = true")
    count = 1300
    confirmed: list[int] = []
    reads = 0
    async with bus.connect("ORDERS") as client, bus.connect() as reader_client:
        items = [PutItem(b"x%d" % i, "1.10", msg_class=9 if i == count - 1 else 0)
                 for i in range(count)]  # fmt: skip
        for start in range(0, count, 500):
            psbs = await client.put_many(items[start : start + 500])
            assert all(psb.status == Status.SUCCESS for psb in psbs)

        async def confirm_all() -> None:
            for _ in range(count):
                message = await client.get(timeout=10)
                await client.confirm(message.seq)
                confirmed.append(message.seq)

        async def read_all() -> list[tuple[int, bytes]]:
            read = []
            async with reader_client.open_journal("pcj", page_records=64) as reader:
                while page := await reader.read_page():
                    assert len(page) <= 64
                    read.extend((record.seq, record.body) for record in page)
            return read

        async with trio.open_nursery() as nursery:
            nursery.start_soon(confirm_all)
            while len(confirmed) < count:
                done_before = len(confirmed)
                read = await read_all()
                seqs = [seq for seq, _ in read]
                assert seqs == confirmed[: len(seqs)] and len(seqs) >= done_before
                assert [body for _, body in read] == [b"x%d" % i for i in range(len(read))]
                reads += 1
        final = [record.seq async for record in reader_client.open_journal("pcj")]
        last = [record.seq async for record in reader_client.open_journal("pcj", msg_class=9)]
    assert final == confirmed
    assert last == confirmed[-1:]
    assert reads >= 1  # each began while confirms were still coming


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    bus = SecureBus(tmp_path_factory.mktemp("secure_journal"), group_ids=(1,))
    add_principal(bus.config_path, "pcjadmin", ["--admin", "pcj"])
    bus.start()
    yield bus
    bus.stop()


async def test_reading_needs_replay_and_set_pcj_needs_pcj(secure) -> None:
    address = secure.address(1)
    async with connect(address, None, credentials=creds("ops")) as client:
        with pytest.raises(NotAuthorized) as refused:
            [record async for record in client.open_journal("pcj")]
        assert "reading the PCJ needs the admin right 'replay'" in refused.value.message
        with pytest.raises(NotAuthorized) as refused:
            await client.set_pcj(roll=True)
        assert "MRS_SET_PCJ (set_pcj) needs the admin right 'pcj'" in refused.value.message
    async with connect(address, None, credentials=creds("replayer")) as client:
        assert [record async for record in client.open_journal("dlj")] == []
        with pytest.raises(NotAuthorized):
            await client.set_pcj(default=False)
    async with connect(address, None, credentials=creds("pcjadmin")) as client:
        state = await client.set_pcj(roll=True)
        assert (state.default, state.closed_segment) == (True, 0)
        with pytest.raises(MrsError) as refused:
            await client.open_journal("pcj").read_page()
        assert refused.value.status == Status.NOTAUTHORIZED
