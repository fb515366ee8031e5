"""Read a journal environment in a child process, so a corrupt file cannot kill us.

Why a child: LMDB trusts its file. A damaged page can make it raise (a traceback at
start-up) or fail an assertion and abort() the whole process (SIGABRT) — no Python
handler runs. So whoever must survive a damaged journal (the server before it opens
its journals, `mrs journal verify`, `mrs journal salvage`) lets a child walk it and
reads the child's report; a child that aborts is just a report of its own.

The child (`python -m mrs.storage.journal_check PATH [--from DB --after KEY] [--reverse]
[--records]`) opens the environment read-only, walks every named database (in key
order, or in reverse) and writes msgpack items to stdout:
`["db", name]`, `["item", key, value]` (with --records), `["end", name, count]`,
`["error", message]` for an LMDB error it could catch, and, after a whole walk,
`["inconsistent", name, problem]` for each way the databases disagree with the
counts the last commit stamped (journals.dqf_index), the DQF with its key index,
or a SAF record with its key: damage LMDB itself cannot see, as a flipped key bit
or a page that lost entries, which would otherwise strand records where nothing
looks for them.
"""

from __future__ import annotations

import io
import operator
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import msgpack

from journals.batch import JournalError
from journals.lock_file import check_beside_owner
from mrs.limits import JOURNAL_PROBLEMS_PER_CHECK_MAX, JOURNAL_WALK_TIMEOUT_S

FLUSH_EVERY = 64
DATABASES = ("saf", "dqf", "dlj", "pcj", "meta", "marks", "notices", "dedupe")
INDEXES = ("dqf-keys",)
"""Walked and held against their databases, never copied out: a store rebuilds them
(journals.dqf_index)."""


# ---------------------------------------------------------------------- the child
def _walk(
    path: str, records: bool, start_db: str | None, after: bytes | None, reverse: bool
) -> int:
    import lmdb

    out = sys.stdout.buffer
    packer = msgpack.Packer()

    def emit(*item: object) -> None:
        out.write(packer.pack(list(item)))

    try:
        try:
            env = lmdb.open(path, readonly=True, lock=True, max_dbs=16, subdir=True)
        except lmdb.Error:
            env = lmdb.open(path, readonly=True, lock=False, max_dbs=16, subdir=True)
        names = list(DATABASES) + list(INDEXES)
        walked: dict[str, int] = {}
        with _following_growth(env, env.begin) as txn:
            walk_txn_id = txn.id()  # the snapshot the walk starts from
        if start_db is not None:
            names = names[names.index(start_db) :]
        for name in names:
            try:
                db = _following_growth(env, partial(env.open_db, name.encode(), create=False))
            except lmdb.NotFoundError:
                continue
            emit("db", name)
            out.flush()
            if not records and not reverse and start_db is None:
                walked[name] = _touch_all(env, db)
                emit("end", name, walked[name])
                out.flush()
                continue
            count = 0
            with _following_growth(env, partial(env.begin, db=db, buffers=False)) as txn:
                cursor = txn.cursor(db)
                if reverse:
                    positioned = cursor.last()
                    step = cursor.prev
                else:
                    positioned = (
                        cursor.set_range(after + b"\x00")
                        if after is not None and name == start_db
                        else cursor.first()
                    )
                    step = cursor.next
                while positioned:
                    key, value = cursor.item()
                    if records:
                        emit("item", key, value)
                    count += 1
                    if count % FLUSH_EVERY == 0:
                        out.flush()  # what was read survives a crash on the next page
                    positioned = step()
            emit("end", name, count)
            out.flush()
            walked[name] = count
        if start_db is None and not reverse:
            for name, problem in cross_check(env, walked, walk_txn_id):
                emit("inconsistent", name, problem)
    except lmdb.Error as error:
        emit("error", f"{type(error).__name__}: {error}")
        out.flush()
        return 3
    out.flush()
    return 0


