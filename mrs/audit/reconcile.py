"""Was anything lost? The reconciliation, the gap and duplicate checks, the trail.

Every journal of every group read (SAF, DQF, DLJ, PCJ, `mrs.audit.load`) holds each
recoverable message in exactly one place at a time: waiting to cross a link (SAF),
waiting for its receiver (DQF), dead-lettered (DLJ) or confirmed (PCJ). So:

- **reconciliation** per queue and per sender: stored = confirmed + dead-lettered +
  in DQF + in SAF + missing;
- **missing** comes from the sequence numbers. A seq is `group | counter` and each
  group hands its counters out in order, so between two journaled messages of the
  same sender a counter that no journal of any group holds is a message stored and
  then lost (a deleted DQF record, a lost disk). Such a gap is charged to the sender
  on both sides (and to the queue, if both sides went to the same queue); other gaps
  are `unattributed`. A counter is also unused when a put was not recoverable
  (memory modes are never journaled), was refused after it got its seq, or when the
  group restarted (it skips the rest of its reserved block): a gap is a lead to
  follow, the trail and the group's log say which;
- **duplicates**: a seq held in more than one place (the same message twice);
- **correlation ids**: per id prefix (the id without its trailing digits), how
  many numbers are missing between the first and the last, and how
  many ids were confirmed more than once;
- **trail**: every record of one correlation id (put, deliveries, confirm or dead
  letter) and the records that replay them (jplay).

Both checks are one Spark job over the audit's one DataFrame; only the rows that show a
problem come back to the driver, at most `mrs.limits.AUDIT_CHECK_ROWS_MAX`.
"""

from __future__ import annotations

import collections
import datetime

import pyarrow as pa
import pyarrow.compute as pc

from mrs.audit.columns import EXACT_TIMES
from mrs.limits import AUDIT_CHECK_ROWS_MAX as CHECK_ROWS_MAX
from mrs.offline.scalars import iso_utc

SEQ_GROUP_SHIFT = 49
"""A seq is group (high bits) | counter (mrs.core.seqspace.GROUP_SHIFT)."""

_SEQUENCE_SQL = """
SELECT seq, source, target, place, next_seq, next_source, next_target, next_place FROM (
  SELECT seq, source, target, place, in_window,
         lead(seq) OVER w AS next_seq, lead(source) OVER w AS next_source,
         lead(target) OVER w AS next_target, lead(place) OVER w AS next_place,
         lead(in_window) OVER w AS next_in_window
  FROM (SELECT seq, source, target, concat(journal, ':', `group`) AS place, in_window
        FROM {frame} WHERE corrupt IS NULL)
  WINDOW w AS (PARTITION BY shiftright(seq, {shift}) ORDER BY seq, place))
WHERE (next_seq = seq OR next_seq > seq + 1) AND (in_window OR next_in_window)
LIMIT {limit}
"""
"""Over every record (`in_window` or not: one outside the window still holds its
counter); a gap or a duplicate is reported when a record beside it is in the window."""


_SEQUENCE_COLUMNS = ("seq", "source", "target", "place", "next_seq", "next_source",
                     "next_target", "next_place")  # fmt: skip
_CORRELATION_COLUMNS = ("prefix", "senders", "source", "messages", "numbers", "first_number",
                        "last_number", "held_numbers", "confirmed", "confirmed_ids")  # fmt: skip


