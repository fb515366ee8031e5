"""The journal library on real LMDB files: record format, scans, group commit, failures."""

from __future__ import annotations

import errno
import subprocess
import sys
import threading
from pathlib import Path

import lmdb
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journals import (
    CorruptRecord,
    GroupCommitWriter,
    Journal,
    JournalDeviceError,
    JournalError,
    JournalFullError,
    JournalStore,
    Record,
    Selection,
    WriteBatch,
    decode_record,
    encode_record,
    queue_key,
    seq_key,
)
from journals.record import FORMAT_VERSION, MAGIC

INT64 = st.integers(-(2**63), 2**63 - 1)
SEQ = st.integers(0, 2**64 - 1)
SIMPLE = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
RECORDS = st.builds(
    Record,
    seq=SEQ,
    target_group=INT64,
    target_queue=INT64,
    source_group=INT64,
    source_queue=INT64,
    body=st.binary(max_size=300),
    msg_class=INT64,
    msg_type=INT64,
    priority=INT64,
    delivery=INT64,
    uma=INT64,
    correlation_id=st.binary(max_size=32),
    put_time_ns=INT64,
    written_time_ns=INT64,
    confirm_value=INT64,
    confirm_time_ns=INT64,
    reason=INT64,
    extra=st.dictionaries(st.text(max_size=10), SIMPLE, max_size=5),
)
TMP_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def small_record(seq: int, queue: int = 10, body: bytes = b"body", **fields) -> Record:
    return Record(seq, 2, queue, 1, 5, body=body, **fields)


def dqf_put(queue: int, seq: int, **fields) -> WriteBatch:
    return WriteBatch.empty().put_record(
        Journal.DQF, queue_key(queue, seq), small_record(seq, queue, **fields)
    )


def records_of(store: JournalStore, journal: Journal) -> dict[bytes, Record]:
    found = {}
    for key, record in store.scan(journal):
        assert isinstance(record, Record), record
        found[key] = record
    return found


class Collector:
    """A `call_soon` that runs the report at once (on the writer thread) and lets the
    test wait, without sleeping, until `expected` done callbacks have run."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.results: list[tuple[int, JournalError | None]] = []
        self.all_done = threading.Event()
        self._lock = threading.Lock()

    def call_soon(self, function) -> None:
        function()

    def done(self, tag: int):
        def callback(error: JournalError | None) -> None:
            with self._lock:
                self.results.append((tag, error))
                if len(self.results) == self.expected:
                    self.all_done.set()

        return callback

    def wait(self) -> dict[int, JournalError | None]:
        assert self.all_done.wait(timeout=30), f"only {len(self.results)} callbacks ran"
        return dict(self.results)


class Gate:
    """A fault hook that holds the first commit until the test opens the gate, so
    everything submitted meanwhile waits in the writer's queue."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def __call__(self, phase: str) -> None:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.release.wait(timeout=30), "the test never opened the gate"


# ----------------------------------------------------------------- record format


@given(RECORDS)
def test_record_round_trips_through_the_format(record):
    data = encode_record(record)
    assert data[0] == MAGIC and data[1] == FORMAT_VERSION
    assert decode_record(data, "dqf", b"k") == record


@given(RECORDS, st.data())
def test_any_flipped_byte_is_reported_as_corrupt(record, data):
    encoded = bytearray(encode_record(record))
    position = data.draw(st.integers(0, len(encoded) - 1), label="position")
    encoded[position] ^= data.draw(st.integers(1, 255), label="mask")
    key = queue_key(10, record.seq)
    with pytest.raises(CorruptRecord) as caught:
        decode_record(bytes(encoded), "dqf", key)
    assert caught.value.journal == "dqf"
    assert caught.value.key == key
    assert "dqf" in str(caught.value) and key.hex() in str(caught.value)


@given(RECORDS, st.data())
def test_a_truncated_record_is_reported_as_corrupt(record, data):
    encoded = encode_record(record)
    length = data.draw(st.integers(0, len(encoded) - 1), label="length")
    with pytest.raises(CorruptRecord) as caught:
        decode_record(encoded[:length], "pcj", seq_key(record.seq))
    assert (caught.value.journal, caught.value.key) == ("pcj", seq_key(record.seq))


