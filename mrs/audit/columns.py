"""Journal records as audit columns: the public schema and the fast Arrow conversion.

The column names here are the public contract of the `mrs-pcj` / `mrs-dlj` Spark
formats, of `mrs audit export` and of the Parquet archive: one place defines them so
that a query written against one reads the others. This module needs pyarrow only
(no Spark), so the Parquet writer and the Spark reader share it.

Records are decoded straight from their stored bytes (header, CRC32, one msgpack
array) without building `journals.Record` objects, then transposed into columns:
that keeps a scan well above 200k records/s per core. A record that fails its checks
becomes a row with `corrupt` set (the problem) and only `group`, `seq` and `journal`
filled: reported, never dropped, never a crash.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import msgpack
import pyarrow as pa
import pyarrow.compute as pc

from journals.checksum import crc32
from journals.record import FORMAT_VERSION, MAGIC
from mrs.model import DeliveryMode, Uma, status_of

_HEADER = struct.Struct(">BBI")
_U64 = struct.Struct(">Q")
_RECORD_FIELDS = 18
"""Fields of a format-1 record, in `journals.Record` order."""
(
    _SEQ, _TARGET_GROUP, _TARGET_QUEUE, _SOURCE_GROUP, _SOURCE_QUEUE, _BODY, _CLASS, _TYPE,
    _PRIORITY, _DELIVERY, _UMA, _CORRELATION_ID, _PUT_TIME_NS, _WRITTEN_TIME_NS,
    _CONFIRM_VALUE, _CONFIRM_TIME_NS, _REASON, _EXTRA,
) = range(_RECORD_FIELDS)  # fmt: skip

_TIMESTAMP = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema(
    [
        ("journal", pa.string()),
        ("group", pa.int32()),
        ("seq", pa.int64()),
        ("source", pa.string()),
        ("source_group", pa.int32()),
        ("source_queue", pa.int32()),
        ("target", pa.string()),
        ("target_group", pa.int32()),
        ("target_queue", pa.int32()),
        ("class", pa.int32()),
        ("type", pa.int32()),
        ("priority", pa.int32()),
        ("delivery_mode", pa.string()),
        ("uma", pa.string()),
        ("put_time", _TIMESTAMP),
        ("written_time", _TIMESTAMP),
        ("confirm_time", _TIMESTAMP),
        ("confirm_value", pa.int64()),
        ("possdupl", pa.bool_()),
        ("deliveries", pa.int32()),
        ("replayed_from", pa.string()),
        ("correlation_id", pa.binary()),
        ("body_size", pa.int32()),
        ("body", pa.binary()),
        ("dead_letter_reason", pa.string()),
        ("dead_letter_reason_code", pa.int32()),
        ("principal", pa.string()),
        ("corrupt", pa.string()),
    ]
)
"""The audit schema. Times are UTC timestamps (microseconds); `written_time` is when
the record was journaled (the confirm for the PCJ, the dead-lettering for the DLJ)."""
COLUMN_NAMES = tuple(SCHEMA.names)
EXACT_TIMES = {"put_time": "put_time_ns", "written_time": "written_time_ns",
               "confirm_time": "confirm_time_ns"}  # fmt: skip
"""Each time column and the column of the same time to the nanosecond (int64 ns since
the epoch, null when unset), which the journals keep and `mrs dump` and `mrs jplay`
print and read. Not in the public schema (Spark's timestamps are microseconds): only
the driver's reads that print a record's instant ask for them (`exact=True`)."""
EXACT_SCHEMA = pa.schema([*SCHEMA, *(pa.field(n, pa.int64()) for n in EXACT_TIMES.values())])
DESCRIPTIONS = {
    "journal": "pcj or dlj",
    "group": "the group whose journal holds the record",
    "seq": "the message's 64-bit sequence number (from its sending group)",
    "source": "sender's queue as GROUP.QUEUE",
    "target": "target queue as GROUP.QUEUE",
    "class": "message class",
    "type": "message type",
    "priority": "message priority (0..99)",
    "delivery_mode": "delivery mode name, e.g. WF_CONF",
    "uma": "undeliverable-message action name, e.g. SAF",
    "put_time": "when the sender put the message (UTC)",
    "written_time": "when the record was journaled (UTC)",
    "confirm_time": "when the receiver confirmed it (UTC; null in the DLJ)",
    "confirm_value": "the value the receiver confirmed with",
    "possdupl": "true if the confirmed copy was handed out more than once (POSSDUPL)",
    "deliveries": "times the message was handed out before its confirm (null if unknown)",
    "replayed_from": "JOURNAL:GROUP:SEQ of the record this message replays (jplay)",
    "correlation_id": "the sender's correlation id",
    "body_size": "body length in bytes",
    "body": "the message body",
    "dead_letter_reason": "why it was dead-lettered (status name; DLJ only)",
    "dead_letter_reason_code": "the same reason as a status number (DLJ only)",
    "principal": "who put the message ([auth] principal; null with auth off or unknown)",
    "corrupt": "null, or why the stored record failed its checks",
}


def _enum_names(enum_type) -> dict[int, str]:
    return {int(member): member.name for member in enum_type}


_DELIVERY_NAMES = _enum_names(DeliveryMode)
_UMA_NAMES = _enum_names(Uma)


def _name(names: dict[int, str], value: int) -> str:  # the row-at-a-time path
    return names.get(value) or str(value)


def _reason_name(code: int) -> str:
    status = status_of(code)
    return getattr(status, "name", str(code))


def decode_values(key: bytes, value: bytes) -> list | str:
    """The record's field list, or a string saying why it is corrupt."""
    if len(value) < _HEADER.size:
        return f"{len(value)} bytes is shorter than the header"
    magic, version, checksum = _HEADER.unpack_from(value)
    if magic != MAGIC:
        return f"bad magic byte 0x{magic:02x}"
    if version != FORMAT_VERSION:
        return f"unknown format version {version}"
    payload = memoryview(value)[_HEADER.size :]
    if crc32(payload) != checksum:
        return "checksum mismatch"
    try:
        values = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as error:  # noqa: BLE001 - any decode failure means corruption
        return f"undecodable payload: {error}"
    if not isinstance(values, list) or len(values) != _RECORD_FIELDS:
        return f"not an array of {_RECORD_FIELDS} record fields"
    return values


def seq_of_key(key: bytes) -> int | None:
    """The sequence number in a DLJ/PCJ key (the last 8 bytes), if it has one."""
    return _U64.unpack_from(key, len(key) - 8)[0] if len(key) >= 8 else None


SEQ_SIGN = 1 << 63
"""Seqs from here up (groups 16384..32767: the group is the top 15 bits,
mrs.core.seqspace) do not fit a signed 64-bit integer."""


def signed_seq(seq: int) -> int:
    """A seq as the `seq` column holds it: the same 64 bits read as signed, since
    Spark and Parquet have no unsigned 64-bit integer (Java's `long` does the same),
    so a group of id 16384 or more has negative seqs. `stored_seq` undoes it."""
    return seq - (SEQ_SIGN << 1) if seq >= SEQ_SIGN else seq


def stored_seq(value: int) -> int:
    """The seq (as in keys, PSBs and `mrs dump`) of a `seq` column value."""
    return value % (SEQ_SIGN << 1)


def _exact(ns_values) -> pa.Array:
    """ns since the epoch as they are; 0 (unset) -> null."""
    ns = pa.array(ns_values, pa.int64())
    return pc.if_else(pc.equal(ns, 0), None, ns)


def _timestamps(ns_values) -> pa.Array:
    """ns since the epoch -> UTC microsecond timestamps; 0 (unset) -> null."""
    ns = pa.array(ns_values, pa.int64())
    micros = pc.divide(ns, 1000)  # integer division: values are never negative
    return pc.if_else(pc.equal(ns, 0), None, micros).cast(_TIMESTAMP)


def _addresses(groups: pa.Array, queues: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(groups.cast(pa.string()), queues.cast(pa.string()), ".")


def _names(names: dict[int, str], values) -> pa.Array:
    get = names.get
    return pa.array([get(v) or str(v) for v in values], pa.string())


def _extra_fields(extras) -> tuple[list, list, list, list]:
    """(possdupl, deliveries, replayed_from, principal) from each record's `extra` map."""
    possdupl: list[bool] = []
    deliveries: list[int | None] = []
    replayed: list[str | None] = []
    principals: list[str | None] = []
    add_possdupl, add_deliveries, add_replayed, add_principal = (
        possdupl.append, deliveries.append, replayed.append, principals.append,
    )  # fmt: skip
    for extra in extras:
        if not extra:
            add_possdupl(False)
            add_deliveries(None)
            add_replayed(None)
            add_principal(None)
            continue
        principal = extra.get("principal")  # mrs.group.shapes.PRINCIPAL_FIELD
        add_principal(principal if type(principal) is str else None)
        count = extra.get("deliveries")
        if type(count) is not int:
            count = None
        add_deliveries(count)
        add_possdupl(bool(extra.get("possdupl")) or (count is not None and count > 1))
        headers = extra.get("headers")
        replay = headers.get("replay") if type(headers) is dict else None
        add_replayed(
            f"{replay.get('journal')}:{replay.get('group')}:{replay.get('seq')}"
            if type(replay) is dict
            else None
        )
    return possdupl, deliveries, replayed, principals


def batch_from_values(rows: list[list], group: int, journal: str,
                      exact: bool = False) -> pa.RecordBatch:  # fmt: skip
    """Decoded records (field lists) -> one Arrow batch in the audit schema (with
    `exact`, `EXACT_SCHEMA`: the times to the nanosecond too).

    Columns are built with Arrow compute where it can (addresses, times, sizes):
    per-row Python work is what limits a scan."""
    if not rows:
        return _empty_batch(exact)
    columns = list(zip(*rows, strict=True))
    count = len(rows)
    source_group = pa.array(columns[_SOURCE_GROUP], pa.int32())
    source_queue = pa.array(columns[_SOURCE_QUEUE], pa.int32())
    target_group = pa.array(columns[_TARGET_GROUP], pa.int32())
    target_queue = pa.array(columns[_TARGET_QUEUE], pa.int32())
    body = pa.array(columns[_BODY], pa.binary())
    possdupl, deliveries, replayed, principals = _extra_fields(columns[_EXTRA])
    if journal == "dlj":
        reasons = columns[_REASON]
        reason_names = pa.array([_reason_name(r) for r in reasons], pa.string())
        reason_codes = pa.array(reasons, pa.int32())
    else:
        reason_names, reason_codes = pa.nulls(count, pa.string()), pa.nulls(count, pa.int32())
    arrays = [
        pa.array([journal] * count, pa.string()),
        pa.array([group] * count, pa.int32()),
        pa.array(columns[_SEQ], pa.uint64()).view(pa.int64()),  # signed_seq, by the column
        _addresses(source_group, source_queue),
        source_group,
        source_queue,
        _addresses(target_group, target_queue),
        target_group,
        target_queue,
        pa.array(columns[_CLASS], pa.int32()),
        pa.array(columns[_TYPE], pa.int32()),
        pa.array(columns[_PRIORITY], pa.int32()),
        _names(_DELIVERY_NAMES, columns[_DELIVERY]),
        _names(_UMA_NAMES, columns[_UMA]),
        _timestamps(columns[_PUT_TIME_NS]),
        _timestamps(columns[_WRITTEN_TIME_NS]),
        _timestamps(columns[_CONFIRM_TIME_NS]),
        pa.array(columns[_CONFIRM_VALUE], pa.int64()),
        pa.array(possdupl, pa.bool_()),
        pa.array(deliveries, pa.int32()),
        pa.array(replayed, pa.string()),
        pa.array(columns[_CORRELATION_ID], pa.binary()),
        pc.binary_length(body).cast(pa.int32()),
        body,
        reason_names,
        reason_codes,
        pa.array(principals, pa.string()),
        pa.nulls(count, pa.string()),
    ]
    if not exact:
        return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)
    arrays += [_exact(columns[_PUT_TIME_NS]), _exact(columns[_WRITTEN_TIME_NS]),
               _exact(columns[_CONFIRM_TIME_NS])]  # fmt: skip
    return pa.RecordBatch.from_arrays(arrays, schema=EXACT_SCHEMA)


def _empty_batch(exact: bool = False) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=EXACT_SCHEMA if exact else SCHEMA)


