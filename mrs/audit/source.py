"""The `mrs-pcj` and `mrs-dlj` Spark formats: a PySpark Python data source (pyspark>=4.1).

    from mrs.audit import register
    register(spark)
    spark.read.format("mrs-pcj").load("/var/mrs/g1")                 # one data dir
    spark.read.format("mrs-pcj").load(["/var/mrs/g1", "/var/mrs/g2"])  # several
    spark.read.format("mrs-dlj").option("config", "bus.toml").option("groups", "1,2").load()

Options: `path`/`paths` or `config` + `groups` (default: every group of the config);
`group` names the group of a single path (otherwise the PCJ's records or the
directory's trailing digits tell); `recordsPerPartition` (131072);
`snapshotSettleMs` (200); `arrow` (true: Arrow batches; false: row tuples);
`batchRows` (rows per Arrow batch, 8192).

Planning (in a Spark Python worker) fixes the snapshot boundary and splits each
group's journal into key ranges (see `mrs.audit.scan`); each task reads its range
read-only with LMDB locking. Pushed filters on seq, group, the times and the
queue/group/class/type/priority columns are applied exactly while scanning, and seq
bounds narrow the key ranges themselves.
"""

from __future__ import annotations

import datetime
import itertools
import json
import logging
import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from journals import Journal
from mrs.audit import scan
from mrs.audit.columns import SCHEMA, corrupt_row, row_from_values
from mrs.errors import OperatorError

log = logging.getLogger("mrs.audit")

_SPARK_TYPES = {
    "string": StringType(),
    "int32": IntegerType(),
    "int64": LongType(),
    "bool": BooleanType(),
    "binary": BinaryType(),
    "timestamp[us, tz=UTC]": TimestampType(),
}
SPARK_SCHEMA = StructType(
    [StructField(f.name, _SPARK_TYPES[str(f.type)], nullable=True) for f in SCHEMA]
)


class SourceError(OperatorError, ValueError):
    """The options do not name a readable journal (one line, for the operator;
    status BADPARAM, under the one root `mrs.errors.MrsError`)."""


def _options(options) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def _paths(options: dict[str, str]) -> list[str]:
    paths: list[str] = []
    if "paths" in options:
        text = options["paths"]
        try:
            loaded = json.loads(text)
            paths.extend(loaded if isinstance(loaded, list) else [str(loaded)])
        except json.JSONDecodeError:
            paths.extend(p for p in text.split(",") if p)
    if options.get("path"):
        paths.append(options["path"])
    return list(dict.fromkeys(paths))


OPTION_NAMES = {"recordsperpartition": "recordsPerPartition", "batchrows": "batchRows",
                "snapshotsettlems": "snapshotSettleMs"}  # fmt: skip
"""Options by the spelling the docs give them (Spark hands them lower-cased)."""


def int_option(options: dict[str, str], key: str, default: float, minimum: int,
               kind: type = int) -> Any:  # fmt: skip
    """A number option (`kind` int or float), or a SourceError naming it: a bad value
    was Python's "invalid literal for int() with base 10: 'x'", which says neither
    which option nor what it takes (batchRows said it only inside a task's Java stack)."""
    if key not in options:
        return default
    text = options[key].strip()
    name = OPTION_NAMES.get(key, key)
    what = "a whole number" if kind is int else "a number"
    try:
        value = kind(text)
    except ValueError:
        raise SourceError(f"option {name}: not {what}: {options[key]!r}") from None
    if not math.isfinite(value):
        raise SourceError(f"option {name}: not {what}: {options[key]!r}")
    if value < minimum:
        raise SourceError(f"option {name}: {value} is below its minimum {minimum}")
    return value


def bool_option(options: dict[str, str], key: str, default: bool) -> bool:
    """`true` or `false` (any case), or a SourceError naming the option: any other
    word was read as false (`pushdown=yes` turned pushdown off, unsaid)."""
    text = options.get(key, str(default)).strip().lower()
    if text not in ("true", "false"):
        raise SourceError(f"option {key}: give true or false, not {options[key]!r}")
    return text == "true"


def group_ids(text: str, option: str) -> list[int]:
    """Group ids of a comma (or space) separated list, each once, or a SourceError
    naming them. Why once: a group named twice (`mrs audit --group 1 --group 1,2`,
    `option("groups", "1,1")`) was read twice, so each of its messages counted
    confirmed twice and was a "duplicate" held in `pcj:1, pcj:1`."""
    try:
        return list(dict.fromkeys(int(g) for g in re.split(r"[,\s]+", text) if g))
    except ValueError:
        raise SourceError(f"option {option}: not a list of group ids: {text!r}") from None