@given(RECORDS, st.integers(0, 255).filter(lambda b: b != MAGIC))
def test_wrong_magic_is_reported_as_corrupt(record, magic):
    encoded = bytes([magic]) + encode_record(record)[1:]
    with pytest.raises(CorruptRecord, match="magic") as caught:
        decode_record(encoded, "saf", b"\x00\x01")
    assert (caught.value.journal, caught.value.key) == ("saf", b"\x00\x01")


@given(RECORDS, st.integers(0, 255).filter(lambda v: v != FORMAT_VERSION))
def test_unknown_format_version_is_reported_as_corrupt(record, version):
    encoded = encode_record(record)
    encoded = encoded[:1] + bytes([version]) + encoded[2:]
    with pytest.raises(CorruptRecord, match="version") as caught:
        decode_record(encoded, "dlj", b"key")
    assert (caught.value.journal, caught.value.key) == ("dlj", b"key")


def _with_valid_header(payload: bytes) -> bytes:
    import struct
    import zlib

    return struct.pack(">BBI", MAGIC, FORMAT_VERSION, zlib.crc32(payload)) + payload


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # never-used msgpack byte
        msgpack.packb([1, 2, 3]),  # too few fields
        msgpack.packb([1, 2, 3, 4, 5]),  # still too few for a version-1 record
        msgpack.packb(list(range(30))),  # too many fields
        msgpack.packb(7),
        msgpack.packb("abcdefgh"),  # iterable of 8 characters, not a record
        msgpack.packb({str(i): i for i in range(8)}),
    ],
)
def test_checksummed_payload_that_is_not_a_record_is_corrupt(payload):
    with pytest.raises(CorruptRecord) as caught:
        decode_record(_with_valid_header(payload), "dqf", b"k")
    assert caught.value.journal == "dqf"


# ----------------------------------------------------------------- scans


def test_corrupt_value_in_the_dqf_is_reported_and_neighbours_still_come_out(tmp_path):
    store = JournalStore(tmp_path / "g", map_size_bytes=16 << 20)
    batch = WriteBatch.empty()
    for seq in (1, 2, 3):
        batch.put_record(Journal.DQF, queue_key(10, seq), small_record(seq))
    store.commit_now(batch)
    bad_key = queue_key(10, 2)
    good = bytearray(encode_record(small_record(2)))
    good[-1] ^= 0xFF
    with store.env.begin(write=True) as txn:
        txn.put(bad_key, bytes(good), db=store.db(Journal.DQF))

    for selection in (None, Selection(prefix=10)):
        items = list(store.scan(Journal.DQF, selection))
        assert [key for key, _ in items] == [queue_key(10, s) for s in (1, 2, 3)]
        first, corrupt, last = (value for _, value in items)
        assert isinstance(first, Record) and first.seq == 1
        assert isinstance(last, Record) and last.seq == 3
        assert isinstance(corrupt, CorruptRecord)
        assert (corrupt.journal, corrupt.key) == ("dqf", bad_key)
    store.close()


SCAN_RECORDS = st.lists(
    st.tuples(
        st.sampled_from([0, 1, 7, 2**32 - 1]),  # target queue (key prefix)
        st.integers(0, 40),  # seq
        st.integers(0, 50),  # written time
        st.sampled_from([0, 0, 25, 45]),  # confirm time (0 = not confirmed)
        st.integers(0, 2),  # class
        st.integers(-2, 0),  # type
    ),
    max_size=30,
    unique_by=lambda t: (t[0], t[1]),
)
OPTIONAL_TIME = st.none() | st.integers(-1, 51)
SELECTIONS = st.builds(
    Selection,
    seq_min=st.none() | st.integers(-1, 41),
    seq_max=st.none() | st.integers(-1, 41),
    time_min_ns=OPTIONAL_TIME,
    time_max_ns=OPTIONAL_TIME,
    prefix=st.none() | st.sampled_from([0, 1, 2, 7, 2**32 - 1]),
    msg_class=st.none() | st.integers(0, 3),
    msg_type=st.none() | st.integers(-3, 0),
)


