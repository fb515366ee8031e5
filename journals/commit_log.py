"""The commit log: one flush makes a journal commit durable, where LMDB's synced
commit takes two.

Why: a synced LMDB commit flushes the data pages (`fdatasync`) and then writes the
meta page with `O_DSYNC`, a second device flush, so that the meta page never points
at pages the disk does not hold; one small write and `fdatasync` into a file already
written costs about half as much (figures in benchmarks/README.md, "The commit log").
A queue's answer latency is mostly that flush. So each commit's batches are written
here first, flushed once, and then committed to LMDB without a flush (`sync=False,
metasync=False`); a checkpoint (journals.store `JournalStore.checkpoint`) flushes
LMDB now and then, beside the commits, and lets the log start again.

What keeps it exact:
- Each record carries its commit's number, and LMDB stores the number of the last
  commit applied in the same transaction. A process killed after the flush and
  before LMDB's commit leaves one record LMDB does not have; opening the store
  applies it.
- A process killed at any moment leaves LMDB whole: the kernel holds every page it
  wrote, and LMDB writes the meta page last.
- A machine that lost power may have written any subset of LMDB's pages since the
  last checkpoint, meta pages included. LMDB never reuses a page of the checkpoint's
  snapshot while a reader holds it, and the store holds one from each checkpoint
  until the next is durable, so that snapshot's pages are intact on disk. The
  checkpoint keeps a copy of its two meta pages here; after a reboot (the kernel's
  boot id differs from the one the checkpoint wrote) they are written back, which
  puts LMDB at the checkpoint, and every record after it is applied again.

Layout: two files, `commit.0.log` and `commit.1.log`, used in turn. Each starts with
a header (the checkpoint it begins: generation, commit number, boot id, the meta
pages, CRC-32), then records from `RECORDS_OFFSET`, each `<magic, number, length,
crc>` and its payload. A checkpoint switches the appends to the other file at commit
N, and once LMDB is flushed writes that file's header (N); until then the newest
header is the first file's, and a read takes its records and then the other file's
that follow them. So the flush runs beside the commits (`begin_checkpoint` on the
writer, `write_header` anywhere), and a torn header leaves the other file's. A file
is overwritten in place from the top (blocks it already has: no file-system metadata
to flush). The first record whose magic, number (the one after the last), length or
CRC is wrong ends a file's records.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from journals.checksum import crc32

LOG_NAMES = ("commit.0.log", "commit.1.log")
CHECKPOINT_LOG_BYTES = 16 << 20
"""Log bytes after which the store checkpoints: bounds the replay after a crash (a
16 MiB replay takes well under a second)."""
CHECKPOINT_WASTE_BYTES = 1 << 20
CHECKPOINT_GROWTH_SHARE = 32
"""The store also checkpoints once its file grew by 1 MiB more than the log since the
last checkpoint began, or by 1/32 of its map: LMDB reuses no page freed while the
checkpoint's snapshot is pinned (journals.store `_checkpoint_due`). The flush runs
beside the commits, so a checkpoint costs the writer a read of the meta pages and a
thread's start."""
LOG_RECORD_BYTES_MAX = 64 << 10
"""A commit whose values hold more than this is not logged: it is flushed in LMDB's
file and named by a checkpoint at once (journals.store `_flush_direct`), two flushes
as LMDB's synced commit had. Logged, a busy writer's large commits would write every
byte twice, and a busy disk's rate is then the limit (benchmarks/README.md, "The
commit log"); a small commit gains one flush."""
NEAR_FULL_SHARE = 8
"""Once LMDB's file reaches into the last 1/8 of its map, commits are not logged
(journals.store `JournalStore.near_full`): between checkpoints LMDB reuses no page
freed since the last one, and a full journal must still take its confirms."""
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
_SLOT_MAGIC = b"MRSCLOG2"
_SLOT_HEAD = struct.Struct(">8sQQ16sI")  # magic, generation, number, boot id, meta length
_RECORD_MAGIC = 0x4D52534C  # "MRSL"
_RECORD_HEAD = struct.Struct(">IQII")  # magic, number, payload length, CRC-32 of payload
_CRC = struct.Struct(">I")
_RECORD_BYTES_MAX = 1 << 31
SLOT_BYTES = 2 * 65536 + 4096
"""A header: two meta pages of LMDB's largest page size, and the fields."""
RECORDS_OFFSET = SLOT_BYTES


_boot_ids: dict[Path, bytes] = {}
"""`boot_id` as read from each path, once per process."""