def check_rows(spark, frame) -> tuple[list[dict], list[dict], list[int]]:
    """One job for both checks: (sequence rows: the neighbour pairs that are a
    duplicate or a gap; correlation rows: per id prefix; the seqs held without a
    sound record: those of the corrupt records and of the records replayed away,
    `_REPLAYED_AWAY_SQL`). The result shapes travel as JSON in one column of one union, so Spark
    schedules one job."""
    import json

    sequence = _SEQUENCE_SQL.format(frame="{frame}", shift=SEQ_GROUP_SHIFT,
                                    limit=CHECK_ROWS_MAX + 1)  # fmt: skip
    correlation = _CORRELATION_SQL.format(frame="{frame}", limit=CHECK_ROWS_MAX)
    query = (
        f"SELECT 'sequence' AS kind, to_json(struct(*)) AS row FROM ({sequence})\n"
        f"UNION ALL\nSELECT 'correlation', to_json(struct(*)) FROM ({correlation})\n"
        f"UNION ALL\nSELECT 'corrupt', to_json(struct(seq)) FROM ({_CORRUPT_SQL})\n"
        f"UNION ALL\nSELECT 'corrupt', to_json(struct(seq)) FROM ({_REPLAYED_AWAY_SQL})"
    )
    found: dict[str, list[dict]] = {"sequence": [], "correlation": [], "corrupt": []}
    for kind, text in spark.sql(query, frame=frame).collect():
        found[kind].append(json.loads(text))
    sequence_rows = [{c: row.get(c) for c in _SEQUENCE_COLUMNS} for row in found["sequence"]]
    correlation_rows = [_correlation_row({c: row.get(c) for c in _CORRELATION_COLUMNS})
                        for row in found["correlation"]]  # fmt: skip
    correlation_rows.sort(key=lambda row: row["prefix"])
    held = sorted({row["seq"] for row in found["corrupt"]})
    return sequence_rows, correlation_rows, held


_CORRUPT_SQL = f"""
SELECT seq FROM {{frame}} WHERE corrupt IS NOT NULL AND seq IS NOT NULL LIMIT {CHECK_ROWS_MAX}
"""


_ORIGIN_SEQ = """CAST(CASE WHEN origin >= 9223372036854775808 THEN origin - 18446744073709551616
                 ELSE origin END AS BIGINT)"""
"""The seq of the record a row replays (`replayed_from` is `JOURNAL:GROUP:SEQ`, the
seq unsigned as the replay header keeps it) as the `seq` column holds seqs (signed,
`mrs.audit.columns.signed_seq`), from `origin`, its DECIMAL(20,0); null if unreadable."""
_ORIGIN = "try_cast(substring_index(replayed_from, ':', -1) AS DECIMAL(20,0))"

_REPLAYED_AWAY_SQL = f"""
SELECT DISTINCT replayed.seq FROM (
  SELECT {_ORIGIN_SEQ} AS seq FROM (SELECT {_ORIGIN} AS origin FROM {{frame}}
                                    WHERE corrupt IS NULL AND replayed_from IS NOT NULL)
) AS replayed
LEFT ANTI JOIN (SELECT seq FROM {{frame}} WHERE seq IS NOT NULL) AS held ON replayed.seq = held.seq
WHERE replayed.seq IS NOT NULL
LIMIT {CHECK_ROWS_MAX}
"""
"""The seqs of records that no journal holds any more but a replay of them does: a
dead letter redriven by `mrs jplay dlj --remove` (deleted once its replay was stored).
Its counter is held by its replay, not missing. Why: each redriven dead letter was a
gap, its message counted `missing` and charged to its sender, though the replay (a
new message from the `--as` queue, counted there) was confirmed."""


def _held_by_corrupt(corrupt_seqs: list[int], after: int, before: int) -> int:
    """How many corrupt records hold a seq strictly between two sound records'."""
    return sum(1 for seq in corrupt_seqs if after < seq < before)


def sequence_checks(rows: list[dict], corrupt_seqs: list[int] | None = None) -> dict:
    """Gaps and duplicates from `sequence_rows`: per sender, per queue, listed.

    A counter held by a corrupt record (`corrupt_seqs`) is not missing: its journal
    holds the seq, and the record is counted in `corrupt_records` alone. Why: it was
    a gap, its message "missing" and charged to its sender's neighbours. The same for
    a record replayed away (`_REPLAYED_AWAY_SQL`: `check_rows` gives both)."""
    gaps_by_sender: collections.Counter[str] = collections.Counter()
    missing_by_sender: collections.Counter[str] = collections.Counter()
    missing_by_queue: collections.Counter[str] = collections.Counter()
    unattributed = 0
    gaps: list[dict] = []
    places: dict[int, dict] = {}
    for row in rows[:CHECK_ROWS_MAX]:
        seq, next_seq = row["seq"], row["next_seq"]
        if next_seq == seq:
            found = places.setdefault(seq, {"seq": seq, "source": row["source"],
                                            "target": row["target"], "places": []})  # fmt: skip
            for place in (row["place"], row["next_place"]):
                if place not in found["places"]:
                    found["places"].append(place)
            continue
        missing = next_seq - seq - 1 - _held_by_corrupt(corrupt_seqs or [], seq, next_seq)
        if missing <= 0:
            continue
        sender = row["source"] if row["source"] == row["next_source"] else None
        queue = row["target"] if sender and row["target"] == row["next_target"] else None
        if sender is None:
            unattributed += missing
        else:
            gaps_by_sender[sender] += 1
            missing_by_sender[sender] += missing
            if queue is not None:
                missing_by_queue[queue] += missing
        gaps.append({"after_seq": seq, "before_seq": next_seq, "missing": missing,
                     "sender": sender, "queue": queue})  # fmt: skip
    duplicates = sorted(places.values(), key=lambda d: d["seq"])
    for found in duplicates:
        found["places"] = ", ".join(found["places"])
    return {
        "missing_by_sender": dict(missing_by_sender),
        "gaps_by_sender": dict(gaps_by_sender),
        "missing_by_queue": dict(missing_by_queue),
        "unattributed": unattributed,
        "gaps": gaps,
        "duplicates": duplicates,
        "truncated": len(rows) > CHECK_ROWS_MAX,
    }


