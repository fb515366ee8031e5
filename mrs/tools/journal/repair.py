"""`mrs journal verify` and `mrs journal salvage`: what is intact in a damaged journal.

Why: a journal can be damaged on disk (a bad sector, a bad copy, someone's editor).
The server refuses to start on one it cannot read (one line naming the file), and
the operator then needs to know what is wrong and to get every intact record out.
Both commands read the journals in child processes (`mrs.storage.journal_check`), so even an
LMDB abort cannot kill them, and never write to the damaged environment:

- `verify` walks every database and checks every record's format and checksum,
  that every record is filed under its own key (its queue or group and its seq),
  and that the databases agree with the counts their last commit stamped and the
  DQF with its key index (`mrs.storage.journal_check.cross_check`, the server's own start-up
  check); exit 0 all intact, 1 damage found, 2 bad usage.
- `salvage --to DIR` copies every readable entry into a fresh environment at
  `DIR/journals`: records that pass their checks, and the bookkeeping databases
  (meta, marks, notices, dedupe) as they are; a sound record filed under a damaged
  key is filed under its own key again. Where LMDB itself cannot read past a
  damaged page, it reads the rest of that database backwards from its end, so only
  what sits on the damaged pages is lost, and it says which key range that is.
  Start a server on the copy by pointing `data_dir` at DIR. Exit 0 copied, 1 the
  copy failed or nothing at all could be read (then nothing is written), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from journals import (
    CorruptRecord,
    Journal,
    JournalError,
    JournalStore,
    WriteBatch,
    decode_record,
    group_key,
    queue_key,
    seq_key,
)
from journals.keys import filing_problem
from mrs.config.bus import ConfigError
from mrs.offline.journal_files import GroupJournals, JournalsNotFound, locate
from mrs.storage.atomic_file import fsync_path
from mrs.storage.journal_check import DATABASES, INDEXES, walk
from mrs.storage.journal_scan import MAP_BYTES_DEFAULT
from mrs.tools.journal.ledger import copy_ledger

RECORD_DATABASES = frozenset(
    journal.value for journal in (Journal.SAF, Journal.DQF, Journal.DLJ, Journal.PCJ)
)
COPY_BATCH_MAX = 5000


@dataclass
class DatabaseReport:
    name: str
    readable: int = 0
    corrupt: list[str] = field(default_factory=list)
    damage: str | None = None
    """LMDB could not read all of it: why, and which keys were lost."""
    inconsistent: list[str] = field(default_factory=list)
    """Disagreements with the stamped counts, the key index, or a record's own key."""

    @property
    def intact(self) -> bool:
        return not self.corrupt and self.damage is None and not self.inconsistent

    def as_dict(self) -> dict:
        return {
            "database": self.name,
            "readable": self.readable,
            "corrupt": self.corrupt,
            "damage": self.damage,
            "inconsistent": self.inconsistent,
        }


@dataclass
class Survey:
    """Every readable entry of an environment, per database, and what is wrong."""

    entries: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    reports: dict[str, DatabaseReport] = field(default_factory=dict)
    doubled: dict[str, list[tuple[bytes, bytes]]] = field(default_factory=dict)
    """Entries read under a key already read with another value (`_check_records`)."""

    @property
    def intact(self) -> bool:
        return all(report.intact for report in self.reports.values())