def boot_id() -> bytes:
    """This boot's id (16 bytes): a different one means the machine restarted, and
    pages the kernel had not written when it stopped may be lost. Without one (not
    Linux), every open counts as after a restart, which is always safe.

    Read once per process (per BOOT_ID_PATH): it changes only with a reboot, which no
    process outlives. Why: every checkpoint's header carries it, and a busy group
    checkpoints at each large commit, so opening and reading /proc for it showed in
    the server's profile (benchmarks/README.md has the figures)."""
    path = BOOT_ID_PATH
    known = _boot_ids.get(path)
    if known is None:
        known = _boot_ids[path] = _read_boot_id(path)
    return known


def _read_boot_id(path: Path) -> bytes:
    try:
        text = path.read_text().strip()
        return bytes.fromhex(text.replace("-", ""))[:16].ljust(16, b"\0")
    except (OSError, ValueError):
        return bytes(16)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A header: LMDB was flushed at commit `number`, with these meta pages, during
    boot `boot`."""

    generation: int
    number: int
    boot: bytes
    meta_pages: bytes


@dataclass(frozen=True, slots=True)
class LogContents:
    """The log as read at open: its newest whole checkpoint (None: no log, or none
    whole), the file holding it (0 or 1), and the records after it, in order."""

    checkpoint: Checkpoint | None
    records: list[tuple[int, bytes]]
    newest_file: int = 0
    damage: str | None = None
    """Why the log cannot be trusted to put the journals back at its checkpoint (after
    a restart of the machine): a record that fails its CRC with whole records of the
    next commits after it (a torn end has none: each record is flushed before the
    next is written). None: sound as far as read. A header that does not read whole
    is not damage: a power loss tears the header being written, and the checkpoint
    before it is the one whose snapshot is held until that header is durable (a
    changed byte in a durable header is not told apart from that; see
    docs/journals.md)."""
    damaged_beyond: int = 0
    """The last commit of a whole record found past a damaged one (0: none)."""

    @property
    def last_number(self) -> int:
        if self.records:
            return self.records[-1][0]
        return self.checkpoint.number if self.checkpoint is not None else 0


def read_log(directory: Path) -> LogContents:
    """The log in `directory` as it is on disk (absent files: empty)."""
    files = [_read_file(directory / name) for name in LOG_NAMES]
    headers = [(_read_header(data), index) for index, data in enumerate(files)]
    whole = [(header, index) for header, index in headers if header is not None]
    if not whole:
        return LogContents(None, [])
    checkpoint, newest = max(whole, key=lambda found: found[0].generation)
    damage: str | None = None
    beyond, records, last = 0, [], checkpoint.number
    for index in (newest, 1 - newest):  # the other's: a checkpoint under way
        found, stop = _read_records(files[index], last)
        records += found
        last = records[-1][0] if records else last
        if not beyond and (beyond := _whole_record_after(files[index], stop, last)):
            damage = (
                f"{LOG_NAMES[index]} is damaged at byte {stop}: the record of commit "
                f"{last + 1} fails its check, and whole records up to commit {beyond} "
                "follow it"
            )
    return LogContents(checkpoint, records, newest, damage, beyond)


def _whole_record_after(data: bytes, stop: int, number: int) -> int:
    """The last commit of the whole records that follow the record at `stop`, where a
    file's records stopped after commit `number`, when that one is commit number + 1
    failing only its CRC (a changed byte in its payload); 0 otherwise. A record torn
    by a crash is the last one written: what lies past it is from an older checkpoint
    (lower numbers) or nothing. Only the damaged record's own head is trusted, so no
    bytes of a payload past the damage are ever read as a record."""
    if stop + _RECORD_HEAD.size > len(data):
        return 0
    magic, found, length, _ = _RECORD_HEAD.unpack_from(data, stop)
    if magic != _RECORD_MAGIC or found != number + 1:
        return 0
    after, _ = _read_records(data, found, stop + _RECORD_HEAD.size + length)
    return after[-1][0] if after else 0


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _read_header(data: bytes) -> Checkpoint | None:
    """The checkpoint a file's header holds, or None if it is torn or empty."""
    if len(data) < _SLOT_HEAD.size:
        return None
    magic, generation, number, boot, meta_length = _SLOT_HEAD.unpack_from(data, 0)
    meta_end = _SLOT_HEAD.size + meta_length
    if magic != _SLOT_MAGIC or meta_end + _CRC.size > min(SLOT_BYTES, len(data)):
        return None
    (crc,) = _CRC.unpack_from(data, meta_end)
    if crc32(data[:meta_end]) != crc:
        return None
    return Checkpoint(generation, number, bytes(boot), bytes(data[_SLOT_HEAD.size : meta_end]))


