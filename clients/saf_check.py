"""Check a client SAF journal before the client attaches with it: a damaged journal
is refused with one line (JournalFailed), never opened as if it were whole.

Why: LMDB trusts its file. A journal file cut short makes it fault (SIGBUS kills
the application), zeroed meta pages make it raise, a damaged page hides records
(the backlog never drains and nothing says why), an emptied or deleted data file
is taken for a new journal (every record in it lost without a word), and a record
whose bytes changed fails its checksum and could only be skipped. So, as the group
server does before it opens its journals (mrs.storage.journal_check), the client

1. keeps the journal's identity beside the data file (`journal.id`), so a data file
   that is gone, empty or another journal's is told from a new journal;
2. compares the file's size with the last page its LMDB meta page counts, so a file
   cut short is refused before LMDB maps it;
3. walks every page in a child process, which a damaged page may kill instead of us;
4. then, opened, reads every record (those waiting to drain, and those the group
   refused, kept aside): its checksum, its key against its own seq, the seq against
   the next one to give, and the number read against LMDB's count.
"""

from __future__ import annotations

import struct
from pathlib import Path

from clients.errors import JournalFailed
from journals import CorruptRecord, Journal, JournalError, JournalStore, decode_record, seq_key
from mrs.model import Status
from mrs.storage.atomic_file import replace_file
from mrs.storage.journal_check import walk

IDENTITY_FILE = "journal.id"
"""Beside data.mdb: the id of the journal made in this directory."""
DATA_FILE = "data.mdb"
_LMDB_MAGIC = 0xBEEFC0DE
_META_MAGIC = struct.Struct("<I")
_META_PAGE_SIZE = struct.Struct("<I")
_META_LAST_PAGE = struct.Struct("<QQ")
"""LMDB's meta page (64-bit build): after the 16-byte page header, mm_magic; the
free database's md_pad (which holds the page size) at 40; mm_last_pg and mm_txnid
at 136."""
_MAGIC_AT, _PAGE_SIZE_AT, _LAST_PAGE_AT = 16, 40, 136


def check_before_open(path: Path) -> None:
    """Raise JournalFailed (one line) when the journal at `path` is damaged, cut
    short, or lost its data file; return when it is whole or new."""
    data = path / DATA_FILE
    identity = read_identity(path)
    size = data.stat().st_size if data.exists() else 0
    if size == 0:
        if identity is not None:
            state = "empty" if data.exists() else "gone"
            raise refused(
                path,
                f"its data file {data} is {state}, but journal {identity} was made here "
                "and its records were in it",
                hint="restore the file, or move the directory aside to start an empty journal",
            )
        return  # a new journal
    problem = _cut_short(data, size)
    if problem is None:
        try:
            report = walk(path)
        except JournalError as beside:  # its client runs, and its lock.mdb was deleted
            raise JournalFailed(Status.JOURNAL_FAIL, str(beside)) from None
        if report.failure is not None:
            where = f" (in its {report.failed_in} database)" if report.failed_in else ""
            problem = f"LMDB cannot read it{where}: {report.failure}"
    if problem is not None:
        raise refused(path, problem)


def check_records(path: Path, store: JournalStore, journal_id: str | None, next_seq: int) -> None:
    """Raise JournalFailed when a record of the opened journal cannot be sent as it
    was journaled, or the data file is not the journal made here."""
    identity = read_identity(path)
    if identity is not None and identity != journal_id:
        raise refused(
            path, f"its data file holds journal {journal_id or 'none'}, not {identity} made here"
        )
    problems: list[str] = []
    for journal, kind in ((Journal.SAF, "record"), (Journal.DLJ, "refused record")):
        problems.extend(_record_problems(store, journal, kind, next_seq))
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise refused(path, f"{problems[0]}{more}")


def _record_problems(store: JournalStore, journal: Journal, kind: str, next_seq: int) -> list[str]:
    """What is wrong with the records of one of the journal's databases: the records
    waiting to drain (SAF), or those the group refused, kept aside (DLJ)."""
    problems: list[str] = []
    read = 0
    for key, value in store.raw_items(journal):
        read += 1
        try:
            record = decode_record(value, journal.value, key)
        except CorruptRecord as corrupt:
            problems.append(f"{kind} {_seq_of(key)}: {corrupt.problem}")
            continue
        if key != seq_key(record.seq) or not 0 < record.seq < next_seq:
            problems.append(f"{kind} at {_seq_of(key)} holds seq {record.seq}")
    counted = store.count(journal)
    if read != counted:
        problems.append(f"{counted} {kind}s counted, {read} readable")
    return problems


def read_identity(path: Path) -> str | None:
    try:
        return (path / IDENTITY_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def write_identity(path: Path, journal_id: str) -> None:
    """Write `journal.id` durably (mrs.storage.atomic_file: a new file renamed into
    place, then the directory synced), so a crash leaves either no file or the whole id."""
    replace_file(path / IDENTITY_FILE, (journal_id + "\n").encode())


def _cut_short(data: Path, size: int) -> str | None:
    """Why the file is shorter than its newest meta page says (None if it is not, or
    no meta page can be read: the walk then says what is wrong)."""
    with open(data, "rb") as file:
        head = file.read(_PAGE_SIZE_AT + _META_PAGE_SIZE.size)
        if len(head) < _PAGE_SIZE_AT + _META_PAGE_SIZE.size:
            return f"it is {size} bytes, shorter than an LMDB header"
        (page_size,) = _META_PAGE_SIZE.unpack_from(head, _PAGE_SIZE_AT)
        if _META_MAGIC.unpack_from(head, _MAGIC_AT)[0] != _LMDB_MAGIC or not page_size:
            return None
        newest: tuple[int, int] | None = None  # (txnid, last page)
        for page in (0, 1):
            file.seek(page * page_size)
            meta = file.read(_LAST_PAGE_AT + _META_LAST_PAGE.size)
            if len(meta) < _LAST_PAGE_AT + _META_LAST_PAGE.size:
                continue
            if _META_MAGIC.unpack_from(meta, _MAGIC_AT)[0] != _LMDB_MAGIC:
                continue
            last_page, txnid = _META_LAST_PAGE.unpack_from(meta, _LAST_PAGE_AT)
            if newest is None or txnid > newest[0]:
                newest = (txnid, last_page)
    if newest is None:
        return None
    needed = (newest[1] + 1) * page_size
    if size < needed:
        return f"it is {size} bytes, shorter than the {needed} it had (cut short)"
    return None


def _seq_of(key: bytes) -> str:
    return str(int.from_bytes(key, "big")) if len(key) == 8 else key.hex()


MOVE_ASIDE = "move the directory aside to start an empty journal"


def refused(path: Path, problem: str, hint: str = MOVE_ASIDE) -> JournalFailed:
    """The one line an application (and its operator) gets: nothing was sent from
    the journal and nothing in it was changed."""
    return JournalFailed(
        Status.JOURNAL_FAIL,
        f"client SAF journal {path} is damaged: {problem}; nothing was sent from it ({hint})",
    )