MAP_GROWTHS_FOLLOWED_MAX = 8
"""How many times one step of a walk follows a map the server grew meanwhile."""


def _following_growth(env, begin: Callable[[], Any]) -> Any:
    """`begin()` (a read transaction, or a database opened in one); if a running
    server grew the map since the walk opened it (MDB_MAP_RESIZED), the map is taken
    at its new size and `begin()` tried again, as often as the server grows it
    meanwhile (MAP_GROWTHS_FOLLOWED_MAX). Before, `mrs journal verify` beside a busy
    group reported its journal DAMAGED: a second growth during one step, or one
    during the cross-check's `open_db`s, which did not follow it."""
    import lmdb

    for _ in range(MAP_GROWTHS_FOLLOWED_MAX):
        try:
            return begin()
        except lmdb.MapResizedError:
            env.set_mapsize(0)  # no transaction is open here: LMDB takes the file's size
    return begin()  # a map grown this often meanwhile: its error is the verdict


def _touch_all(env, db) -> int:
    """Walk every entry without copying it (the start-up check: a million 1 KiB
    records in half the time): touching each value's first and last byte is what
    faults here, in the child, where a damaged page or size points outside the map."""
    count = 0
    with _following_growth(env, partial(env.begin, db=db, buffers=True)) as txn:
        for value in txn.cursor(db).iternext(keys=False, values=True):
            if value:
                value[0] + value[-1]  # noqa: B018 - read for the fault, not the value
            count += 1
    return count


FILED_AT_START = ("saf", "dlj")
"""Whose records the start-up check holds against their keys (the DQF's through its
index): a misfiled one is sent to the wrong group, or a dead letter the handler
cannot delete. Not the PCJ: an audit trail of any size, whose misfiled record is
still read (under another seq); `mrs journal verify` checks it."""


def cross_check(
    env, walked: dict[str, int], walk_txn_id: int | None = None
) -> list[tuple[str, str]]:
    """(database, problem) for every way the environment disagrees with itself:
    entry counts against the stamp of the last commit, DQF keys against the key
    index, SAF and DLJ records against their keys; and the free-page list every write reads
    (journals.freelist). Only the last when the last commit did not stamp its counts
    (written by something else: the store rebuilds the index)."""
    import lmdb

    from journals import dqf_index, freelist

    with _following_growth(env, env.begin) as txn:
        problems = [
            ("freelist", p) for p in freelist.problems(Path(env.path()) / "data.mdb", txn.id())
        ]
    try:
        index_db = _following_growth(env, partial(env.open_db, dqf_index.INDEX_DB, create=False))
    except lmdb.NotFoundError:
        return problems
    dbs = {}
    for name in DATABASES:
        try:
            dbs[name] = _following_growth(env, partial(env.open_db, name.encode(), create=False))
        except lmdb.NotFoundError:
            dbs[name] = None
    with _following_growth(env, env.begin) as txn:
        stamped = dqf_index.read_stamp(txn, index_db)
        if stamped is None:
            return problems
        if walk_txn_id is not None and txn.id() != walk_txn_id:
            # A server committed during the walk (verify beside a running group): hold
            # the stamp against this one snapshot's counts, not the walk's many.
            handles = {**dbs, dqf_index.INDEX_DB.decode(): index_db}
            walked = {n: txn.stat(db)["entries"] for n, db in handles.items() if db is not None}
        for name, count in stamped.items():
            if walked.get(name, 0) != count:
                found = walked.get(name, 0)
                problems.append((name, f"{found} entries where its last commit left {count}"))
        index_name = dqf_index.INDEX_DB.decode()
        if walked.get(index_name, 0) != stamped["dqf"] + 1:
            found = walked.get(index_name, 0) - 1
            problems.append((index_name, f"{found} keys for {stamped['dqf']} DQF records"))
        if dbs["dqf"] is not None:
            problems += [("dqf", p) for p in _index_disagreements(txn, dbs["dqf"], index_db)]
        for name in FILED_AT_START:
            if dbs[name] is not None:
                problems += [(name, p) for p in misfiled(txn.cursor(dbs[name]).iternext(), name)]
    return problems