def infer_group(path: str) -> int:
    """The group of a data dir: the group its journals say wrote them (META
    `journals_group`, which a server writes with every reservation), else the target
    group of its PCJ's records (confirmed in it), else of its DQF's (waiting for its
    queues), else the directory's trailing digits, else 0. The DQF's turn: a group
    that never confirmed with journaling (every message still waiting, or
    `pcj_default = false`) in a directory named without digits read as group 0 ("in
    group 0's DQF"). META's turn, first: a group whose journals hold dead letters
    only (or nothing) in such a directory read as group 0 too ("dlj:0",
    "dead-lettered in group 0")."""
    store = scan.open_store(path)
    try:
        recorded = store.meta_get(JOURNALS_GROUP_KEY)
        if recorded is not None and bytes(recorded).isdigit():
            return int(bytes(recorded))
        for journal in (Journal.PCJ, Journal.DQF):
            for _, item in itertools.islice(store.scan(journal), GROUP_PROBE_RECORDS):
                if not isinstance(item, Exception):
                    return item.target_group
    finally:
        store.close()
    directory = scan.journal_dir(path)
    name = directory.parent.name if directory.name == "journals" else directory.name
    match = re.search(r"(\d+)$", name)
    return int(match.group(1)) if match else 0


GROUP_PROBE_RECORDS = 16
"""Records of a journal `infer_group` looks at for one that is not corrupt."""
JOURNALS_GROUP_KEY = "journals_group"
"""META key of the group that wrote the journals (`mrs.core.seqspace.GROUP_KEY`),
spelled here because this module runs on executors that have only the audit's own
packages' needs (pyspark, pyarrow, lmdb, msgpack), not `mrs.core`'s."""


def resolve_sources(options: dict[str, str]) -> list[tuple[str, int]]:
    """(data dir, group) pairs named by the options."""
    if "config" in options:
        from mrs.config.bus import ConfigError, load_config

        try:
            bus = load_config(options["config"])
        except (ConfigError, OSError) as error:
            raise SourceError(f"config: {error}") from None
        wanted = options.get("groups", "")
        ids = group_ids(wanted, "groups") if wanted else list(bus.groups)
        try:
            return [(str(bus.group(g).data_dir), g) for g in ids]
        except LookupError as error:
            raise SourceError(str(error)) from None
    paths = _paths(options)
    if not paths:
        raise SourceError("give a data directory (load(PATH) or option path) or a config")
    if "group" in options:
        if len(paths) != 1:
            raise SourceError("option group goes with exactly one path")
        return _whole([(paths[0], int_option(options, "group", 0, minimum=0))])
    try:
        return _whole([(str(scan.journal_dir(path)), infer_group(path)) for path in paths])
    except FileNotFoundError as error:
        raise SourceError(str(error)) from None


def _whole(sources: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """`sources`, once none of them is a replica's unfinished full copy: read there,
    the dataset held part of the group's records with nothing to say so."""
    for path, _ in sources:
        if (unfinished := scan.unfinished_copy_problem(path)) is not None:
            raise SourceError(unfinished)
    return sources


# ------------------------------------------------------------------ filters
def _micros(value) -> int | None:
    if not isinstance(value, datetime.datetime):
        return None
    if value.tzinfo is None:  # Spark hands naive datetimes in the local time zone
        value = value.astimezone()
    delta = value - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_RANGE_FILTERS = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, In)


def _as_range(flt: Filter, convert) -> scan.Range | None:
    if not isinstance(flt, _RANGE_FILTERS):
        return None
    if isinstance(flt, In):
        values = [convert(v) for v in flt.value]
        if any(v is None for v in values):
            return None
        return scan.Range(values=frozenset(values))
    value = convert(flt.value)
    if value is None:
        return None
    if isinstance(flt, EqualTo):
        return scan.Range(value, value)
    if isinstance(flt, GreaterThan):
        return scan.Range(low=value + 1)
    if isinstance(flt, GreaterThanOrEqual):
        return scan.Range(low=value)
    if isinstance(flt, LessThan):
        return scan.Range(high=value - 1)
    if isinstance(flt, LessThanOrEqual):
        return scan.Range(high=value)
    return None