def corrupt_batch(items: list[tuple[bytes, str]], group: int, journal: str,
                  exact: bool = False) -> pa.RecordBatch:  # fmt: skip
    """Rows that report corrupt records: group, seq (from the key), journal, problem."""
    rows = [
        {"journal": journal, "group": group, "seq": _signed_seq_of_key(key), "corrupt": problem}
        for key, problem in items
    ]
    return pa.RecordBatch.from_pylist(rows, schema=EXACT_SCHEMA if exact else SCHEMA)


def _signed_seq_of_key(key: bytes) -> int | None:
    seq = seq_of_key(key)
    return None if seq is None else signed_seq(seq)


def batch_from_records(records: Iterable, group: int, journal: str) -> pa.RecordBatch:
    """`journals.Record` objects -> one Arrow batch (for callers that hold Records)."""
    from journals.record import _FIELD_VALUES

    return batch_from_values([list(_FIELD_VALUES(r)) for r in records], group, journal)


def _timestamp(ns: int):
    import datetime

    if not ns:
        return None
    return datetime.datetime.fromtimestamp(ns // 1000 / 1e6, datetime.UTC)


def row_from_values(values: list, group: int, journal: str) -> tuple:
    """One decoded record as a tuple in schema order (the row-at-a-time path)."""
    (seq, target_group, target_queue, source_group, source_queue, body, msg_class,
     msg_type, priority, delivery, uma, correlation_id, put_time_ns, written_time_ns,
     confirm_value, confirm_time_ns, reason, extra) = values  # fmt: skip
    possdupl, deliveries, replayed, principals = _extra_fields([extra])
    is_dlj = journal == "dlj"
    return (
        journal, group, signed_seq(seq), f"{source_group}.{source_queue}", source_group,
        source_queue,
        f"{target_group}.{target_queue}", target_group, target_queue, msg_class, msg_type,
        priority, _name(_DELIVERY_NAMES, delivery), _name(_UMA_NAMES, uma),
        _timestamp(put_time_ns), _timestamp(written_time_ns), _timestamp(confirm_time_ns),
        confirm_value, possdupl[0], deliveries[0], replayed[0], correlation_id, len(body),
        body, _reason_name(reason) if is_dlj else None, reason if is_dlj else None,
        principals[0], None,
    )  # fmt: skip


def corrupt_row(key: bytes, problem: str, group: int, journal: str) -> tuple:
    row: list = [None] * len(COLUMN_NAMES)
    row[0], row[1], row[2], row[-1] = journal, group, _signed_seq_of_key(key), problem
    return tuple(row)