_SHOWN_ID = """CASE WHEN NOT is_valid_utf8(CAST(correlation_id AS STRING))
                    THEN concat('hex:', lower(hex(correlation_id)))
                    WHEN startswith(CAST(correlation_id AS STRING), 'hex:')
                    THEN concat('text:', CAST(correlation_id AS STRING))
                    ELSE CAST(correlation_id AS STRING) END"""
"""A correlation id as `mrs dump` and `--trail` write it (`mrs.audit.command.trail_id`):
its text, `hex:...` if it is not UTF-8 (`text:...` if its text starts with `hex:`).
Why: a binary id was cast to text as it was, so the table's prefix was U+FFFD
replacement characters (two ids told apart by their bytes looked the same, and none
could be pasted into `--trail`), and its numbers came from Java's decoding of it."""

_IDS = f"""
SELECT source, journal, in_window, message,
       substring(id, 1, length(id) - length(digits)) AS prefix,
       try_cast(digits AS BIGINT) AS number
FROM (SELECT source, journal, in_window, message, id,
             CASE WHEN startswith(id, 'hex:') THEN '' ELSE regexp_extract(id, '([0-9]*)$', 1)
             END AS digits
      FROM (SELECT source, journal, in_window, {_SHOWN_ID} AS id,
                   coalesce(replayed_from, concat(journal, ':', `group`, ':',
                            CAST(CASE WHEN seq < 0 THEN CAST(seq AS DECIMAL(20,0))
                                      + 18446744073709551616 ELSE seq END AS STRING))) AS message
            FROM {{frame}}
            WHERE corrupt IS NULL AND correlation_id IS NOT NULL AND length(correlation_id) > 0))
"""
"""Each record's id as prefix and number, and the message it is: its own
`JOURNAL:GROUP:SEQ`, or for a replay (`mrs jplay`) the `replayed_from` of the record it
replays, so a replay and its original are one message (a hex id is its own prefix,
with no number)."""

_CORRELATION_SQL = f"""
SELECT ids.prefix, count(DISTINCT CASE WHEN copies > 0 THEN source END) AS senders,
       min(CASE WHEN copies > 0 THEN source END) AS source, sum(copies) AS messages,
       count(CASE WHEN copies > 0 THEN 1 END) AS numbers,
       first(low) AS first_number, first(high) AS last_number,
       count(CASE WHEN number BETWEEN low AND high THEN 1 END) AS held_numbers,
       sum(confirmed) AS confirmed,
       sum(CASE WHEN confirmed > 0 THEN 1 ELSE 0 END) AS confirmed_ids
FROM (SELECT prefix, number, min(source) AS source,
             count(DISTINCT CASE WHEN in_window THEN message END) AS copies,
             count(DISTINCT CASE WHEN journal = 'pcj' AND in_window THEN message END)
               AS confirmed
      FROM ({_IDS}) GROUP BY prefix, number) AS ids
JOIN (SELECT prefix, min(number) AS low, max(number) AS high
      FROM ({_IDS}) WHERE in_window GROUP BY prefix) AS bounds
  ON ids.prefix <=> bounds.prefix
GROUP BY ids.prefix
LIMIT {{limit}}
"""
"""Per id (prefix, number) its messages and confirms in the window, then per prefix,
for the prefixes the window holds. `first_number`/`last_number` are the window's;
`held_numbers` counts the numbers between them any journal holds, inside the window
or not (a number confirmed before `--since` is not missing). An id without trailing
digits is its own prefix with no number (one group per id). A replay and the record
it replays count as one message (`_IDS`). Why: every `mrs jplay pcj` replay a
receiver confirmed was a `duplicate_confirms` of its id, and each copy one more
message, so an operator's restore read as orders processed twice."""


