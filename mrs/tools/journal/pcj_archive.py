"""PCJ retention: move confirmed records to Parquet, then remove them from the journal.

Why: with the PCJ on, every confirmed message stays in the LMDB map until it fills
(MRS_RES_EXH). `mrs pcj archive --until TIME` (or the server's automatic policy,
`[group.ops] pcj_archive_after_s`) writes the PCJ records confirmed up to TIME to
hive-partitioned Parquet files with the audit export's writer (mrs.audit.parquet:
readable by Spark, pyarrow, DuckDB) and deletes them from the PCJ only once those
files are durable.

Nothing lost, nothing duplicated, whatever is killed when: each chunk is
1. an intent committed to the journal's META (the chunk's file prefix),
2. its Parquet files written (temporary name, fsync, rename, directory fsync),
3. its PCJ keys deleted and the intent cleared in one transaction.
A run first finishes any intent left by a killed run: the records in the files that
made it to disk are deleted (they are archived), stray temporary files are removed,
and whatever was not written stays in the PCJ for this run to archive. So a record
is in exactly one place — the PCJ or one archive file — after every step.

It runs beside a live server: LMDB serialises the two writers, each delete
transaction is short (one chunk), and the map size is the server's own.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from journals import (
    CorruptRecord,
    Journal,
    JournalStore,
    Record,
    WriteBatch,
    decode_record,
    seq_key,
)
from mrs.group.pcj_control import read_state
from mrs.storage.atomic_file import fsync_path
from mrs.storage.journal_scan import record_segment

if TYPE_CHECKING:
    from mrs.config.bus import GroupConfig
    from mrs.offline.journal_files import GroupJournals

log = logging.getLogger("mrs.tools.journal.pcj_archive")

CHUNK_RECORDS = 5000
CHUNK_BYTES = 64 << 20
"""A chunk also ends once its records hold this many stored bytes (at least one
record): 5,000 records of 1 MiB bodies were read, decoded and written at once (1.45
GB of the tool's memory for 400 of them, about 18 GB for a chunk)."""
INTENT_KEY = "pcj_archive_intent"
PREFIX_HEAD = "pcj-archive"
ARCHIVE_POLL_S = 0.2
"""How often `mrs pcj archive` on a replicated group looks for its run's summary."""
KILL_AT_ENV = "MRS_PCJ_ARCHIVE_KILL_AT"
LOCK_FILE_NAME = "pcj-archive.lock"
"""Held by a `mrs pcj archive` run in the group's data directory: one run at a time."""
"""Harness only: SIGKILL this process at a named step (intent, file, written)."""


@dataclass
class ArchiveResult:
    archived: int = 0
    files: list[str] = field(default_factory=list)
    recovered: int = 0
    """Records of a killed run's files found on disk and removed from the PCJ now."""
    corrupt_kept: int = 0
    remaining: int = 0

    def as_dict(self) -> dict:
        return {
            "archived": self.archived,
            "files": self.files,
            "recovered": self.recovered,
            "corrupt_kept": self.corrupt_kept,
            "pcj_remaining": self.remaining,
        }


class ArchiveWriteFailed(Exception):
    """A chunk's Parquet files could not be written (the directory is a file, the disk
    is full, no permission): `str()` is the one line saying why and where its records
    are. What was written of the chunk is removed and its intent cleared first."""


class ArchiveFileUnreadable(Exception):
    """A file of a killed run's chunk does not read as Parquet (damaged on disk):
    `str()` is the one line naming it. Nothing is lost: the chunk's deletes never
    committed (they clear its intent in the same transaction), so its records are
    all still in the PCJ; once the file is moved out of the archive directory, the
    next run archives them."""


def _kill_point(step: str, kill_at: str | None) -> None:
    if kill_at == step:
        os.kill(os.getpid(), signal.SIGKILL)


def archive_pcj(
    store: JournalStore,
    group_id: int,
    out_dir: Path,
    until_ns: int,
    *,
    chunk_records: int = CHUNK_RECORDS,
    kill_at: str | None = None,
    closed_only: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
) -> ArchiveResult:
    """Archive every PCJ record confirmed at or before `until_ns` (and, `closed_only`,
    in a closed segment: one before the segment the group journals in now, which no
    confirm writes any more, mrs.group.pcj_control); see the module doc. `kill_at`
    (harness only, from KILL_AT_ENV at the command's edge) SIGKILLs this process at
    that step."""
    out_dir = Path(out_dir)
    result = ArchiveResult()
    result.recovered = finish_intent(store, out_dir)
    open_segment = read_state(store, False).segment if closed_only else None
    after: bytes | None = None
    while True:
        keys: list[bytes] = []
        records = []
        page = _scan_after(store, after, chunk_records, chunk_bytes)
        for key, record in page:
            after = key
            if isinstance(record, CorruptRecord):
                result.corrupt_kept += 1
                continue
            if open_segment is not None and record_segment(record) >= open_segment:
                continue
            if (record.confirm_time_ns or record.written_time_ns) <= until_ns:
                keys.append(key)
                records.append(record)
        if keys:
            _archive_chunk(store, group_id, out_dir, keys, records, result, kill_at)
        if not page:  # a chunk cut short by chunk_bytes is not the end: read on
            break
    result.remaining = store.count(Journal.PCJ)
    return result


def _archive_chunk(
    store, group_id, out_dir, keys, records, result: ArchiveResult, kill_at: str | None
) -> None:
    """Intent, durable files, then delete + clear intent: the three steps of one chunk."""
    from mrs.audit.parquet import write_records

    prefix = f"{PREFIX_HEAD}-g{group_id}-{uuid.uuid4().hex[:16]}"
    store.commit_now(
        WriteBatch.empty().put_raw(Journal.META, INTENT_KEY.encode(), _intent(prefix, out_dir))
    )
    _kill_point("intent", kill_at)
    try:
        files = write_records(records, out_dir, group=group_id, journal="pcj", prefix=prefix)
    except Exception as error:  # pyarrow's own errors too: the chunk is undone either way
        _undo_chunk(store, prefix, out_dir, len(keys), result, error)
    _kill_point("written", kill_at)
    batch = WriteBatch.empty()
    for key in keys:
        batch.delete(Journal.PCJ, key)
    batch.delete(Journal.META, INTENT_KEY.encode())
    store.commit_now(batch)
    result.archived += len(keys)
    result.files.extend(str(path) for path in files)


def _undo_chunk(
    store: JournalStore,
    prefix: str,
    out_dir: Path,
    records: int,
    result: ArchiveResult,
    error: Exception,
) -> NoReturn:
    """A chunk whose files could not be written: remove what of them reached the disk,
    clear its intent, raise ArchiveWriteFailed. Why: the intent stayed, and the next
    run said it "finished an interrupted PCJ archive" of a run that had failed and
    lost nothing. Should a file not go away, the intent stays: the next run finishes
    the chunk (it removes from the PCJ the records in the files still there)."""
    if isinstance(error, OSError) and error.strerror:
        where = f"{error.filename}: " if error.filename else ""
        why = f"{where}{error.strerror}"
    else:
        why = " ".join(str(error).split()) or type(error).__name__
    removed = _remove_files(out_dir, prefix)
    if removed:
        store.commit_now(WriteBatch.empty().delete(Journal.META, INTENT_KEY.encode()))
    before = f"; {result.archived} records archived before it" if result.archived else ""
    left = "" if removed else "; some of its files could not be removed: the next run finishes them"
    raise ArchiveWriteFailed(
        f"cannot write the archive to {out_dir} ({why}): a chunk of {records} records "
        f"was not archived, they stay in the PCJ{before}{left}"
    ) from error


def _remove_files(out_dir: Path, prefix: str) -> bool:
    """Remove the files of a chunk's prefix under out_dir (those renamed into place and
    temporaries), durably, and the partition directories they leave empty. Whether
    every one went (False: some stay, and the chunk's intent must stay with them)."""
    removed = True
    for path in list(out_dir.rglob(f"*{prefix}-*")) if out_dir.is_dir() else []:
        try:
            path.unlink()
            fsync_path(path.parent)
        except OSError:
            removed = False
            continue
        for directory in (path.parent, path.parent.parent):  # group=N, then date=D
            if directory == out_dir or out_dir not in directory.parents:
                break
            with contextlib.suppress(OSError):  # not empty: another chunk's files
                directory.rmdir()
                fsync_path(directory.parent)
    return removed


def _scan_after(
    store: JournalStore, after: bytes | None, count_max: int, bytes_max: int
) -> list[tuple[bytes, Record | CorruptRecord]]:
    """Up to count_max (key, record) of the PCJ after `after`, about bytes_max of them
    (at least one), from one snapshot. The store's own `items_after`: the active of a
    replicated group archives through its recording store, which has no `env`."""
    page: list[tuple[bytes, Record | CorruptRecord]] = []
    for key, value in store.items_after(Journal.PCJ, b"", after, count_max, bytes_max):
        try:
            page.append((key, decode_record(value, Journal.PCJ.value, key)))
        except CorruptRecord as corrupt:
            page.append((key, corrupt))
    return page


def _intent(prefix: str, out_dir: Path) -> bytes:
    """A chunk's intent: its files' prefix and the directory they go to (JSON)."""
    directory = os.fsdecode(Path(out_dir).absolute())
    return json.dumps({"prefix": prefix, "dir": directory}).encode()


def _read_intent(value: bytes, out_dir: Path) -> tuple[str, Path]:
    """(prefix, directory) of an intent. Why the directory: a run killed while writing
    to `--dir A` and followed by one writing elsewhere (`--dir B`, the default, the
    automatic policy) looked for the killed run's files in B, found none, and left
    their records in the PCJ: the next chunk archived them a second time, in B. An
    intent of an older version holds the prefix alone: its files are in this run's."""
    text = bytes(value).decode()
    if not text.startswith("{"):
        return text, out_dir
    intent = json.loads(text)
    return intent["prefix"], Path(intent["dir"])


def finish_intent(store: JournalStore, out_dir: Path) -> int:
    """Complete what a killed run left: remove from the PCJ the records that are in its
    files on disk (in the directory that run wrote to), delete its temporary files,
    clear the intent. Returns the count."""
    intent = store.meta_get(INTENT_KEY)
    if not intent:
        return 0
    prefix, directory = _read_intent(intent, out_dir)
    seqs: list[int] = []
    files = 0
    if directory.exists():
        for path in directory.rglob(f"*{prefix}-*"):
            if path.name.startswith("."):
                path.unlink(missing_ok=True)  # a temporary file never renamed: not archived
                continue
            files += 1
            seqs.extend(_chunk_file_seqs(path, directory))
    from mrs.audit.columns import stored_seq

    batch = WriteBatch.empty()
    present = 0
    keys = [seq_key(stored_seq(seq)) for seq in seqs]  # the files hold the signed column
    # one read for the chunk (on a replicated active each read is a hop to its loop)
    for key, value in zip(keys, store.get_raw_many(Journal.PCJ, keys), strict=True):
        if value is not None:
            batch.delete(Journal.PCJ, key)
            present += 1
    batch.delete(Journal.META, INTENT_KEY.encode())
    store.commit_now(batch)
    if files:
        log.warning(
            "finished an interrupted PCJ archive (%s) in %s: %d archived records removed "
            "from the PCJ",
            prefix,
            directory,
            present,
        )
    else:  # stopped before its files reached the disk: nothing archived, nothing lost
        log.warning(
            "an interrupted PCJ archive (%s) wrote no file in %s: its records stay in the "
            "PCJ, archived by this run",
            prefix,
            directory,
        )
    return present


def _chunk_file_seqs(path: Path, directory: Path) -> list[int]:
    """The `seq` column of a killed run's file. Why the refusal: pyarrow's error ended
    every later run as an "unexpected error", the automatic policy's too, and said
    neither where the records were nor what to do."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path, columns=["seq"]).column("seq").to_pylist()
    except (pa.ArrowException, OSError) as error:
        why = " ".join(str(error).split()) or type(error).__name__
        raise ArchiveFileUnreadable(
            f"{path}, a file of an interrupted run, does not read as Parquet ({why}); its "
            f"records are still in the PCJ: move the file out of {directory} and run again"
        ) from None


# ---------------------------------------------------------------------- the command
def add_pcj_parser(commands: argparse._SubParsersAction, run) -> None:
    from mrs.offline.journal_files import add_location_arguments, operator_path

    pcj = commands.add_parser("pcj", help="PCJ retention: archive confirmed records to Parquet")
    actions = pcj.add_subparsers(dest="pcj_command", required=True, metavar="ACTION")
    archive = actions.add_parser(
        "archive",
        help="move PCJ records confirmed up to --until into Parquet files",
        description="Write the PCJ records confirmed at or before --until to Parquet "
        "(date=/group= partitions, the audit export's schema), then remove them from the "
        "PCJ once the files are durable. Safe while the server runs and if killed: run "
        "it again. Exit 0 done, 1 failed, 2 bad usage. See docs/operations.md.",
    )
    archive.add_argument(
        "--until",
        metavar="TIME",
        help="archive records confirmed at or before TIME: ISO (naive = local time), "
        "'now', or a duration back from now such as 7d or 12h",
    )
    archive.add_argument(
        "--closed",
        action="store_true",
        help="archive the records of the closed PCJ segments (before the one the group "
        "journals in now: Client.set_pcj(roll=True)); with --until, those confirmed by TIME",
    )
    archive.add_argument(
        "--dir",
        type=operator_path,
        default=None,
        help="where the Parquet files go (default: [group.ops] pcj_archive_dir, "
        "relative to data_dir: pcj-archive)",
    )
    archive.add_argument(
        "--chunk",
        type=int,
        default=None,
        help="records per step, default 5000 (one Parquet write and one delete "
        "transaction); a step also ends at 64 MiB of records, so large bodies are archived "
        "in bounded memory",
    )
    archive.add_argument("--json", action="store_true", help="the summary as one JSON object")
    add_location_arguments(archive)
    archive.set_defaults(run=run)


def run_pcj_archive(args: argparse.Namespace) -> int:
    from mrs.config.ops import OpsConfig
    from mrs.offline.journal_files import JournalsNotFound, locate
    from mrs.offline.selection import SelectionError, parse_time_ns
    from mrs.tools.cli_support import EXIT_USAGE, CommandError

    if args.until is None and not args.closed:
        raise CommandError("pcj archive: give --until TIME, --closed, or both", EXIT_USAGE)
    if args.chunk is not None and args.chunk < 1:
        raise CommandError(
            f"pcj archive: --chunk {args.chunk}: give at least 1 record per step", EXIT_USAGE
        )
    try:
        until = "now" if args.until is None else args.until
        until_ns = parse_time_ns(until, time.time_ns(), "--until")
    except SelectionError as error:
        raise CommandError(str(error), EXIT_USAGE) from None
    if (replicated := _replicated_group(args)) is not None:
        if args.dir is not None:  # else the files went elsewhere, the flag dropped unsaid
            raise CommandError(
                f"pcj archive: --dir {args.dir}: a replicated group's active writes the "
                "archive to its own [group.ops] pcj_archive_dir (docs/replication.md); "
                "give no --dir, or set pcj_archive_dir",
                EXIT_USAGE,
            )
        if args.chunk is not None:  # the active's steps are its own, as --dir
            raise CommandError(
                f"pcj archive: --chunk {args.chunk}: a replicated group's active archives "
                f"in its own steps ({CHUNK_RECORDS} records); give no --chunk",
                EXIT_USAGE,
            )
        return _archive_on_the_active(replicated, until_ns, args.closed, args.json)
    try:
        where = locate(args)
    except JournalsNotFound as error:
        raise CommandError(str(error), EXIT_USAGE) from None
    ops = where.group.ops if where.group is not None else OpsConfig()
    out_dir = (args.dir if args.dir is not None else ops.archive_dir(where.data_dir)).absolute()
    with _one_run_at_a_time(where.data_dir, where.group_id):
        try:
            result = _archive_located(where, out_dir, until_ns, args)
        except (ArchiveWriteFailed, ArchiveFileUnreadable) as error:
            raise CommandError(f"pcj archive: {error}") from None  # exit 1: failed
    if args.json:
        print(json.dumps({"group": where.group_id, "dir": str(out_dir), **result.as_dict()}))
    else:
        recovered = f"; {result.recovered} from an interrupted run" if result.recovered else ""
        corrupt = f"; {result.corrupt_kept} corrupt records kept" if result.corrupt_kept else ""
        print(
            f"archived {result.archived} PCJ records of group {where.group_id} to {out_dir} "
            f"in {len(result.files)} files{recovered}{corrupt}; "
            f"{result.remaining} records left in the PCJ"
        )
    return 0


def _archive_located(
    where: GroupJournals, out_dir: Path, until_ns: int, args: argparse.Namespace
) -> ArchiveResult:
    """`archive_pcj` on the journals the command line located (not a replicated group's)."""
    from mrs.offline.journal_files import open_store, replicated_journals
    from mrs.tools.cli_support import EXIT_USAGE, CommandError

    store = open_store(where, writable=True)
    if replicated_journals(where, store):
        store.close()
        raise CommandError(
            "pcj archive: these are a replicated group's journals; the archive deletes "
            "what it writes out, and a deletion here would not reach the other instances "
            "(give --config without --instance: the active archives, docs/replication.md)",
            EXIT_USAGE,
        )
    try:
        return archive_pcj(
            store,
            where.group_id,
            out_dir,
            until_ns,
            chunk_records=args.chunk or CHUNK_RECORDS,
            kill_at=os.environ.get(KILL_AT_ENV),  # the command's edge: harness only
            closed_only=args.closed,
        )
    finally:
        store.close()


@contextlib.contextmanager
def _one_run_at_a_time(data_dir: Path, group_id: int) -> Iterator[None]:
    """Hold the data directory's archive lock for a run. Two runs at once (an
    operator's beside the server's automatic one) each took the other's chunk intent
    for a killed run's and archived the same records twice; the second now stops."""
    from mrs.tools.cli_support import CommandError

    path = Path(data_dir) / LOCK_FILE_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise CommandError(f"pcj archive: cannot create {path}: {error.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CommandError(
                f"pcj archive: another archive run works group {group_id}'s PCJ ({path} "
                "is locked); run again once it ends"
            ) from None
        yield
    finally:
        os.close(fd)  # releases the lock


def _replicated_group(args: argparse.Namespace) -> GroupConfig | None:
    """The group when `--config` names a replicated group and no instance's journals
    were named: then the active archives (its deletes reach every instance)."""
    from mrs.config.bus import load_config

    if args.config is None or args.data_dir is not None or args.group is None:
        return None
    if getattr(args, "instance", None) is not None:
        return None
    group = load_config(args.config).groups.get(args.group)
    return group if group is not None and group.instances else None


def _archive_on_the_active(group: GroupConfig, until_ns: int, closed: bool, as_json: bool) -> int:
    """Ask the active for a run (admin `pcj_archive`), then wait for its summary in the
    group's status: a large PCJ takes longer than one request may wait. A failover
    meanwhile ends the wait (the run ended with its active: run the command again)."""
    import trio

    from clients import MrsError, connect
    from mrs.config.tls import operator_connect_options
    from mrs.tools.cli_support import CommandError

    options = operator_connect_options(group)  # the group's TLS, as `mrs admin` has it

    async def archived() -> dict:
        address = group.client_address
        async with connect(address, None, program="mrs pcj archive", **options) as client:
            active = (await client.status())["replication"]["instance"]
            started = await client.admin("pcj_archive", until_ns=until_ns, closed=closed)
            while True:
                status = await client.status()
                summary = status.get("pcj_archive_runs", {}).get(started["run"])
                if summary is not None:
                    return summary
                if (now := status["replication"]["instance"]) != active:
                    why = f"the active changed ({active} -> {now}) during the run; run it again"
                    return {"error": why}
                await trio.sleep(ARCHIVE_POLL_S)

    try:
        summary = trio.run(archived)
    except MrsError as error:  # the group's answer, as one line
        raise CommandError(f"pcj archive: {error.message}", 1) from None
    if "error" in summary:
        raise CommandError(f"pcj archive on the active: {summary['error']}", 1)
    if as_json:
        print(json.dumps(summary))
    else:
        print(
            f"archived {summary['archived']} PCJ records of group {group.id} to "
            f"{summary['dir']} (on the active) in {len(summary['files'])} files; "
            f"{summary['pcj_remaining']} records left in the PCJ"
        )
    return 0
