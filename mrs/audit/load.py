"""Read the journals of some groups into ONE Arrow table on the driver, for Spark.

Why: with a local master the audit's cost was fixed cost, not work (34-46 s for 112
or 5,300 records): every `mrs-pcj`/`mrs-dlj` read started Spark Python workers to
plan and to scan, once per journal and again per action. Reading the journals here,
with the very reader the data source runs (`mrs.audit.source.JournalReader`, so a
change to what a source reads is a change here too), and handing Spark one table
makes the audit one plan over one in-memory relation: no Python worker at all.

What is read: the SAF, DQF, DLJ and PCJ of every group named, in that order, then
each group's PCJ archive (`mrs pcj archive`'s Parquet files: `[group.ops]
pcj_archive_dir`, by default `DATA_DIR/pcj-archive`) as PCJ rows. On a running group
a message moves SAF -> DQF -> DLJ or PCJ -> archive; reading in that order means a
message that moves during the audit is seen twice (a duplicate to explain), never
missed. The body column is dropped (the audit reports `body_size`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from journals import Journal
from mrs.audit.columns import EXACT_SCHEMA, EXACT_TIMES, SCHEMA
from mrs.audit.command import AuditJournalDamaged

if TYPE_CHECKING:
    from mrs.config.schema import GroupConfig

READ_ORDER = (Journal.SAF, Journal.DQF, Journal.DLJ, Journal.PCJ)
"""SAF before DQF before DLJ and PCJ: the way a message moves (module doc)."""
AUDIT_SCHEMA = pa.schema([f for f in SCHEMA if f.name != "body"])
EXACT_AUDIT_SCHEMA = pa.schema([f for f in EXACT_SCHEMA if f.name != "body"])
"""The audit's columns and each time to the nanosecond (`columns.EXACT_TIMES`): what
`--trail` prints, the very instant `mrs dump` and `mrs jplay` read back."""


def read_journals(
    sources: dict[str, str],
    journals: tuple[Journal, ...] = READ_ORDER,
    progress: Callable[[str], None] | None = None,
    archived: bool | None = None,
    exact_times: bool = False,
) -> pa.Table:
    """Every record of `journals` in the groups `sources` names (the data source's
    options: `config` + `groups`, or `paths`), body dropped, corrupt rows included;
    with `archived` (default: when the PCJ is read) the PCJ archives' rows too; with
    `exact_times` the times to the nanosecond too (`EXACT_AUDIT_SCHEMA`)."""
    from mrs.audit.source import JournalReader

    schema = EXACT_AUDIT_SCHEMA if exact_times else AUDIT_SCHEMA

    batches: list[pa.RecordBatch] = []
    live_pcj: list[pa.RecordBatch] = []
    for index, journal in enumerate(journals):
        options = {key.lower(): value for key, value in sources.items()}
        if index:  # the first read waited for in-flight commits; the rest start later
            options["snapshotsettlems"] = "0"
        reader = JournalReader(journal.value, options)
        reader.exact_times = exact_times
        before = len(batches)
        for partition in reader.partitions():
            for batch in reader.read(partition):
                batches.append(batch.drop_columns(["body"]) if "body" in batch.schema.names
                               else batch)  # fmt: skip
                if journal is Journal.PCJ:
                    live_pcj.append(batches[-1])
        if progress is not None:
            rows = sum(b.num_rows for b in batches[before:])
            progress(f"read {journal.value.upper()}: {rows:,} records")
    if Journal.PCJ in journals if archived is None else archived:
        live = pa.Table.from_batches(live_pcj) if live_pcj else None
        batches.extend(read_archives(sources, progress, live=live, schema=schema))
    if not batches:
        return schema.empty_table()
    return pa.Table.from_batches([b.cast(schema) for b in batches], schema)


PATHS_CONFIG = "pathsconfig"
"""The sources' key for a `--config` given with `--data-dir`: the bus config whose
`[group.ops] pcj_archive_dir` says where each directory's group keeps its PCJ
archive. The data source ignores it (its paths name their own groups)."""


def archive_dirs(sources: dict[str, str]) -> list[tuple[Path, int, int | None]]:
    """(PCJ archive directory, group, the group whose rows to read there or None for
    all) of each group `sources` names: its config's `pcj_archive_dir` (relative to
    its data_dir), else `DATA_DIR/pcj-archive` (the group as `configured_groups`
    finds it). Why: with `--data-dir` the config's `pcj_archive_dir` was ignored, so
    every message a group so configured had archived was left out of the audit, unsaid.

    A replicated group's archive is each of its instances' (`pcj_archive_dir` of each
    instance's data_dir; the same directory once when it is absolute), after the
    directory's own: the active archives into its own and deletes from every
    instance's PCJ, so a replica's directory (or the active's after a failover) read
    with its own archive alone had every message archived elsewhere missing, and the
    audit's answer depended on which in-sync instance was pointed at. Another
    instance's directory that is not on this machine is skipped, as a missing one is."""
    from mrs.config.ops import OpsConfig

    found: list[tuple[Path, int, int | None]] = []
    for data_dir, group, configured in configured_groups(sources):
        ops = configured.ops if configured is not None else OpsConfig()
        only = configured.id if configured is not None else None  # a dir may be shared
        dirs = [data_dir]
        if configured is not None:
            dirs += [Path(instance.data_dir) for instance in configured.instances]
        archives = dict.fromkeys(ops.archive_dir(d).resolve() for d in dirs)
        found.extend((archive, group, only) for archive in archives)
    return found


def configured_groups(sources: dict[str, str]) -> list[tuple[Path, int, GroupConfig | None]]:
    """(data dir, group, its `GroupConfig` or None) of each group `sources` names.
    The config is `config` (with `groups`) or `PATHS_CONFIG` (`--data-dir` with
    `--config`): a directory is then the group whose data_dir (or an instance's) it
    is, else the group its journal says; without a config nothing is known (None).
    The one answer to "which group of the config is this directory" for every part of
    the audit that reads the config (its PCJ archive, its notes)."""
    from mrs.audit.source import resolve_sources

    options = {key.lower(): value for key, value in sources.items()}
    config = options.get("config") or options.get(PATHS_CONFIG)
    bus = None
    if config:
        from mrs.config.bus import load_config

        bus = load_config(config)
    found = []
    for path, group in resolve_sources(options):
        data_dir = Path(path)
        if data_dir.name == "journals" and (data_dir / "data.mdb").is_file():
            data_dir = data_dir.parent
        configured = None
        if bus is not None:
            configured = (None if "config" in options else _group_of_dir(bus, data_dir)) \
                or bus.groups.get(group)  # fmt: skip
        found.append((data_dir, group, configured))
    return found


def _group_of_dir(bus, data_dir: Path) -> GroupConfig | None:
    """The config's group whose data_dir, or one of whose instances' data_dir, is
    `data_dir`; None if none is."""
    here = data_dir.resolve()
    for group in bus.groups.values():
        dirs = [group.data_dir, *(instance.data_dir for instance in group.instances)]
        if any(Path(d).resolve() == here for d in dirs):
            return group
    return None


class ArchiveUnreadable(AuditJournalDamaged):
    """A PCJ archive file that pyarrow cannot read: one line naming the directory,
    exit status 1, as a damaged journal is."""


def read_archives(
    sources: dict[str, str],
    progress: Callable[[str], None] | None = None,
    live: pa.Table | None = None,
    schema: pa.Schema = AUDIT_SCHEMA,
) -> list[pa.RecordBatch]:
    """The archived PCJ records of each group, as PCJ rows (body dropped). Without
    them every message `mrs pcj archive` (or the server's automatic archive) had moved
    out of the PCJ counted as missing, and was no longer confirmed, in the report.

    A record also in `live` (the live PCJ's rows: same group and seq) is left out: an
    archive run stopped after writing its file and before its deletes (the next run
    finishes them) leaves it in both places, and it is one message, read from the
    live PCJ as the export reads it. Why: the report counted it confirmed twice, a
    "duplicate" held in `pcj:1` and `pcj:1`, and a correlation id confirmed twice.
    With `EXACT_AUDIT_SCHEMA`, a time an archive keeps to the microsecond only is
    that microsecond in ns."""
    batches: list[pa.RecordBatch] = []
    read: dict[int, list[pa.Array]] = {}  # group -> seqs read from its other archives
    for directory, group, only in archive_dirs(sources):
        if not directory.is_dir():
            continue
        try:
            table = _archived_rows(directory, only, schema)
        except (pa.ArrowException, OSError) as error:
            raise ArchiveUnreadable(
                f"PCJ archive {directory}: not readable as Parquet ({error}); "
                "move the damaged file aside and audit again"
            ) from None
        if table.num_rows and "seq" in table.schema.names:
            if live is not None:
                table = _not_live(table, group, live)
            table = _not_read(table, read.setdefault(group, []))
        rows = table.num_rows
        group_column = pa.array([group] * rows, pa.int32())  # as the live PCJ's rows
        columns = {name: table[name] for name in table.schema.names}
        for moment, exact in EXACT_TIMES.items():
            if exact in schema.names and exact not in columns and moment in columns:
                micros = columns[moment].cast(pa.int64())
                columns[exact] = pc.multiply(micros, pa.scalar(1000, pa.int64()))
        arrays = [
            group_column if name == "group" else columns.get(name, pa.nulls(rows, kind))
            for name, kind in zip(schema.names, schema.types, strict=True)
        ]
        batches.extend(pa.Table.from_arrays(arrays, schema=schema).to_batches())
        if progress is not None:
            progress(f"read PCJ archive {directory}: {rows:,} records")
    return batches


def _not_read(table: pa.Table, read: list[pa.Array]) -> pa.Table:
    """The rows of `table` whose seq is in none of `read` (the seqs already read from
    the group's other archive directories); their seqs are added to `read`. A
    replicated group's chunk cut by a failover between its files and its delete is
    archived again by the next active (the same seqs in two instances' archives):
    one message."""
    if read:
        seen = pa.chunked_array(read, pa.int64()).combine_chunks()
        table = table.filter(pc.invert(pc.is_in(table["seq"], value_set=seen)))
    read.append(table["seq"].combine_chunks().cast(pa.int64()))
    return table


def _not_live(table: pa.Table, group: int, live: pa.Table) -> pa.Table:
    """The rows of one group's archive whose seq is not in that group's live PCJ."""
    mine = live.filter(pc.equal(live["group"], group))["seq"]
    if not len(mine):
        return table
    return table.filter(pc.invert(pc.is_in(table["seq"], value_set=mine.combine_chunks())))


def archive_files(sources: dict[str, str]) -> list[tuple[int, list[Path], int | None]]:
    """(group, its PCJ archive's Parquet files, the group whose rows to read in them
    or None for all: `archive_dirs`) of each group `sources` names that has any,
    each file's footer read first: a damaged one is one line
    (`ArchiveUnreadable`), not a failed Spark job. Hidden and `_` files are skipped,
    as pyarrow and Spark skip them (an archive run's `.NAME.tmp` in flight)."""
    import pyarrow.parquet as pq

    found = []
    for directory, group, only in archive_dirs(sources):
        if not directory.is_dir():
            continue
        files = archive_parquet_files(directory)
        for path in files:
            try:
                pq.read_metadata(path)
            except (pa.ArrowException, OSError) as error:
                raise ArchiveUnreadable(
                    f"PCJ archive {directory}: not readable as Parquet ({error}); "
                    "move the damaged file aside and audit again"
                ) from None
        if files:
            found.append((group, files, only))
    return found


def archive_parquet_files(directory: Path) -> list[Path]:
    """The Parquet files of a PCJ archive directory, named as `mrs pcj archive` names
    them (`*.parquet`); hidden and `_` files are skipped, as pyarrow and Spark skip
    them (an archive run's `.NAME.tmp` in flight). Why the suffix for the report too:
    it read every other file there as well, so a note an operator left beside the
    archive (a README) failed the audit, the note named a "damaged file", while the
    export, reading `*.parquet` only, went on."""
    return sorted(
        path for path in directory.rglob("*.parquet")
        if path.is_file()
        and not any(part.startswith((".", "_")) for part in path.relative_to(directory).parts)
    )  # fmt: skip


def _archived_rows(directory: Path, group: int | None,
                   schema: pa.Schema = AUDIT_SCHEMA) -> pa.Table:  # fmt: skip
    """The audit's columns of the archive's files (of `group` only, if given: a
    `pcj_archive_dir` may be shared), cast to the audit schema's types."""
    files = [str(path) for path in archive_parquet_files(directory)]
    dataset = ds.dataset(files, format="parquet", partitioning="hive",
                         partition_base_dir=str(directory))  # fmt: skip
    names = [n for n in schema.names if n in dataset.schema.names and n != "group"]
    where = None
    if group is not None and "group" in dataset.schema.names:
        where = ds.field("group") == group
    table = dataset.to_table(columns=names, filter=where)
    return table.cast(pa.schema([schema.field(name) for name in names]))


def queue_names(config_path: str | None) -> dict[str, str]:
    """ "GROUP.QUEUE" -> "GROUP.NAME" for every named queue of the bus config."""
    if not config_path:
        return {}
    from mrs.config.bus import load_config

    bus = load_config(config_path)
    names: dict[str, str] = {}
    for group_id, group in bus.groups.items():
        for queue_id, queue in group.queues.items():
            if queue.name:
                names[f"{group_id}.{queue_id}"] = f"{group_id}.{queue.name}"
    return names


def unjournaled_confirm_notes(sources: dict[str, str]) -> list[str]:
    """A note per audited group of the config whose confirms are not all journaled
    (`pcj_default = false`): there, a confirm without FORCE_JRN leaves no record, and
    the audit counts that message as missing. Without a config nothing is known. The
    groups are `configured_groups`': with `--data-dir` and `--config` the note was
    left out, as only `--config` alone was looked at."""
    ids = dict.fromkeys(
        configured.id for _, _, configured in configured_groups(sources)
        if configured is not None and not configured.pcj_default
    )  # fmt: skip
    return [
        f"group {g} has pcj_default = false: a confirm without FORCE_JRN writes no PCJ "
        "record, so its message counts as missing here"
        for g in ids
    ]