def survey(journals_path: Path) -> Survey:
    """Read everything readable: forward; past a damaged page, backwards from the end.
    Then check every record, and re-file a sound one found under a damaged key."""
    result = Survey()
    start_db: str | None = None
    while True:
        report = walk(journals_path, records=True, start_db=start_db)
        for name, key, value in report.items:
            if name not in INDEXES:  # an index is rebuilt from its database, not copied
                entries = result.entries.setdefault(name, {})
                if entries.get(key, value) != value:  # a key twice: one is misfiled
                    result.doubled.setdefault(name, []).append((key, value))
                else:
                    entries[key] = value
        for name in report.counts:
            if name not in INDEXES:
                result.entries.setdefault(name, {})
        for name, problem in report.inconsistencies:
            result.reports.setdefault(name, DatabaseReport(name)).inconsistent.append(problem)
        if report.failure is None:
            break
        failed = report.failed_in
        if failed is None:  # could not even open it, or failed between databases
            result.reports["(environment)"] = DatabaseReport("(environment)", damage=report.failure)
            break
        if failed in INDEXES:  # the last one walked; rebuilt from the DQF by a store
            result.reports[failed] = DatabaseReport(failed, damage=report.failure)
            break
        forward = result.entries.setdefault(failed, {})
        last_forward = max(forward) if forward else None
        backward = walk(journals_path, records=True, reverse_db=failed)
        first_backward = None
        for _, key, value in backward.items:
            if last_forward is not None and key <= last_forward:
                break
            forward[key] = value
            first_backward = key
        lost_from = last_forward.hex() if last_forward is not None else "the start"
        lost_to = first_backward.hex() if first_backward is not None else "the end"
        result.reports[failed] = DatabaseReport(
            failed,
            damage=f"{report.failure}; keys after {lost_from} and before {lost_to} unreadable",
        )
        following = DATABASES[DATABASES.index(failed) + 1 :]
        if not following:
            break
        start_db = following[0]
    for name, entries in result.entries.items():
        database = result.reports.setdefault(name, DatabaseReport(name))
        if name in RECORD_DATABASES:
            _check_records(name, entries, database, result.doubled.get(name, []))
        database.readable = len(entries)
    return result


def _check_records(
    name: str,
    entries: dict[bytes, bytes],
    report: DatabaseReport,
    doubled: list[tuple[bytes, bytes]],
) -> None:
    """Drop the records that fail their checks (reported corrupt); re-file under its
    own key a sound record found under another (reported inconsistent), unless a
    record already holds that key. `doubled`: records read under a key that another
    record was read under too (a flipped key bit can give a damaged page two)."""
    refiled: dict[bytes, bytes] = {}
    extra = []
    for key, value in doubled:
        if filing_problem(name, key, *_filed_as(value)) is None:
            extra.append((key, entries[key]))  # the record read first is the misfiled one
            entries[key] = value
        else:
            extra.append((key, value))
    for key, value in list(entries.items()) + extra:
        try:
            record = decode_record(value, name, key)
        except CorruptRecord as corrupt:
            report.corrupt.append(f"key {key.hex()}: {corrupt.problem}")
            if entries.get(key) == value:
                del entries[key]
            continue
        problem = filing_problem(name, key, record.seq, record.target_group, record.target_queue)
        if problem is None:
            continue
        own = _own_key(name, key, record.seq, record.target_group, record.target_queue)
        if entries.get(key) == value:
            del entries[key]
        if own in entries or own in refiled:
            report.corrupt.append(f"{problem}; its own key {own.hex()} is taken")
            continue
        refiled[own] = value
        report.inconsistent.append(f"{problem}; salvage files it under {own.hex()}")
    entries.update(refiled)


def _filed_as(value: bytes) -> tuple[int, int, int]:
    """(seq, target group, target queue) of a record; (-1, -1, -1) if it is corrupt."""
    try:
        record = decode_record(value)
    except CorruptRecord:
        return -1, -1, -1
    return record.seq, record.target_group, record.target_queue


def _own_key(name: str, key: bytes, seq: int, target_group: int, target_queue: int) -> bytes:
    """The key a record of `name` is written under, in the layout `key` has."""
    if len(key) != 12:
        return seq_key(seq)
    return queue_key(target_queue, seq) if name == Journal.DQF else group_key(target_group, seq)


SALVAGING_DIRNAME = ".journals.salvaging"
"""Where salvage builds its copy, renamed to `journals` only once whole."""