def _expected(rows, selection: Selection) -> list[bytes]:
    """Brute force: every record of the set that the selection's fields allow, key order."""
    chosen = []
    for queue, seq, written, confirmed, msg_class, msg_type in rows:
        when = confirmed if confirmed else written  # a confirmed record dates from its confirm
        checks = [
            selection.prefix is None or queue == selection.prefix,
            selection.seq_min is None or seq >= selection.seq_min,
            selection.seq_max is None or seq <= selection.seq_max,
            selection.time_min_ns is None or when >= selection.time_min_ns,
            selection.time_max_ns is None or when <= selection.time_max_ns,
            selection.msg_class is None or msg_class == selection.msg_class,
            selection.msg_type is None or msg_type == selection.msg_type,
        ]
        if all(checks):
            chosen.append(queue_key(queue, seq))
    return sorted(chosen)


@settings(max_examples=150, deadline=None)
@given(rows=SCAN_RECORDS, selections=st.lists(SELECTIONS, min_size=1, max_size=8))
def test_scan_selection_matches_a_brute_force_filter(tmp_path_factory, rows, selections):
    store = JournalStore(tmp_path_factory.mktemp("scan"), map_size_bytes=16 << 20)
    try:
        batch = WriteBatch.empty()
        for queue, seq, written, confirmed, msg_class, msg_type in rows:
            record = small_record(
                seq,
                queue,
                written_time_ns=written,
                confirm_time_ns=confirmed,
                msg_class=msg_class,
                msg_type=msg_type,
            )
            batch.put_record(Journal.DQF, queue_key(queue, seq), record)
        store.commit_now(batch)
        for selection in selections:
            got = list(store.scan(Journal.DQF, selection))
            assert [key for key, _ in got] == _expected(rows, selection), selection
            for key, record in got:
                assert isinstance(record, Record)
                assert queue_key(record.target_queue, record.seq) == key
    finally:
        store.close()


# ----------------------------------------------------------------- group commit


def test_group_commit_batches_many_submissions_and_all_are_durable(tmp_path):
    path = tmp_path / "g"
    store = JournalStore(path, map_size_bytes=64 << 20)
    gate = Gate()
    store.fault_hook = gate
    batches = 1000
    collector = Collector(batches)
    writer = GroupCommitWriter(store, collector.call_soon)
    writer.start()
    for seq in range(batches):
        writer.submit(dqf_put(10, seq), collector.done(seq))
    # the first commit is held by the gate until every batch is queued
    assert gate.entered.wait(timeout=30)
    gate.release.set()
    results = collector.wait()
    writer.stop()
    store.close()

    assert [tag for tag, _ in collector.results] == list(range(batches)), "done order"
    assert all(error is None for error in results.values())
    assert writer.stats.batches == batches
    assert writer.stats.failed_batches == 0
    assert writer.stats.commits < batches
    assert writer.stats.commits <= 2  # everything queued behind the held commit rode in one

    reopened = JournalStore(path)
    found = records_of(reopened, Journal.DQF)
    reopened.close()
    assert sorted(found) == [queue_key(10, seq) for seq in range(batches)]
    assert all(found[queue_key(10, seq)].seq == seq for seq in range(batches))


def test_group_commit_in_a_tight_loop_batches(tmp_path):
    path = tmp_path / "g"
    store = JournalStore(path, map_size_bytes=64 << 20)
    batches = 1000
    collector = Collector(batches)
    writer = GroupCommitWriter(store, collector.call_soon)
    writer.start()
    for seq in range(batches):
        writer.submit(dqf_put(3, seq), collector.done(seq))
    collector.wait()
    writer.stop()
    store.close()
    assert writer.stats.commits < batches
    reopened = JournalStore(path)
    assert reopened.count(Journal.DQF) == batches
    reopened.close()