def _correlation_row(row: dict) -> dict:
    """A correlation prefix's row with what it implies: per prefix, numbers seen and
    confirms (`source` is its first sender, `senders` how many sent ids of it)."""
    numbered = row["first_number"] is not None
    span = row["last_number"] - row["first_number"] + 1 if numbered else 0
    row["missing_numbers"] = span - row.pop("held_numbers") if numbered else 0
    row["duplicate_confirms"] = row["confirmed"] - row["confirmed_ids"]
    return row


def reconciliation(counts: list[dict], checks: dict, key: str, missing: dict) -> list[dict]:
    """Per `key` (target or source): stored vs confirmed vs dead-lettered vs still in
    the DQF or SAF vs missing, from the fine-grained counts of the sound records."""
    table: dict[str, dict] = {}
    column = {"pcj": "confirmed", "dlj": "dead_lettered", "dqf": "in_dqf", "saf": "in_saf"}
    for row in counts:
        name = row[key]
        entry = table.setdefault(name, {key: name, "confirmed": 0, "dead_lettered": 0,
                                        "in_dqf": 0, "in_saf": 0})  # fmt: skip
        entry[column[row["journal"]]] += row["n"]
    duplicates = collections.Counter(d[key] for d in checks["duplicates"])
    for name in missing:
        table.setdefault(name, {key: name, "confirmed": 0, "dead_lettered": 0,
                                "in_dqf": 0, "in_saf": 0})  # fmt: skip
    rows = []
    for name in sorted(table, key=_address_order):
        entry = table[name]
        entry["missing"] = missing.get(name, 0)
        entry["duplicates"] = duplicates.get(name, 0)
        entry["stored"] = (entry["confirmed"] + entry["dead_lettered"] + entry["in_dqf"]
                           + entry["in_saf"] + entry["missing"] - entry["duplicates"])  # fmt: skip
        rows.append({key: name, "stored": entry["stored"], **{
            k: entry[k] for k in ("confirmed", "dead_lettered", "in_dqf", "in_saf",
                                  "missing", "duplicates")}})  # fmt: skip
    return rows


def _address_order(address: str) -> tuple:
    parts = str(address).split(".")
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


# ---------------------------------------------------------------------- trail
_TRAIL_COLUMNS = ("journal", "group", "seq", "source", "target", "put_time", "written_time",
                  "confirm_time", "confirm_value", "deliveries", "possdupl", "replayed_from",
                  "dead_letter_reason", "delivery_mode", "uma", "principal")  # fmt: skip


def trail(table: pa.Table, correlation_id: bytes, since: datetime.datetime | None = None,
          until: datetime.datetime | None = None) -> list[dict]:  # fmt: skip
    """Every event of the messages with this correlation id, oldest first: each
    record's put, its place now (SAF, DQF), its deliveries and confirm or its dead
    letter, and every record that replays one of them (jplay); of the records in
    the window `since`/`until` only (`in_window`), if one is given."""
    records = trail_records(table, correlation_id)
    return trail_events([r for r in records if in_window(r, since, until)])


def trail_records(table: pa.Table, correlation_id: bytes) -> list[dict]:
    """The records of this correlation id and those that replay one of them (with
    their times to the nanosecond, when `table` has them: `EXACT_TIMES`)."""
    mine = table.filter(pc.equal(table["correlation_id"], pa.scalar(correlation_id, pa.binary())))
    places = {f"{r['journal']}:{r['group']}:{r['seq']}" for r in mine.to_pylist()}
    replays = table.filter(pc.is_in(table["replayed_from"], pa.array(sorted(places), pa.string())))
    columns = [*_TRAIL_COLUMNS, *(c for c in EXACT_TIMES.values() if c in table.schema.names)]
    records = mine.select(columns).to_pylist()
    records += [r for r in replays.select(columns).to_pylist()
                if f"{r['journal']}:{r['group']}:{r['seq']}" not in places]  # fmt: skip
    return records