def _index_disagreements(txn, dqf_db, index_db) -> list[str]:
    """How the DQF's keys differ from its key index's (both read in key order: a key
    whose bits flipped is in one and not the other, or out of order in its page)."""
    from journals import dqf_index, split_key

    def index_keys():
        cursor = txn.cursor(index_db)
        return cursor.iternext(values=False) if cursor.set_range(dqf_index.FIRST_KEY) else iter(())

    def dqf_keys():
        return txn.cursor(dqf_db).iternext(values=False)

    if all(map(operator.eq, dqf_keys(), index_keys())):  # the common case, at C speed
        return []
    in_dqf, in_index = set(dqf_keys()), set(index_keys())

    def named(key: bytes) -> str:
        queue, seq = split_key(key) if len(key) == 12 else (None, -1)
        return f"key {key.hex()} (queue {queue} seq {seq})"

    problems = [
        f"{named(k)} is in the DQF, not in its key index" for k in sorted(in_dqf - in_index)
    ]
    problems += [
        f"{named(k)} is in the key index, not in the DQF" for k in sorted(in_index - in_dqf)
    ]
    return problems[:JOURNAL_PROBLEMS_PER_CHECK_MAX] or [
        "the DQF's keys are out of order (a damaged page)"
    ]


def misfiled(items, journal: str) -> list[str]:
    """Records of `journal` (key, value pairs) that decode but are not filed under
    their own key (journals.keys.filing_problem); a record that does not decode is
    reported where it is read, not here."""
    from journals import CorruptRecord, decode_record
    from journals.keys import filing_problem

    problems = []
    for key, value in items:
        try:
            record = decode_record(value, journal, key)
        except CorruptRecord:
            continue
        problem = filing_problem(journal, key, record.seq, record.target_group, record.target_queue)
        if problem is not None:
            problems.append(problem)
            if len(problems) >= JOURNAL_PROBLEMS_PER_CHECK_MAX:
                break
    return problems


EMPTY_DATA_FILE = "the data file is empty (0 bytes): it holds no LMDB environment"
"""The damage reported for a data file of no bytes."""


def _is_empty(path: str) -> bool:
    """True when the environment's data file has no bytes. Why: opened read-only, LMDB
    takes an empty file for a new environment, fails to write its first pages, and
    says only "Bad file descriptor": `mrs serve`, `mrs dump` and `mrs journal verify`
    passed that on as the damage, which names no file and sounds like a bug."""
    try:
        return os.path.getsize(os.path.join(path, "data.mdb")) == 0
    except OSError:  # gone, or not ours to read: LMDB's open says which
        return False


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    path = args.pop(0)
    records = "--records" in args
    reverse = "--reverse" in args
    start_db = args[args.index("--from") + 1] if "--from" in args else None
    after = bytes.fromhex(args[args.index("--after") + 1]) if "--after" in args else None
    if _is_empty(path):
        sys.stdout.buffer.write(msgpack.packb(["error", EMPTY_DATA_FILE]))
        return 3
    return _walk(path, records, start_db, after, reverse)


# ---------------------------------------------------------------------- the parent
@dataclass
class Walk:
    """What one child walk reported."""

    items: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    failure: str | None = None
    """None if the child walked everything; else how it failed (error, signal)."""
    failed_in: str | None = None
    """The database being walked when it failed."""
    inconsistencies: list[tuple[str, str]] = field(default_factory=list)
    """(database, problem): where the databases disagree (`cross_check`)."""