def copy_out(
    found: Survey, destination: Path, ledger_from: Path | None = None
) -> tuple[int, str | None]:
    """Write every intact entry into a fresh environment at destination/journals, and
    jplay's replay ledger of the data directory `ledger_from` beside it
    (`copy_ledger`); (entries copied, what became of the ledger or None without one).

    Built beside it first and renamed into place once every entry is committed: a
    copy stopped part way (a full disk, Ctrl-C, a kill) was left at
    destination/journals, whose records all pass `mrs journal verify`, so the
    documented next steps (verify, move it in, serve) started the group on part of its
    messages without a word. Now a stopped copy leaves no `journals` there, and the
    next salvage into the same directory starts over. The ledger goes first, so a
    `journals` there always has its ledger beside it."""
    target = destination / "journals"
    if (target / "data.mdb").exists():
        raise FileExistsError(f"{target} already holds journals: salvage into a new directory")
    building = destination / SALVAGING_DIRNAME
    shutil.rmtree(building, ignore_errors=True)  # what a killed salvage left
    size = sum(len(k) + len(v) for e in found.entries.values() for k, v in e.items())
    try:
        copied = _copy_entries(found, JournalStore(building, max(MAP_BYTES_DEFAULT, 4 * size)))
        ledger = copy_ledger(ledger_from, destination) if ledger_from is not None else None
        os.rename(building, target)
        fsync_path(destination)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return copied, ledger


def _copy_entries(found: Survey, store: JournalStore) -> int:
    """Every intact entry committed into `store` (closed at the end); how many."""
    copied = 0
    try:
        batch = WriteBatch.empty()
        for name, entries in found.entries.items():
            for key, value in sorted(entries.items()):
                batch.put_raw(Journal(name), key, value)
                copied += 1
                if len(batch) >= COPY_BATCH_MAX:
                    store.commit_now(batch)
                    batch = WriteBatch.empty()
        if len(batch):
            store.commit_now(batch)
    finally:
        store.close()
    return copied


# ---------------------------------------------------------------------- command line
def add_journal_repair(commands) -> None:
    """Add `mrs journal verify` and `mrs journal salvage` to the `mrs` subparsers."""
    from mrs.offline.journal_files import add_location_arguments, operator_path

    journal = commands.add_parser(
        "journal",
        help="verify a group's journals, or salvage every intact record from damaged ones",
        description="Check or rescue a group's journals without writing to them. "
        "See docs/journal-repair.md.",
    )
    actions = journal.add_subparsers(dest="journal_action", required=True, metavar="ACTION")
    verify = actions.add_parser(
        "verify", help="check every database and record; exit 0 intact, 1 damaged"
    )
    add_location_arguments(verify)
    verify.add_argument("--json", action="store_true", help="the report as one JSON object")
    verify.set_defaults(run=_run_verify)
    salvage = actions.add_parser(
        "salvage", help="copy every intact record into a fresh data directory (--to DIR)"
    )
    add_location_arguments(salvage)
    salvage.add_argument(
        "--to", type=operator_path, required=True, help="new data directory to fill"
    )
    salvage.add_argument("--json", action="store_true", help="the report as one JSON object")
    salvage.set_defaults(run=_run_salvage)


def _locate(args: argparse.Namespace) -> GroupJournals | None:
    if args.group is None and args.data_dir is not None:
        args.group = 0  # a bare --data-dir needs no group number
    try:
        return locate(args)
    except (JournalsNotFound, ConfigError) as error:
        print(f"mrs journal: {error}", file=sys.stderr)
        return None


def _print(found: Survey, journals_path: Path, as_json: bool, extra: dict) -> None:
    if as_json:
        reports = [r.as_dict() for r in found.reports.values()]
        payload = {"journals": str(journals_path), "intact": found.intact, **extra}
        print(json.dumps({**payload, "databases": reports}))
        return
    for report in found.reports.values():
        state = "ok" if report.intact else "DAMAGED"
        print(
            f"{report.name:8} {report.readable:>9} readable  {len(report.corrupt):>6} corrupt  "
            f"{state}"
        )
        for line in report.corrupt[:20]:
            print(f"         corrupt {line}")
        if len(report.corrupt) > 20:
            print(f"         ... and {len(report.corrupt) - 20} more")
        if report.damage is not None:
            print(f"         LMDB: {report.damage}")
        for line in report.inconsistent[:20]:
            print(f"         inconsistent: {line}")
        if len(report.inconsistent) > 20:
            print(f"         ... and {len(report.inconsistent) - 20} more")
    verdict = "intact" if found.intact else "DAMAGED"
    print(f"{journals_path}: {verdict}" + "".join(f", {k} {v}" for k, v in extra.items()))