def in_window(record: dict, since: datetime.datetime | None,
              until: datetime.datetime | None) -> bool:  # fmt: skip
    """The report's window (`mrs.audit.report.audit_frame`) for one record: a PCJ
    record by its confirm time, a DLJ record by its dead-lettering, both bounds
    inclusive; a message still waiting in a SAF or DQF is in every window (the backlog
    now, as the report counts it `in_dqf`/`in_saf`). Why: `--trail` ignored
    `--since`/`--until`, so the trail of an id showed records the report of the same
    window did not count."""
    if since is None and until is None or record["journal"] in ("saf", "dqf"):
        return True
    moment = record["confirm_time"] if record["journal"] == "pcj" else record["written_time"]
    if moment is None:
        return False
    return (since is None or moment >= since) and (until is None or moment <= until)


def trail_events(records: list[dict]) -> list[dict]:
    """The events of these records, oldest first; each event's `time` is its exact
    instant as `mrs dump --json` prints it (`iso_utc`: nanoseconds, six digits on a
    whole microsecond), None if the record has none. Why: cut to the microsecond
    (Spark's timestamps), a trail's confirm time pasted into `mrs dump --until` fell
    before that record's own and left it out."""
    events: list[dict] = []
    for record in records:
        events.extend(_events(record))
    events.sort(key=lambda e: (e["time"] or 0, e["seq"], e["order"]))
    for event in events:
        del event["order"]
        event["time"] = iso_utc(event["time"]) if event["time"] else None
    return events


def _instant(record: dict, column: str) -> int | None:
    """The record's time `column` in ns since the epoch: the exact column if read
    (`EXACT_TIMES`), else the microsecond timestamp's."""
    exact = record.get(EXACT_TIMES[column])
    if exact is not None:
        return exact
    moment = record[column]
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return ((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds) * 1000


def _events(record: dict) -> list[dict]:
    """The events one record tells: put, then where it is or how it ended."""
    base = {"seq": record["seq"], "group": record["group"], "journal": record["journal"],
            "principal": record["principal"]}  # fmt: skip
    sender = record["source"] if not record["principal"] else \
        f"{record['source']} (principal {record['principal']})"  # fmt: skip
    put = f"put by {sender} to {record['target']} ({record['delivery_mode']}, " \
          f"UMA {record['uma']})"  # fmt: skip
    if record["replayed_from"]:
        put = f"replay of {record['replayed_from']}: " + put
    events = [{**base, "time": _instant(record, "put_time"), "event": "put", "detail": put,
               "order": 0}]  # fmt: skip
    journal = record["journal"]
    if journal == "saf":
        detail = f"in group {record['group']}'s SAF, waiting for the link to its target"
        events.append({**base, "time": _instant(record, "written_time"), "event": "stored in SAF",
                       "detail": detail, "order": 1})  # fmt: skip
    elif journal == "dqf":
        detail = f"in group {record['group']}'s DQF, not yet confirmed"
        events.append({**base, "time": _instant(record, "written_time"), "event": "stored in DQF",
                       "detail": detail, "order": 1})  # fmt: skip
    elif journal == "dlj":
        detail = f"dead-lettered in group {record['group']}: {record['dead_letter_reason']}"
        events.append({**base, "time": _instant(record, "written_time"), "event": "dead letter",
                       "detail": detail, "order": 2})  # fmt: skip
    else:
        delivered = record["deliveries"]
        times = f"{delivered} time(s)" if delivered is not None else "(count not recorded)"
        note = ", POSSDUPL" if record["possdupl"] else ""
        events.append({**base, "time": _instant(record, "confirm_time"), "event": "delivered",
                       "detail": f"handed out {times}{note}", "order": 1})  # fmt: skip
        events.append({**base, "time": _instant(record, "confirm_time"), "event": "confirm",
                       "detail": f"confirmed in group {record['group']} with value "
                                 f"{record['confirm_value']}", "order": 2})  # fmt: skip
    return events
