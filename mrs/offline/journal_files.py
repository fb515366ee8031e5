"""Find and read a group's journals from the shell, the way the server finds them.

Why a module of its own: `mrs dump` and `mrs jplay` must open exactly the LMDB
environment the server of group N writes (`data_dir/journals` from the bus
config), or a copy of it (`--data-dir`), without ever creating an empty one by
mistake, and read it in key order from one snapshot. The DLJ and PCJ are keyed
by seq, so a `--seq` selection starts at its first key instead of the first record.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import lmdb

from journals import JournalError, JournalStore
from mrs.config.bus import BusConfig, ConfigError, GroupConfig, load_config
from mrs.errors import OperatorError
from mrs.exit_status import EXIT_RUNTIME, EXIT_USAGE, CommandError
from mrs.limits import GROUP_ID_MAX, GROUP_ID_MIN
from mrs.storage.journal_check import verify_before_open
from mrs.storage.journal_scan import find_journals, read_only_map_bytes

"""`mrs journal repair` sizes its copy from it."""

JOURNALS_DIRNAME = "journals"
REPLAY_LEDGER_DIRNAME = "replay-ledger"
"""jplay's ledger in a group data directory (mrs.tools.journal.ledger): an LMDB
environment too, but no journals."""
CLIENT_SAF_MARK = "journal.id"
"""What a client library's SAF journal keeps beside its data file (clients.saf_check)
and a group's journals never hold: how a directory given alone is told apart."""


class JournalsNotFound(OperatorError):
    """No journals where the operator pointed; the message says where we looked."""


@dataclass(frozen=True)
class GroupJournals:
    """Where a group's journals are and what we know about the group."""

    group_id: int
    data_dir: Path
    """Directory holding `journals/` (and jplay's `replay-ledger/`): the same whether
    the operator named it or its `journals/` directory."""
    journals_path: Path
    bus: BusConfig | None
    group: GroupConfig | None
    client_saf: bool = False
    """A client library's own SAF journal, not a group's journals."""

    @property
    def map_bytes(self) -> int:
        """The LMDB map size to open with: the server's own when the config says it, so
        a write from a tool (jplay --remove) never disagrees with the server's map."""
        if self.group is not None:
            return self.group.limits.journal_bytes_max
        return read_only_map_bytes(self.journals_path)