def walk(
    journals_path: Path,
    *,
    records: bool = False,
    start_db: str | None = None,
    after: bytes | None = None,
    reverse_db: str | None = None,
    timeout_s: float = JOURNAL_WALK_TIMEOUT_S,
) -> Walk:
    """Walk a journal environment in a child process and collect its report.
    JournalError, before any child runs, if a live owner's lock.mdb was deleted: the
    child's read would make a new one its owner never sees (journals.lock_file)."""
    check_beside_owner(Path(journals_path))
    command = [sys.executable, "-m", "mrs.storage.journal_check", str(journals_path)]
    if records:
        command.append("--records")
    if reverse_db is not None:
        command += ["--from", reverse_db, "--reverse"]
    elif start_db is not None:
        command += ["--from", start_db]
        if after is not None:
            command += ["--after", after.hex()]
    result = Walk()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    ) as child:
        try:
            stdout, stderr = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            stdout, stderr = child.communicate()
            result.failure = f"reading it took over {timeout_s:g} s"
    current: str | None = None
    # Read from the bytes, not fed whole: msgpack's default buffer (100 MiB) refused a
    # journal holding more records than that. No item is longer than the whole.
    unpacker = msgpack.Unpacker(io.BytesIO(stdout), raw=False, max_buffer_size=len(stdout) + 1)
    try:
        for item in unpacker:
            kind = item[0]
            if kind == "db":
                current = item[1]
                if reverse_db is not None and current != reverse_db:
                    break
            elif kind == "item":
                result.items.append((current, item[1], item[2]))
            elif kind == "end":
                result.counts[item[1]] = item[2]
                current = None
                if reverse_db is not None:
                    break
            elif kind == "error":
                result.failure = item[1]
            elif kind == "inconsistent":
                result.inconsistencies.append((item[1], item[2]))
    except (ValueError, msgpack.UnpackException):
        pass  # the child died mid-item: what came before stands
    if result.failure is None and child.returncode != 0:
        if child.returncode < 0:
            name = signal.Signals(-child.returncode).name
            result.failure = f"LMDB crashed reading it ({name})"
        else:
            tail = stderr.decode(errors="replace").strip().splitlines()
            result.failure = tail[-1] if tail else f"exit status {child.returncode}"
    result.failed_in = current if result.failure is not None else None
    return result


def verify_before_open(journals_path: Path, *, unreadable_only: bool = False) -> str | None:
    """None if the environment can be opened and walked; else one line naming the
    file and the damage (for the server to refuse to start with). `unreadable_only`
    (a tool about to read it: `mrs dump`, `mrs jplay`, `mrs pcj archive`): only damage
    LMDB cannot read past (it would raise or kill the reader, e.g. SIGBUS on a file
    cut short), not databases that disagree with each other, which a reader shows.
    Also the line of a refusal to read beside a live owner whose lock.mdb was deleted
    (journals.lock_file): not damage, but no reader may open them either."""
    data_file = Path(journals_path) / "data.mdb"
    if not data_file.exists():
        return None
    if not os.access(data_file, os.R_OK):
        return f"journal {data_file} cannot be read (permission denied)"
    try:
        report = walk(Path(journals_path))
    except JournalError as refused:  # beside an owner whose lock.mdb was deleted
        return str(refused)
    if report.failure is not None:
        where = f" (in its {report.failed_in} database)" if report.failed_in else ""
        damage = f"{where}: {report.failure}"
    elif report.inconsistencies and not unreadable_only:
        name, problem = report.inconsistencies[0]
        more = len(report.inconsistencies) - 1
        damage = f" (in its {name} database): {problem}" + (f" (and {more} more)" if more else "")
    else:
        return None
    return damaged_line(Path(journals_path), damage)


def damaged_line(journals_path: Path, damage: str) -> str:
    """The one line for a damaged journal environment: the file, the damage, and the
    commands that report it and copy out every intact record."""
    data_dir = journals_path.parent if journals_path.name == "journals" else journals_path
    return (
        f"journal {journals_path / 'data.mdb'} is damaged{damage}; "
        f"run `mrs journal verify --data-dir {data_dir}` and "
        "`mrs journal salvage` to copy out every intact record"
    )


if __name__ == "__main__":
    sys.exit(main())
