"""Read the journals of some groups into ONE Arrow table on the driver, for Spark.

Why: with a local master the audit's cost was fixed cost, not work (34-46 s for 112
or 5,300 records): every `mrs-pcj`/`mrs-dlj` read started Spark Python workers to
plan and to scan, once per journal and again per action. Reading the journals here,
with the very reader the data source runs (`mrs.audit.source.JournalReader`, so a
change to what a source reads is a change here too), and handing Spark one table
makes the audit one plan over one in-memory relation: no Python worker at all.

What is read: the SAF, DQF, DLJ and PCJ of every group named, in that order. On a
running group a message moves SAF -> DQF -> DLJ or PCJ; reading in that order means
a message that moves during the audit is seen twice (a duplicate to explain), never
missed. The body column is dropped (the audit reports `body_size`).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from journals import Journal
from mrs.audit.columns import SCHEMA

READ_ORDER = (Journal.SAF, Journal.DQF, Journal.DLJ, Journal.PCJ)
"""SAF before DQF before DLJ and PCJ: the way a message moves (module doc)."""
AUDIT_SCHEMA = pa.schema([f for f in SCHEMA if f.name != "body"])


def read_journals(
    sources: dict[str, str],
    journals: tuple[Journal, ...] = READ_ORDER,
    progress: Callable[[str], None] | None = None,
) -> pa.Table:
    """Every record of `journals` in the groups `sources` names (the data source's
    options: `config` + `groups`, or `paths`), body dropped, corrupt rows included."""
    from mrs.audit.source import JournalReader

    batches: list[pa.RecordBatch] = []
    for index, journal in enumerate(journals):
        options = {key.lower(): value for key, value in sources.items()}
        if index:  # the first read waited for in-flight commits; the rest start later
            options["snapshotsettlems"] = "0"
        reader = JournalReader(journal.value, options)
        before = len(batches)
        for partition in reader.partitions():
            for batch in reader.read(partition):
                batches.append(batch.drop_columns(["body"]) if "body" in batch.schema.names
                               else batch)  # fmt: skip
        if progress is not None:
            rows = sum(b.num_rows for b in batches[before:])
            progress(f"read {journal.value.upper()}: {rows:,} records")
    if not batches:
        return AUDIT_SCHEMA.empty_table()
    return pa.Table.from_batches([b.cast(AUDIT_SCHEMA) for b in batches], AUDIT_SCHEMA)


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
    the audit counts that message as missing. Without a config nothing is known."""
    if "config" not in sources:
        return []
    from mrs.config.bus import load_config

    bus = load_config(sources["config"])
    wanted = sources.get("groups", "")
    ids = [int(g) for g in wanted.split(",") if g] if wanted else list(bus.groups)
    return [
        f"group {g} has pcj_default = false: a confirm without FORCE_JRN writes no PCJ "
        "record, so its message counts as missing here"
        for g in ids
        if g in bus.groups and not bus.groups[g].pcj_default
    ]