def _read_records(
    data: bytes, number: int, offset: int = RECORDS_OFFSET
) -> tuple[list[tuple[int, bytes]], int]:
    """A file's records from `offset` (its top) that follow commit `number` one by
    one, and the offset where they stop."""
    records: list[tuple[int, bytes]] = []
    while offset + _RECORD_HEAD.size <= len(data):
        magic, found, length, crc = _RECORD_HEAD.unpack_from(data, offset)
        start = offset + _RECORD_HEAD.size
        if magic != _RECORD_MAGIC or found != number + 1 or start + length > len(data):
            break
        payload = data[start : start + length]
        if crc32(payload) != crc:
            break
        records.append((found, bytes(payload)))
        number, offset = found, start + length
    return records, offset


@dataclass(frozen=True, slots=True)
class CheckpointStart:
    """A checkpoint begun at commit `number`: its header, once LMDB is flushed, goes
    to file `file` with `generation`."""

    file: int
    generation: int
    number: int
    meta_pages: bytes


class CommitLog:
    """The open log of one store: appends records (each flushed before it returns)
    and begins and ends checkpoints. Appends come from one writer at a time; a
    header may be written from another thread meanwhile (`write_header`)."""

    def __init__(self, directory: Path, contents: LogContents) -> None:
        self.fds = [os.open(directory / name, os.O_RDWR | os.O_CREAT, 0o600) for name in LOG_NAMES]
        self.generation = contents.checkpoint.generation if contents.checkpoint else 0
        """The newest checkpoint's (begun); the next one begins generation + 1."""
        self.file = contents.newest_file
        """The file taking appends."""
        self.offset = RECORDS_OFFSET
        self._last_start = self.offset

    @property
    def bytes_since_checkpoint(self) -> int:
        return self.offset - RECORDS_OFFSET

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)

    def append(self, number: int, payload: bytes) -> None:
        """Write commit `number`'s record and flush it (OSError: not durable)."""
        if len(payload) >= _RECORD_BYTES_MAX:
            raise OSError(f"a commit of {len(payload)} bytes is too large for the log")
        head = _RECORD_HEAD.pack(_RECORD_MAGIC, number, len(payload), crc32(payload))
        fd = self.fds[self.file]
        try:
            written = os.pwritev(fd, [head, payload], self.offset)
            if written != len(head) + len(payload):  # a full disk takes what fits
                raise OSError(errno.ENOSPC, "a short write to the commit log")
            os.fdatasync(fd)
        except OSError:
            # not stored: a record the kernel may still write must not be replayed
            with contextlib.suppress(OSError):
                os.pwrite(fd, bytes(_RECORD_HEAD.size), self.offset)
                os.fdatasync(fd)
            raise
        self._last_start = self.offset
        self.offset += len(head) + len(payload)

    def void_last(self) -> None:
        """The last record's commit failed after its flush: blank its head (flushed),
        so a replay never applies what was reported not stored, and write over it."""
        fd = self.fds[self.file]
        os.pwrite(fd, bytes(_RECORD_HEAD.size), self._last_start)
        os.fdatasync(fd)
        self.offset = self._last_start

    def begin_checkpoint(self, number: int, meta_pages: bytes) -> CheckpointStart:
        """LMDB's snapshot at commit `number` (these meta pages) is the next
        checkpoint: later records go to the top of the other file. Its header is
        written once LMDB is flushed (`write_header`); until then the records of both
        files read on from the current header."""
        if _SLOT_HEAD.size + len(meta_pages) + _CRC.size > SLOT_BYTES:
            raise OSError(f"meta pages of {len(meta_pages)} bytes do not fit a log header")
        self.generation += 1
        self.file = 1 - self.file
        self.offset = self._last_start = RECORDS_OFFSET
        return CheckpointStart(self.file, self.generation, number, meta_pages)

    def write_header(self, start: CheckpointStart) -> None:
        """LMDB is flushed at `start.number`: write and flush the header that makes
        the log start there (any thread)."""
        head = _SLOT_HEAD.pack(
            _SLOT_MAGIC, start.generation, start.number, boot_id(), len(start.meta_pages)
        )
        body = head + start.meta_pages
        header = body + _CRC.pack(crc32(body))
        if os.pwrite(self.fds[start.file], header, 0) != len(header):  # a full disk
            raise OSError(errno.ENOSPC, "a short write of a commit log header")
        os.fdatasync(self.fds[start.file])