def _integer(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def push(conditions: scan.Conditions, flt: Filter) -> scan.Conditions | None:
    """`conditions` narrowed by `flt`, or None if this filter cannot be pushed."""
    if len(flt.attribute) != 1:
        return None
    column = flt.attribute[0]
    if column in scan.TIME_FIELDS:
        wanted = _as_range(flt, _micros)
        key = (scan.TIME_FIELDS[column], True)
    elif column in scan.INT_FIELDS or column in ("seq", "group"):
        wanted = _as_range(flt, _integer)
        key = (scan.INT_FIELDS.get(column, -1), False)
    else:
        return None
    if wanted is None:
        return None
    if column == "seq":
        return scan.Conditions(conditions.seq.both(wanted), conditions.group, conditions.fields)
    if column == "group":
        return scan.Conditions(conditions.seq, conditions.group.both(wanted), conditions.fields)
    return scan.Conditions(conditions.seq, conditions.group, (*conditions.fields, (*key, wanted)))


# ------------------------------------------------------------------ reader
class _PartInput(InputPartition):
    def __init__(self, part: scan.Part | None) -> None:
        super().__init__(part)


class JournalReader(DataSourceReader):
    """Plans parts at a fixed snapshot boundary and reads them as Arrow batches."""

    exact_times = False
    """Batches with the times to the nanosecond too (`columns.EXACT_TIMES`): set by the
    driver's own reads (`mrs.audit.load.read_journals`), never by Spark's (its schema
    has no such columns)."""

    def __init__(self, journal: str, options: dict[str, str]) -> None:
        self.journal = journal
        self.options = options
        self.sources = resolve_sources(options)
        self.conditions = scan.Conditions()
        self.arrow = bool_option(options, "arrow", True)
        self.records_per_partition = int_option(
            options, "recordsperpartition", scan.RECORDS_PER_PARTITION, minimum=1
        )
        self.settle_ms = int_option(options, "snapshotsettlems", scan.SETTLE_S * 1000, 0, float)
        self.batch_rows = int_option(options, "batchrows", scan.BATCH_ROWS, minimum=1)

    def partitions(self) -> list[InputPartition]:
        parts = scan.plan(
            self.sources,
            self.journal,
            self.conditions,
            records_per_partition=self.records_per_partition,
            settle_s=self.settle_ms / 1000,
        )
        return [_PartInput(part) for part in parts] or [_PartInput(None)]

    def read(self, partition: InputPartition) -> Iterator:
        part = partition.value
        if part is None:
            return
        if self.arrow:
            yield from scan.scan_batches(part, self.batch_rows, self.exact_times)
            return
        for key, decoded in scan.scan_values(part):
            if isinstance(decoded, str):
                yield corrupt_row(key, decoded, part.group, part.journal)
            else:
                yield row_from_values(decoded, part.group, part.journal)


class PushdownJournalReader(JournalReader):
    """The same reader, taking the filters Spark pushes (seq, group, times, queues).

    A separate class because Spark refuses a reader that implements pushFilters
    while `spark.sql.python.filterPushdown.enabled` is off."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for flt in filters:
            narrowed = push(self.conditions, flt)
            if narrowed is None:
                yield flt
            else:
                self.conditions = narrowed


class _JournalSource(DataSource):
    journal = "pcj"
    pushdown = False
    """Set by `register` from the session's filterPushdown conf; option `pushdown`
    (true/false) overrides it per read."""

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = _options(self.options)
        pushdown = bool_option(options, "pushdown", self.pushdown)
        reader_type = PushdownJournalReader if pushdown else JournalReader
        return reader_type(self.journal, options)


class PcjSource(_JournalSource):
    """Format `mrs-pcj`: the postconfirmation journal (confirmed messages)."""

    journal = Journal.PCJ.value

    @classmethod
    def name(cls) -> str:
        return "mrs-pcj"


class DljSource(_JournalSource):
    """Format `mrs-dlj`: the dead letter journal."""

    journal = Journal.DLJ.value

    @classmethod
    def name(cls) -> str:
        return "mrs-dlj"


class PcjPushdownSource(PcjSource):
    pushdown = True


class DljPushdownSource(DljSource):
    pushdown = True


PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark) -> None:
    """Register `mrs-pcj` and `mrs-dlj` with this SparkSession. Filters are pushed if
    the session has `spark.sql.python.filterPushdown.enabled` on at this moment."""
    pushdown = str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() == "true"
    spark.dataSource.register(PcjPushdownSource if pushdown else PcjSource)
    spark.dataSource.register(DljPushdownSource if pushdown else DljSource)