def test_stop_commits_everything_already_submitted(tmp_path):
    path = tmp_path / "g"
    store = JournalStore(path, map_size_bytes=16 << 20)
    collector = Collector(50)
    writer = GroupCommitWriter(store, collector.call_soon)
    writer.start()
    for seq in range(50):
        writer.submit(dqf_put(4, seq), collector.done(seq))
    writer.stop()
    assert collector.all_done.is_set()
    store.close()
    reopened = JournalStore(path)
    assert reopened.count(Journal.DQF) == 50
    reopened.close()


# ----------------------------------------------------------------- limits and faults

BIG = b"x" * 16384


def test_map_full_is_journal_full_and_earlier_data_survives(tmp_path):
    path = tmp_path / "g"
    store = JournalStore(path, map_size_bytes=128 * 1024)
    stored = []
    with pytest.raises(JournalFullError):
        for seq in range(100):
            store.commit_now(dqf_put(10, seq, body=BIG))
            stored.append(seq)
    assert 0 < len(stored) < 100
    # a small write still fits after the failed one was rolled back
    store.commit_now(dqf_put(11, 1))
    store.close()
    reopened = JournalStore(path)
    found = records_of(reopened, Journal.DQF)
    reopened.close()
    assert sorted(found) == sorted([queue_key(10, s) for s in stored] + [queue_key(11, 1)])
    assert all(found[queue_key(10, s)].body == BIG for s in stored)


def test_writer_isolates_the_batch_that_fills_the_map(tmp_path):
    path = tmp_path / "g"
    store = JournalStore(path, map_size_bytes=128 * 1024)
    store.commit_now(dqf_put(10, 0, body=BIG))
    gate = Gate()
    store.fault_hook = gate
    collector = Collector(3)
    writer = GroupCommitWriter(store, collector.call_soon)
    writer.start()
    writer.submit(dqf_put(10, 1), collector.done(1))  # held by the gate
    assert gate.entered.wait(timeout=30)
    too_big = WriteBatch.empty()
    for seq in range(100, 110):
        too_big.put_record(Journal.DQF, queue_key(12, seq), small_record(seq, 12, body=BIG))
    writer.submit(too_big, collector.done(2))
    writer.submit(dqf_put(11, 3), collector.done(3))  # same commit as the big one
    gate.release.set()
    results = collector.wait()
    writer.stop()
    store.close()

    assert results[1] is None
    assert isinstance(results[2], JournalFullError)
    assert results[3] is None
    assert writer.stats.failed_batches == 1
    reopened = JournalStore(path)
    keys = set(records_of(reopened, Journal.DQF))
    reopened.close()
    assert keys == {queue_key(10, 0), queue_key(10, 1), queue_key(11, 3)}


def _failing_hook(errno_value: int):
    def hook(phase: str) -> None:
        raise OSError(errno_value, "injected")

    return hook


@pytest.mark.parametrize("errno_value", [errno.EIO, errno.ENOSPC])
def test_device_failure_stores_nothing_of_the_batch(tmp_path, errno_value):
    path = tmp_path / "g"
    store = JournalStore(path, map_size_bytes=16 << 20)
    store.commit_now(dqf_put(10, 1))
    store.fault_hook = _failing_hook(errno_value)
    with pytest.raises(JournalDeviceError) as caught:
        store.commit_now(dqf_put(10, 2).delete(Journal.DQF, queue_key(10, 1)))
    assert caught.value.errno_value == errno_value

    collector = Collector(2)
    writer = GroupCommitWriter(store, collector.call_soon)
    writer.start()
    writer.submit(dqf_put(10, 3), collector.done(3))
    writer.submit(dqf_put(10, 4), collector.done(4))
    results = collector.wait()
    writer.stop()
    for error in results.values():
        assert isinstance(error, JournalDeviceError)
        assert error.errno_value == errno_value
    store.close()
    reopened = JournalStore(path)
    assert set(records_of(reopened, Journal.DQF)) == {queue_key(10, 1)}
    reopened.close()


def test_lmdb_disk_full_is_reported_as_enospc(tmp_path):
    store = JournalStore(tmp_path / "g", map_size_bytes=16 << 20)

    def disk_full(phase: str) -> None:
        # what py-lmdb raises when a write or the commit gets ENOSPC
        raise lmdb.DiskError("mdb_txn_commit: No space left on device")

    store.fault_hook = disk_full
    with pytest.raises(JournalDeviceError) as caught:
        store.commit_now(dqf_put(10, 1))
    assert caught.value.errno_value == errno.ENOSPC
    store.close()