def operator_path(text: str) -> Path:
    """Every path option of every `mrs` subcommand, as argparse's `type` (one rule, so
    no command reads a path nobody typed). An empty one (`--config "$CONFIG"`, `--out
    "$DIR"`, the variable unset) is refused: `Path("")` is `.`, so `--config ""` was
    answered "config error: .: (file): cannot read: Is a directory", `mrs keys new
    --out ""` wrote a private key into whatever directory the command ran in, and
    `mrs pcj archive --dir ""` archived there and deleted the records from the PCJ.
    `~` and `~user` are expanded, as the config's paths are (mrs.config.fields
    `resolve_path`): the shell leaves `~` alone when quoted (`--dir '~/x'`) or after
    `--dir=`, and a tool that took it literally, as `./~/x`, made a directory named
    `~`, which a later `rm -r ~` typed to clean it up would take for the home."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: give a path")
    try:
        return Path(text).expanduser()
    except RuntimeError:  # "~nosuchuser/..."
        raise argparse.ArgumentTypeError(f"cannot expand the home directory in {text!r}") from None


def group_id(text: str) -> int:
    """`--group` of the journal tools, as argparse's `type`: a group id the config
    allows (1..32000). Why: `--group 0` means "no group" to the check that the
    journals are the group's own (`_refuse_another_groups`), so `mrs pcj archive
    --data-dir /srv/g1 --group 0` filed group 1's records under `group=0` in Parquet
    and deleted them from the PCJ; `--group -1` did the same with a copy whose
    journals name no group, and a number past 64 bits failed mid-archive with
    "Python int too large to convert to C long"."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a group id, got {text!r}") from None
    if not GROUP_ID_MIN <= value <= GROUP_ID_MAX:
        raise argparse.ArgumentTypeError(
            f"must be a group id {GROUP_ID_MIN}..{GROUP_ID_MAX} (the config's [[group]] id), "
            f"got {text}"
        )
    return value


def add_location_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=operator_path, help="bus configuration (TOML)")
    parser.add_argument("--group", type=group_id, help="group id whose journals to read")
    parser.add_argument(
        "--data-dir",
        type=operator_path,
        help="read this group data directory (holding journals/) instead, e.g. a copy",
    )
    parser.add_argument(
        "--instance",
        help="a replicated group's instance whose journals to read (with --config)",
    )


def replicated_journals(where: GroupJournals, store: JournalStore) -> bool:
    """Whether these are a replicated group's journals, by the config or by the marks
    replication leaves in them (`--data-dir` alone names no group). A tool must not
    delete from them: the deletion would reach no other instance, and their copies
    would come back after a failover."""
    from mrs.replication.replica import LED_KEY, POSITION_KEY

    if where.group is not None and where.group.instances:
        return True
    return any(store.meta_get(key) is not None for key in (POSITION_KEY, LED_KEY))


def unfinished_copy(store: JournalStore) -> str | None:
    """Why these journals do not hold a replicated group's records as of one moment,
    or None. A replica taking a full copy from the active empties its journals first
    and fills them a slice at a time (a copy cut off halfway, by a SIGKILL or a lost
    link, stays so until the next copy); and a whole copy, read while the active went
    on committing, mixes two moments until the replica has replayed up to the record
    it is whole at (mrs.replication.replica `holds_journals`). Read there, a tool
    showed part of the group's journals with nothing to say so (a DQF of 0 records
    while the group held 795)."""
    from mrs.replication.replica import (
        COPY_PARTIAL_KEY,
        behind_copy,
        read_copy_upto,
        read_position,
    )

    if store.meta_get(COPY_PARTIAL_KEY) is not None:
        return (
            "hold only part of a full copy of the group's journals (the copy from the "
            "active was under way, or was cut off halfway)"
        )
    upto = read_copy_upto(store)
    if behind_copy(read_position(store)[0], upto):
        return (
            f"took a full copy of the group's journals and have not yet replayed the "
            f"records up to ({upto[0]}, {upto[1]}), where it is whole: they mix two moments"
        )
    return None


def refuse_unfinished_copy(store: JournalStore, journals_path: Path) -> None:
    """Close `store` and raise CommandError (one line, exit 2) when its journals are
    a replica's unfinished copy (`unfinished_copy`): a refusal, not wrong numbers."""
    why = unfinished_copy(store)
    if why is None:
        return
    store.close()
    raise CommandError(
        f"{journals_path}: these journals {why}; {UNFINISHED_COPY_ADVICE}", EXIT_USAGE
    )


UNFINISHED_COPY_ADVICE = (
    "read the active instance's journals (`mrs status` names it), or these once this "
    "instance is in sync again"
)


def locate(args: argparse.Namespace, *, group_optional: bool = False) -> GroupJournals:
    """Resolve --config/--group/--data-dir; raises ConfigError or JournalsNotFound.

    `group_optional`: a reader (mrs dump) needs no group number to read `--data-dir`
    alone; the group is then 0 (unknown), and queue names cannot be resolved.
    """
    client_saf = getattr(args, "client_saf", None)
    if client_saf is not None:  # a client library's own SAF journal (group 0: none)
        if not (client_saf / "data.mdb").exists():
            raise JournalsNotFound(_no_client_saf(client_saf))
        return GroupJournals(0, client_saf, client_saf, None, None, client_saf=True)
    if args.group is None:
        if group_optional and args.data_dir is not None and args.config is None:
            return _at(args.data_dir, 0, None, None)
        raise JournalsNotFound("give --group N (and --config FILE, or --data-dir DIR)")
    bus = group = None
    if args.config is not None:
        bus = load_config(args.config)
        if args.group not in bus.groups:
            raise ConfigError(
                bus.path,
                "--group",
                f"no group {args.group} (groups: {', '.join(str(g) for g in bus.groups)})",
            )
        group = bus.groups[args.group]
    if args.data_dir is not None:
        data_dir = args.data_dir
    elif group is not None:
        try:
            data_dir = group.data_dir_of(getattr(args, "instance", None))
        except LookupError as error:
            raise JournalsNotFound(str(error)) from None
    else:
        raise JournalsNotFound("give --config FILE (with --group N) or --data-dir DIR")
    return _at(data_dir, args.group, bus, group)


def _no_client_saf(client_saf: Path) -> str:
    """Why `--client-saf PATH` names no client SAF journal, and what to give.
    Why: a file (its data.mdb, say) was answered "no client SAF journal in
    .../data.mdb (no data.mdb)", which did not say that a directory is wanted."""
    wanted = "give the directory the client was given as connect(..., saf_journal=DIR)"
    if client_saf.is_file():
        if client_saf.name == "data.mdb":
            return f"{client_saf} is the journal's file: {wanted}: --client-saf {client_saf.parent}"
        return f"{client_saf} is a file, not a client SAF journal: {wanted}"
    if not client_saf.exists():
        return f"no client SAF journal at {client_saf} (no such directory): {wanted}"
    return f"no client SAF journal in {client_saf} (no data.mdb): {wanted}"


def _at(
    data_dir: Path, group_id: int, bus: BusConfig | None, group: GroupConfig | None
) -> GroupJournals:
    """The journals environment in `data_dir` (or `data_dir` itself), never a new one.

    `--data-dir DIR/journals` means `--data-dir DIR`: the data directory is DIR either
    way, so jplay keeps one replay ledger (and one idempotency secret) per group, not
    a second one inside the journals directory that would replay everything again."""
    journals_path = find_journals(data_dir)  # or pointed straight at a journals environment
    if journals_path is None and data_dir.is_file():
        # `--data-dir bus.toml` was asked whether a group had ever run there
        raise JournalsNotFound(
            f"{data_dir} is a file, not a data directory: give the group's data_dir "
            f"(--config {data_dir} --group N finds it)"
            if data_dir.suffix == ".toml"
            else f"{data_dir} is a file, not a data directory: give the group's data_dir"
        )
    if journals_path is None:
        raise JournalsNotFound(
            f"no journals in {data_dir} (looked for {data_dir / JOURNALS_DIRNAME / 'data.mdb'}); "
            f"has {f'group {group_id}' if group_id else 'a group'} ever run with this data_dir?"
        )
    if journals_path == data_dir and data_dir.resolve().name == REPLAY_LEDGER_DIRNAME:
        # read as journals, each of its entries was "corrupt": an operator told to
        # salvage a group that is whole
        raise JournalsNotFound(
            f"{data_dir} is jplay's replay ledger, not a group's journals: give "
            f"--data-dir {data_dir.resolve().parent}"
        )
    client_saf = group_id == 0 and (journals_path / CLIENT_SAF_MARK).exists()
    if journals_path == data_dir and not client_saf:
        if data_dir.name == JOURNALS_DIRNAME:
            data_dir = data_dir.parent
        elif data_dir.resolve().name == JOURNALS_DIRNAME:  # `.` or `..` spelled it
            data_dir = data_dir.resolve().parent
    return GroupJournals(group_id, data_dir, journals_path, bus, group, client_saf=client_saf)


def open_store(where: GroupJournals, *, writable: bool = False) -> JournalStore:
    """Read-only unless asked: safe while the server runs (LMDB readers never block it).
    Writable beside a running server, it writes as a guest (journals.store
    `_writer_lock`): each commit synced on its own, the server's commit log untouched.

    Checked first, in a child process, as its owner checks it before opening (a
    client SAF journal as its client does, a group's journals as `mrs serve` does):
    LMDB trusts its file, and one cut short kills the reader with SIGBUS, so a
    damaged journal is refused with one line (CommandError, exit 1) naming the file
    and `mrs journal verify` / `salvage`."""
    if where.client_saf:
        from clients.errors import JournalFailed
        from clients.saf_check import check_before_open

        try:
            check_before_open(where.journals_path)
        except JournalFailed as damaged:
            raise CommandError(damaged.message) from None
    elif (damage := verify_before_open(where.journals_path, unreadable_only=True)) is not None:
        raise CommandError(damage, EXIT_RUNTIME)
    try:
        store = JournalStore(
            where.journals_path, where.map_bytes, readonly=not writable, beside_owner=True
        )
    except (lmdb.Error, JournalError) as error:
        problem = " ".join(f"{type(error).__name__}: {error}".split())
        where_text = where.journals_path
        raise CommandError(f"cannot open the journals in {where_text}: {problem}") from None
    if not where.client_saf:
        refuse_unfinished_copy(store, where.journals_path)
        _refuse_another_groups(store, where)
    return store


def _refuse_another_groups(store: JournalStore, where: GroupJournals) -> None:
    """Close `store` and raise CommandError (one line, exit 2) when its journals name
    another group than `--group` (META `journals_group`, as `mrs serve` checks them:
    mrs.storage.data_dir_owner). Why: `--data-dir /backup/g1 --group 2` was read as
    group 2's: `mrs pcj archive` filed group 1's records under `group=2` in Parquet
    (the audit then counted them for group 2), jplay sent them from group 2's queue
    with `"group": 2` in their replay header, and a selection by queue number alone
    matched nothing. Journals that name no group (a copy from before the key) pass."""
    from mrs.core.seqspace import GROUP_KEY

    recorded = store.meta_get(GROUP_KEY.decode()) if where.group_id else None
    if recorded is None:
        return
    text = bytes(recorded).decode("ascii", "replace")
    if text == str(where.group_id):
        return
    store.close()
    raise CommandError(
        f"{where.journals_path} holds the journals of group {text}, not of group "
        f"{where.group_id}: give --group {text} (with --data-dir DIR, the group whose "
        "journals DIR holds), or the data directory of group "
        f"{where.group_id}",
        EXIT_USAGE,
    )
