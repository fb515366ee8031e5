"""The DQF's key index (journals.dqf_index) and what start-up reads instead of records:
kept in the same transactions as the DQF, rebuilt when something else wrote the
environment (a data directory from before the index, a tool using LMDB directly),
and the journal's pages let go of after reading (journals.residency).
Real LMDB files; a real `mrs serve` for the upgrade of a data directory."""

from __future__ import annotations

import struct
from pathlib import Path

import lmdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clients import DeliveryMode, NoMoreMessages, Uma, connect
from journals import Journal, JournalStore, Record, WriteBatch, dqf_index, encode_record, queue_key
from mrs.group.recovery import dqf_seqs


def record(queue: int, seq: int, body: bytes = b"") -> Record:
    body = body or b"body %d" % seq
    return Record(seq, 1, queue, 1, 13, body=body, delivery=int(DeliveryMode.WF_DQF))


def raw_keys(store: JournalStore) -> list[bytes]:
    return [key for key, _ in store.raw_items(Journal.DQF)]


def write_without_the_index(journals: Path, *records: Record, delete: tuple = ()) -> None:
    """Write the DQF as an MRS from before the index did (or a tool using LMDB)."""
    env = lmdb.open(str(journals), max_dbs=16)
    dqf = env.open_db(b"dqf")
    with env.begin(write=True, db=dqf) as txn:
        for key in delete:
            txn.delete(key)
        for one in records:
            txn.put(queue_key(one.target_queue, one.seq), encode_record(one))
    env.close()


operation = st.tuples(st.booleans(), st.integers(10, 12), st.integers(1, 40))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(commits=st.lists(st.lists(operation, max_size=8), max_size=6))
def test_the_index_lists_exactly_the_dqf_keys_after_any_commits(tmp_path_factory, commits) -> None:
    """Puts in any key order (several queues, seqs going back, a key put again) and
    deletes: the index keeps exactly the DQF's keys, and the DQF holds the last value
    put at each key (puts are appended when they can be, put as usual when not)."""
    path = tmp_path_factory.mktemp("index") / "journals"
    store = JournalStore(path, 1 << 22)
    expected: dict[bytes, bytes] = {}
    for number, operations in enumerate(commits):
        batch = WriteBatch.empty()
        for put, queue, seq in operations:  # a batch applies its deletes, then its puts
            if not put:
                batch.delete(Journal.DQF, queue_key(queue, seq))
                expected.pop(queue_key(queue, seq), None)
        for put, queue, seq in operations:
            if put:
                body = b"commit %d seq %d" % (number, seq)
                batch.put_record(Journal.DQF, queue_key(queue, seq), record(queue, seq, body))
                expected[queue_key(queue, seq)] = body
        store.commit_now(batch)
        assert list(store.keys(Journal.DQF)) == raw_keys(store) == sorted(expected)
        assert {key: store.get(Journal.DQF, key).body for key in expected} == expected
    store.close()
    again = JournalStore(path, 1 << 22)
    try:
        assert list(again.keys(Journal.DQF)) == raw_keys(again)
        seqs = [(queue, seq) for queue, run in dqf_seqs(again) for seq in run]
        assert seqs == [struct.unpack(">IQ", key) for key in raw_keys(again)]
    finally:
        again.close()


def test_a_write_the_index_did_not_see_is_found_at_the_next_open(tmp_path: Path) -> None:
    """Equal counts do not fool it: one key deleted, another added, by plain LMDB."""
    path = tmp_path / "journals"
    store = JournalStore(path, 1 << 22)
    store.commit_now(WriteBatch.empty().put_record(Journal.DQF, queue_key(10, 1), record(10, 1)))
    store.close()
    write_without_the_index(path, record(11, 7), delete=(queue_key(10, 1),))
    again = JournalStore(path, 1 << 22)
    try:
        assert list(again.keys(Journal.DQF)) == [queue_key(11, 7)]
        assert dqf_index.is_current(again.env, again.dqf_index, again.db(Journal.DQF))
    finally:
        again.close()


def test_a_read_only_store_of_an_old_layout_reads_the_dqf_keys(tmp_path: Path) -> None:
    path = tmp_path / "journals"
    path.mkdir()
    write_without_the_index(path, record(10, 2), record(10, 1))
    reader = JournalStore(path, 1 << 22, readonly=True)
    try:
        assert reader.dqf_index is None
        assert list(reader.keys(Journal.DQF)) == [queue_key(10, 1), queue_key(10, 2)]
    finally:
        reader.close()