# ----------------------------------------------------------------- readers and moves

_WRITE_SCRIPT = """
import sys
from pathlib import Path
from journals import Journal, JournalStore, Record, WriteBatch, queue_key
path, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = JournalStore(Path(path), map_size_bytes=16 << 20)
batch = WriteBatch.empty()
for seq in range(first, last):
    batch.put_record(Journal.DQF, queue_key(10, seq), Record(seq, 2, 10, 1, 5))
store.commit_now(batch)
store.commit_now(WriteBatch.empty().delete(Journal.DQF, queue_key(10, 0)))
store.close()
"""


def _write_from_another_process(path: Path, first: int, last: int) -> None:
    subprocess.run(
        [sys.executable, "-c", _WRITE_SCRIPT, str(path), str(first), str(last)],
        check=True,
        timeout=60,
    )


def test_read_only_store_sees_consistent_snapshots_while_another_process_writes(tmp_path):
    path = tmp_path / "g"
    _write_from_another_process(path, 0, 10)  # seqs 0..9, then deletes 0 -> 1..9
    reader = JournalStore(path, readonly=True)
    try:
        assert reader.count(Journal.DQF) == 9
        scan = reader.scan(Journal.DQF)
        first_key, _ = next(scan)  # the scan now holds its snapshot
        assert first_key == queue_key(10, 1)

        _write_from_another_process(path, 10, 20)  # adds 10..19

        rest = [key for key, _ in scan]
        assert [first_key, *rest] == [queue_key(10, s) for s in range(1, 10)]
        assert reader.count(Journal.DQF) == 19
        assert [k for k, _ in reader.scan(Journal.DQF)] == [queue_key(10, s) for s in range(1, 20)]
        with pytest.raises(JournalError):
            reader.commit_now(dqf_put(10, 99))
    finally:
        reader.close()


def _confirm_move(seq: int, record: Record) -> WriteBatch:
    return (
        WriteBatch.empty()
        .delete(Journal.DQF, queue_key(10, seq))
        .put_record(Journal.PCJ, seq_key(seq), record)
    )


def test_confirm_move_from_dqf_to_pcj_is_atomic(tmp_path):
    path = tmp_path / "g"
    store = JournalStore(path, map_size_bytes=128 * 1024)
    store.commit_now(dqf_put(10, 1).put_record(Journal.DQF, queue_key(10, 2), small_record(2)))
    confirmed = small_record(1, confirm_value=42, confirm_time_ns=1234)

    store.commit_now(_confirm_move(1, confirmed))
    assert set(records_of(store, Journal.DQF)) == {queue_key(10, 2)}
    assert records_of(store, Journal.PCJ) == {seq_key(1): confirmed}

    def unchanged() -> None:
        assert set(records_of(store, Journal.DQF)) == {queue_key(10, 2)}
        assert set(records_of(store, Journal.PCJ)) == {seq_key(1)}

    # the device fails before the commit
    store.fault_hook = _failing_hook(errno.EIO)
    with pytest.raises(JournalDeviceError):
        store.commit_now(_confirm_move(2, small_record(2)))
    unchanged()
    store.fault_hook = None

    # the PCJ put fails after the DQF delete was applied in the transaction
    with pytest.raises(JournalFullError):
        store.commit_now(_confirm_move(2, small_record(2, body=b"y" * (1 << 20))))
    unchanged()
    with pytest.raises(JournalError):
        store.commit_now(
            WriteBatch.empty()
            .delete(Journal.DQF, queue_key(10, 2))
            .put_record(Journal.PCJ, b"k" * 1000, small_record(2))  # key too long for LMDB
        )
    unchanged()
    store.close()

    reopened = JournalStore(path)
    assert set(records_of(reopened, Journal.DQF)) == {queue_key(10, 2)}
    assert records_of(reopened, Journal.PCJ) == {seq_key(1): confirmed}
    reopened.close()