def _survey_or_refuse(journals_path: Path, action: str) -> Survey | None:
    """The survey; None (said in one line) when the journals cannot be read beside
    their running owner, whose lock.mdb was deleted (journals.lock_file)."""
    try:
        return survey(journals_path)
    except JournalError as refused:
        print(f"mrs journal {action}: {refused}", file=sys.stderr)
        return None


def _run_verify(args: argparse.Namespace) -> int:
    where = _locate(args)
    if where is None:
        return 2
    journals_path = where.journals_path
    found = _survey_or_refuse(journals_path, "verify")
    if found is None:
        return 1
    _print(found, journals_path, args.json, {})
    return 0 if found.intact else 1


def _run_salvage(args: argparse.Namespace) -> int:
    where = _locate(args)
    if where is None:
        return 2
    journals_path = where.journals_path
    source = journals_path.resolve()
    if args.to.resolve() == source or source in args.to.resolve().parents:
        print(
            f"mrs journal salvage: --to {args.to} is inside the damaged journals {journals_path}: "
            "salvage into a new directory outside them",
            file=sys.stderr,
        )
        return 2
    if (not_a_directory := _not_a_directory(args.to)) is not None:
        print(
            f"mrs journal salvage: --to {args.to}: {not_a_directory} is a file, not a "
            "directory: name a new directory (or an empty one) to fill",
            file=sys.stderr,
        )
        return 2
    found = _survey_or_refuse(journals_path, "salvage")
    if found is None:
        return 1
    if (unreadable := _nothing_readable(found)) is not None:
        _print(found, journals_path, args.json, {"copied": 0})
        print(
            f"mrs journal salvage: nothing to salvage: no entry of {journals_path} could be "
            f"read ({unreadable}); nothing was written to {args.to}",
            file=sys.stderr,
        )
        return 1
    try:
        copied, ledger = copy_out(found, args.to, where.data_dir)
    except FileExistsError as error:
        print(f"mrs journal salvage: {error}", file=sys.stderr)
        return 2
    except (OSError, JournalError) as error:  # a full disk, a directory it cannot write
        detail = error.strerror if isinstance(error, OSError) and error.strerror else error
        print(
            f"mrs journal salvage: cannot write the copy in {args.to}: {detail}; nothing "
            "was left there: make room (or choose another --to) and run it again",
            file=sys.stderr,
        )
        return 1
    extra: dict = {"copied": copied, "to": str(args.to / "journals")}
    if ledger is not None:
        extra["replay_ledger"] = ledger
    _print(found, journals_path, args.json, extra)
    return 0


def _nothing_readable(found: Survey) -> str | None:
    """What is wrong when damaged journals gave up no entry at all (a file that is no
    LMDB environment: random bytes, an empty data.mdb), else None. Why: salvage then
    made an empty environment at --to and ended "DAMAGED, copied 0", exit 0, and the
    documented next steps (verify: intact; swap; serve) started the group on no
    messages. An intact environment with no entries is copied as it is."""
    if found.intact or any(found.entries.values()):
        return None
    damage = [r.damage for r in found.reports.values() if r.damage is not None]
    return damage[0] if damage else "every entry failed its checks"


def _not_a_directory(path: Path) -> Path | None:
    """The nearest existing one of `path` and its parents when that is not a
    directory (a regular file: the operator's mistake), else None. Why: `--to FILE`
    (or a path under a file) surveyed the whole journal, then ended "cannot write the
    copy ...: Not a directory ... make room", exit 1, as a full disk does."""
    for place in (path, *path.parents):
        try:
            if place.exists():
                return None if place.is_dir() else place
        except OSError:  # cannot look (no permission): the copy says why it fails
            return None
    return None