async def test_a_data_directory_from_before_the_index_is_served_in_order(make_bus) -> None:
    """The upgrade path: messages an older MRS journaled (no index) are all delivered,
    in seq order, together with ones journaled with the index."""
    bus = make_bus()
    async with connect(bus.address, queue="SENDER") as sender:
        for body in (b"new 1", b"new 2"):
            await sender.put(body, target="1.11", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
    assert bus.process.terminate() == 0
    journals = bus.data_dir / "journals"
    old = [record(11, seq, b"old %d" % seq) for seq in (3, 1, 2)]  # seqs below the server's
    write_without_the_index(journals, *old)
    bus.start()
    async with connect(bus.address, queue="ANYORDER") as receiver:
        bodies = []
        while True:
            try:
                message = await receiver.get(timeout=0)
            except NoMoreMessages:
                break
            bodies.append(message.body)
            await receiver.confirm(message.seq)
    assert bodies == [b"old 1", b"old 2", b"old 3", b"new 1", b"new 2"]


def mapped_kib(path: Path) -> int:
    """Resident KiB of this process's maps of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0]:
            inside = line.endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_release_pages_unmaps_what_reading_mapped(tmp_path: Path) -> None:
    store = JournalStore(tmp_path / "journals", 1 << 26)
    batch = WriteBatch.empty()
    for seq in range(1, 4001):
        batch.put_record(Journal.DQF, queue_key(10, seq), record(10, seq, bytes(1024)))
    store.commit_now(batch)
    try:
        assert sum(len(r.body) for _, r in store.scan(Journal.DQF)) == 4000 * 1024
        data_file = (tmp_path / "journals" / "data.mdb").resolve()
        read_kib = mapped_kib(data_file)
        assert read_kib >= 4000  # the records' pages are mapped in
        assert store.release_pages() > 0
        assert mapped_kib(data_file) < read_kib / 10
        assert store.get(Journal.DQF, queue_key(10, 4000)).body == bytes(1024)  # still readable
    finally:
        store.close()


def test_released_again_and_again_and_after_the_map_moves(tmp_path: Path) -> None:
    """The store remembers where its map is (journals.residency.PageDropper): a second
    release still unmaps what was read since, and once LMDB maps the file anew (the
    map grown) the new map is released, never the old range."""
    store = JournalStore(tmp_path / "journals", 1 << 26)
    batch = WriteBatch.empty()
    for seq in range(1, 4001):
        batch.put_record(Journal.DQF, queue_key(10, seq), record(10, seq, bytes(1024)))
    store.commit_now(batch)
    data_file = (tmp_path / "journals" / "data.mdb").resolve()

    def read_all() -> int:
        assert sum(len(r.body) for _, r in store.scan(Journal.DQF)) == 4000 * 1024
        return mapped_kib(data_file)

    try:
        for _ in range(2):  # the first release finds the map, the second remembers it
            read_kib = read_all()
            assert store.release_pages() == 1 << 26
            assert mapped_kib(data_file) < read_kib / 10
        store.env.set_mapsize(1 << 27)
        read_kib = read_all()
        assert store.release_pages() == 1 << 27
        assert mapped_kib(data_file) < read_kib / 10
    finally:
        store.close()


def test_every_commit_stamps_the_counts_and_an_older_stamp_is_upgraded(tmp_path: Path) -> None:
    """The counts the start-up check holds the file against (mrs.storage.journal_check) are
    stamped by every commit; a directory stamped by an MRS from before them (its
    transaction id alone) is not refused but re-stamped when next opened."""
    from mrs.storage.journal_check import verify_before_open

    path = tmp_path / "journals"
    store = JournalStore(path, 1 << 22)
    batch = WriteBatch.empty().put_record(Journal.DQF, queue_key(10, 1), record(10, 1))
    store.commit_now(batch.put_raw(Journal.MARKS, queue_key(10, 1), b"\0\0\0\1"))
    with store.env.begin() as txn:
        counts = dqf_index.read_stamp(txn, store.dqf_index)
    assert counts == dict.fromkeys(dqf_index.COUNTED, 0) | {"dqf": 1, "marks": 1}
    store.close()
    env = lmdb.open(str(path), max_dbs=16)
    index = env.open_db(dqf_index.INDEX_DB)
    with env.begin(write=True) as txn:  # what an older MRS's commit left
        txn.put(dqf_index.STAMP_KEY, struct.pack(">Q", txn.id()), db=index)
    env.close()
    assert verify_before_open(path) is None
    again = JournalStore(path, 1 << 22)
    try:
        with again.env.begin() as txn:
            assert dqf_index.read_stamp(txn, again.dqf_index) == counts
    finally:
        again.close()
    assert verify_before_open(path) is None
