"""The commit log on real files: a commit is durable once its record is flushed,
whatever a killed process or a lost machine leaves of LMDB's unflushed pages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journals import Journal, JournalError, JournalStore, WriteBatch, commit_log
from journals.commit_log import LOG_NAMES, CommitLog, LogContents, read_log

PAGE_BYTES = 4096
MAP_BYTES = 64 << 20
META = b"m" * (2 * PAGE_BYTES)


def _batch(index: int, delete: int | None = None, big: bool = False) -> WriteBatch:
    """A put of DQF key `index` (a body big enough to fill pages; `big`: larger than
    a log record holds, so the commit is flushed in LMDB's file) and, if given, a
    delete of DQF key `delete` (confirms free pages)."""
    body = b"m%06d" % index * (150 if not big else 12_000)
    batch = WriteBatch.empty().put_raw(Journal.DQF, index.to_bytes(12, "big"), body)
    batch.put_raw(Journal.META, b"last", b"%d" % index)
    if delete is not None:
        batch.delete(Journal.DQF, delete.to_bytes(12, "big"))
    return batch


def _contents(store: JournalStore) -> dict[str, dict[bytes, bytes]]:
    return {
        journal.value: dict(store.raw_items(journal)) for journal in (Journal.DQF, Journal.META)
    }


def _commit_range(store: JournalStore, start: int, stop: int, big_every: int = 0) -> None:
    """One commit a message; every third one also deletes an earlier message; every
    `big_every`th one is too large for the log."""
    for index in range(start, stop):
        delete = index - 5 if index % 3 == 0 and index >= 5 else None
        store.commit_now(_batch(index, delete, big=bool(big_every) and index % big_every == 0))


def test_a_record_flushed_before_lmdb_committed_is_applied_at_open(tmp_path: Path) -> None:
    """A process SIGKILLed between the log's flush and LMDB's commit: the commit it
    flushed is in the journals when they open again (and was not in LMDB alone)."""
    journals = tmp_path / "journals"
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from journals import Journal, JournalStore, WriteBatch, commit_log
        store = JournalStore(Path({str(journals)!r}))
        store.commit_now(WriteBatch.empty().put_raw(Journal.META, b"first", b"1"))
        original = commit_log.CommitLog.append
        def append_then_die(self, number, payload):
            original(self, number, payload)
            os.kill(os.getpid(), signal.SIGKILL)
        commit_log.CommitLog.append = append_then_die
        store.commit_now(WriteBatch.empty().put_raw(Journal.META, b"second", b"2"))
        """
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert killed.returncode == -9, killed.stderr
    lmdb_alone = JournalStore(journals, readonly=True)
    try:
        assert lmdb_alone.meta_get("first") == b"1" and lmdb_alone.meta_get("second") is None
    finally:
        lmdb_alone.close()
    store = JournalStore(journals)
    try:
        assert store.meta_get("second") == b"2"
        store.commit_now(WriteBatch.empty().put_raw(Journal.META, b"third", b"3"))
    finally:
        store.close()
    store = JournalStore(journals)
    try:
        assert [store.meta_get(name) for name in ("first", "second", "third")] == [b"1", b"2", b"3"]
    finally:
        store.close()


def _txn_id(data: bytes, meta_page: int) -> int:
    """The transaction id a meta page names (lmdb.h's layout, 64-bit: byte 144)."""
    return int.from_bytes(
        data[meta_page * PAGE_BYTES + 144 : meta_page * PAGE_BYTES + 152], "little"
    )


def _lost_power(
    at_checkpoint: bytes, written: bytes, kept_pages: set[int], metas: str, grown: bool
) -> bytes:
    """What a disk may hold after a power loss: the file as the checkpoint flushed it,
    with only the pages in `kept_pages` of those written since (the kernel writes
    dirty pages in any order), the meta pages as `metas` says, and the file's growth
    since kept or not."""
    size = len(written) if grown else len(at_checkpoint)
    disk = bytearray(at_checkpoint.ljust(size, b"\0"))
    for page in kept_pages:
        start = page * PAGE_BYTES
        if 2 * PAGE_BYTES <= start < size:
            disk[start : start + PAGE_BYTES] = written[start : start + PAGE_BYTES]
    if metas == "written":
        disk[: 2 * PAGE_BYTES] = written[: 2 * PAGE_BYTES]
    elif metas == "zeroed":
        disk[: 2 * PAGE_BYTES] = bytes(2 * PAGE_BYTES)
    elif metas == "newer one":
        newer = max((0, 1), key=lambda page: _txn_id(written, page))
        disk[newer * PAGE_BYTES : (newer + 1) * PAGE_BYTES] = written[
            newer * PAGE_BYTES : (newer + 1) * PAGE_BYTES
        ]
    return bytes(disk)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=st.integers(1, 40),
    after=st.integers(0, 60),
    keep=st.one_of(st.none(), st.sets(st.integers(0, 400), max_size=200)),
    metas=st.sampled_from(["checkpoint", "written", "zeroed", "newer one"]),
    grown=st.booleans(),
    big_every=st.sampled_from([0, 4, 9]),
)
def test_a_power_loss_keeps_every_commit_the_log_flushed(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    before: int,
    after: int,
    keep: set[int] | None,
    metas: str,
    grown: bool,
    big_every: int,
) -> None:
    """Commits (some too large for the log: flushed in LMDB's file at once), a
    checkpoint, more commits; then the machine loses power with any subset of
    LMDB's pages written since the last checkpoint on disk (None: all of them; the
    log's records are flushed). After the reboot the store opens with every commit,
    exactly."""
    root = tmp_path_factory.mktemp("power")
    journals = root / "journals"
    flushed: list[bytes] = []  # the data file as each checkpoint's header found it
    write_header = CommitLog.write_header

    def header_after_flush(log: CommitLog, start) -> None:
        write_header(log, start)
        flushed.append((journals / "data.mdb").read_bytes())

    with monkeypatch.context() as patch:
        patch.setattr(CommitLog, "write_header", header_after_flush)
        store = JournalStore(journals, MAP_BYTES)
        try:
            _commit_range(store, 0, before, big_every)
            store.checkpoint()
            _commit_range(store, before, before + after, big_every)
            if store._checkpoint is not None and store._checkpoint.thread is not None:
                store._checkpoint.thread.join()  # a header under way lands or not: not torn
            expected = _contents(store)
            written = (journals / "data.mdb").read_bytes()
            logs = {name: (journals / name).read_bytes() for name in LOG_NAMES}
        finally:  # the process is gone: nothing is flushed at close
            for pinned in (store._pinned, store._checkpoint and store._checkpoint.pinned):
                if pinned is not None:
                    pinned.abort()
            store.commit_log.close()
            store.env.close()
    at_checkpoint = flushed[-1]

    rebooted = root / "rebooted"
    rebooted.mkdir()
    pages = range(len(written) // PAGE_BYTES)
    kept_pages = set(pages) if keep is None else {page for page in keep if page in pages}
    (rebooted / "data.mdb").write_bytes(
        _lost_power(at_checkpoint, written, kept_pages, metas, grown)
    )
    for name, content in logs.items():
        (rebooted / name).write_bytes(content)
    other_boot = root / "boot_id"
    other_boot.write_text("00000000-0000-4000-8000-000000000001\n")
    with monkeypatch.context() as patch:
        patch.setattr(commit_log, "BOOT_ID_PATH", other_boot)
        store = JournalStore(rebooted, MAP_BYTES)
        try:
            assert _contents(store) == expected
            store.commit_now(_batch(10_000))  # and it writes on from there
        finally:
            store.close()
    shutil.rmtree(root)


def test_a_commit_void_after_its_flush_is_not_replayed(tmp_path: Path) -> None:
    """A record whose LMDB commit failed after its flush is blanked: the log ends
    before it, and the next record takes its place and number."""
    log = CommitLog(tmp_path, LogContents(None, []))
    try:
        log.write_header(log.begin_checkpoint(0, META))
        log.append(1, b"one")
        log.append(2, b"two")
        assert read_log(tmp_path).records == [(1, b"one"), (2, b"two")]
        log.void_last()
        assert read_log(tmp_path).records == [(1, b"one")]
        log.append(2, b"again")
        assert read_log(tmp_path).records == [(1, b"one"), (2, b"again")]
    finally:
        log.close()


def test_records_after_a_checkpoint_under_way_read_on_from_the_last_header(
    tmp_path: Path,
) -> None:
    """A checkpoint begun sends the records to the other file before its header is
    written (its flush runs beside the commits): read from the last header, the
    records go on across both files; once the header is written, from it."""
    log = CommitLog(tmp_path, LogContents(None, []))
    try:
        log.write_header(log.begin_checkpoint(0, META))
        log.append(1, b"one")
        log.append(2, b"two")
        second = log.begin_checkpoint(2, META)
        log.append(3, b"three")
        contents = read_log(tmp_path)
        assert contents.checkpoint is not None and contents.checkpoint.number == 0
        assert contents.records == [(1, b"one"), (2, b"two"), (3, b"three")]
        log.write_header(second)
        contents = read_log(tmp_path)
        assert contents.checkpoint is not None and contents.checkpoint.number == 2
        assert contents.records == [(3, b"three")]
        log.begin_checkpoint(3, META)
        log.append(4, b"four")  # over record 1, at the top of the first file
        assert read_log(tmp_path).records == [(3, b"three"), (4, b"four")]
    finally:
        log.close()


@settings(max_examples=60, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    cut=st.integers(0, 10_000),
    flip=st.integers(0, 10_000),
)
def test_a_torn_or_damaged_log_reads_as_a_prefix_of_its_records(
    tmp_path_factory: pytest.TempPathFactory, payloads: list[bytes], cut: int, flip: int
) -> None:
    """Whatever a crash leaves of the log's end (cut short, a byte changed), reading
    it gives the records up to the damage, in order, never a wrong one."""
    directory = tmp_path_factory.mktemp("torn")
    log = CommitLog(directory, LogContents(None, []))
    try:
        log.write_header(log.begin_checkpoint(7, META))
        for number, payload in enumerate(payloads, start=8):
            log.append(number, payload)
        path = directory / LOG_NAMES[log.file]
    finally:
        log.close()
    data = bytearray(path.read_bytes())
    start = commit_log.RECORDS_OFFSET
    data = data[: start + cut % (len(data) - start + 1)]
    if len(data) > start:
        data[start + flip % (len(data) - start)] ^= 0x5A
    path.write_bytes(bytes(data))
    contents = read_log(directory)
    assert contents.checkpoint is not None and contents.checkpoint.number == 7
    expected = list(enumerate(payloads, start=8))
    assert contents.records == expected[: len(contents.records)]


def test_a_torn_checkpoint_leaves_the_one_before(tmp_path: Path) -> None:
    """The two files' headers are written in turn: the newer one torn, the log reads
    from the older one and its records."""
    log = CommitLog(tmp_path, LogContents(None, []))
    try:
        log.write_header(log.begin_checkpoint(3, b"a" * (2 * PAGE_BYTES)))
        log.append(4, b"four")
        newer = log.begin_checkpoint(4, b"b" * (2 * PAGE_BYTES))
        log.write_header(newer)
    finally:
        log.close()
    torn = tmp_path / LOG_NAMES[newer.file]
    data = bytearray(torn.read_bytes())
    data[100] ^= 0xFF
    torn.write_bytes(bytes(data))
    contents = read_log(tmp_path)
    assert contents.checkpoint is not None
    assert (contents.checkpoint.number, contents.checkpoint.meta_pages[:1]) == (3, b"a")
    assert contents.records == [(4, b"four")]


def test_journals_older_than_their_log_are_refused_with_the_way_out(tmp_path: Path) -> None:
    """A data file put back from an older copy, beside a newer log: the store refuses
    to open (a replay from there would skip commits) and says what to do."""
    journals = tmp_path / "journals"
    store = JournalStore(journals, MAP_BYTES)
    _commit_range(store, 0, 3)
    store.checkpoint()
    older = (journals / "data.mdb").read_bytes()
    _commit_range(store, 3, 6)
    store.close()
    (journals / "data.mdb").write_bytes(older)
    with pytest.raises(JournalError, match=r"end at commit 3, before their log's checkpoint at 6"):
        JournalStore(journals, MAP_BYTES)
    for name in LOG_NAMES:
        os.rename(journals / name, tmp_path / name)
    store = JournalStore(journals, MAP_BYTES)
    try:
        assert store.meta_get("last") == b"2"
    finally:
        store.close()


def test_lmdb_pages_go_to_the_disk_once_the_answers_are_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A logged commit leaves LMDB's pages dirty and starts no writeback itself (its
    answers wait for the log's flush alone); the caller starts it once they are out
    (`start_writeback`, once per commit), and a commit that finds the last one's still
    due starts it first, so no caller can leave LMDB's pages to the checkpoint's burst."""
    from journals import residency

    started: list[int] = []
    monkeypatch.setattr(residency, "start_writeback", started.append)
    store = JournalStore(tmp_path / "journals", MAP_BYTES)
    try:
        store.commit_now(_batch(1))
        assert started == [] and store.writeback_due
        store.start_writeback()
        store.start_writeback()  # nothing new since: no second call
        assert len(started) == 1 and not store.writeback_due
        data_fd = started[0]
        assert os.path.samefile(f"/proc/self/fd/{data_fd}", tmp_path / "journals" / "data.mdb")
        store.commit_now(_batch(2))
        store.commit_now(_batch(3))  # nobody called after commit 2: this commit did
        assert started == [data_fd, data_fd] and store.writeback_due
    finally:
        store.close()
