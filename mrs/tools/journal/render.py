"""How journal records read: bytes as text or hex, times, status names, JSON lines.

`mrs dump` prints with these, and `mrs jplay` names statuses with them; the JSON line
format is what `mrs dump --json` promises scripts (docs/journal-tools.md).
"""

from __future__ import annotations

import functools
import json
import math

from journals import Journal, Record
from mrs.group.shapes import PRINCIPAL_FIELD
from mrs.model import DeliveryMode, Status, Uma
from mrs.offline.scalars import iso_utc, time_fraction
from mrs.storage.journal_scan import record_time_ns
from mrs.tools.journal.arguments import PREVIEW_BYTES

DELIVERY_NAMES = {int(mode): mode.name for mode in DeliveryMode}
_UMA_NAMES = {int(uma): uma.name for uma in Uma}


def render_bytes(data: bytes, limit: int | None = None) -> tuple[str, bool]:
    """(text, truncated): printable UTF-8 as is, anything else as 'hex:...'."""
    truncated = limit is not None and len(data) > limit
    shown = data[:limit] if truncated else data
    try:
        text = shown.decode()
    except UnicodeDecodeError:
        text = None
        if truncated:  # the cut may have split a character: try a little shorter
            for cut in (1, 2, 3):
                try:
                    text = shown[:-cut].decode()
                    break
                except UnicodeDecodeError:
                    continue
    if (
        text is not None
        and text.replace("\n", "").replace("\t", "").isprintable()
        and not text.startswith("hex:")
    ):
        return text, truncated
    return "hex:" + shown.hex(), truncated


@functools.lru_cache(maxsize=1024)  # a few dozen statuses; bounded for corrupt values
@functools.lru_cache(maxsize=256)
def status_name(value: int) -> str:
    """The Status's name, or the number as text when it names none. Remembered: jplay
    names the status of every put it replays (`Status(value).name` is an enum lookup
    and a property, ~0.6 µs), and the statuses a server answers are few."""
    try:
        return Status(value).name
    except ValueError:
        return str(value)


def target_text(record: Record) -> str:
    """The record's target as `GROUP.QUEUE`, or the name it was put to.

    A client SAF journal keeps a put addressed by name (`ORDERS`, `LDN.SHIPPING`) as
    group 0, queue 0 with the name beside it, because only the server resolves names;
    showing `0.0` would hide where the message is going.
    """
    if record.target_group == 0 and record.target_queue == 0 and isinstance(record.extra, dict):
        named = record.extra.get("target")
        if isinstance(named, str) and named:
            return named
    return f"{record.target_group}.{record.target_queue}"


def principal_of(record: Record) -> str | None:
    """Who put the message (its `[auth]` principal), when the record kept it: records
    written with auth off, or before it was kept, have none."""
    extra = record.extra
    principal = extra.get(PRINCIPAL_FIELD) if isinstance(extra, dict) else None
    return principal if isinstance(principal, str) else None


def _json_default(value: object) -> object:
    if isinstance(value, bytes):
        return render_bytes(value)[0]
    return str(value)


_encode = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, default=_json_default, allow_nan=False
).encode


def headers_json(headers: object) -> str:
    """A record's headers as strict JSON. The wire lets a client's headers be any plain
    msgpack map (protocol.md): keys of bytes or ints, NaN among the floats. JSON has
    none of these, and one such record once failed a whole `mrs dump --json`; such
    headers are written with their keys as text and NaN / infinity as strings."""
    try:
        return _encode(headers)
    except (TypeError, ValueError):
        return _encode(_json_safe(headers))


def _json_safe(value: object) -> object:
    """`value` with every key a string and every float finite or a string."""
    if isinstance(value, dict):
        return {_key_text(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _key_text(key: object) -> str:
    """A map key as JSON writes one: text as is, bytes as `render_bytes` shows them,
    a number, true, false or null as its JSON text."""
    if isinstance(key, str):
        return key
    if isinstance(key, bytes):
        return render_bytes(key)[0]
    if isinstance(key, float) and not math.isfinite(key):
        return str(key)
    return _encode(key)


def record_json(journal: Journal, record: Record, body: str | None) -> str:
    """One record as one JSON line. Every field is there (times also as ns), so a
    script needs no second source; `body` is present only when asked for.

    Built by hand rather than through json.dumps of a dict: that halves the cost per
    record, which is what lets a dump stream ~100k records/s. Integers are written
    as is, strings through the stdlib's C string encoder; a record whose fields are
    not the ints the format promises takes the slow, general path instead.
    """
    r = record
    if not (
        type(r.seq) is int
        and type(r.target_group) is int
        and type(r.target_queue) is int
        and type(r.source_group) is int
        and type(r.source_queue) is int
        and type(r.msg_class) is int
        and type(r.msg_type) is int
        and type(r.priority) is int
        and type(r.put_time_ns) is int
        and type(r.written_time_ns) is int
        and type(r.confirm_value) is int
        and type(r.confirm_time_ns) is int
        and type(r.reason) is int
        and type(r.body) is bytes
        and type(r.correlation_id) is bytes
        and type(r.extra) is dict
    ):
        return record_json_general(journal, record, body)
    delivery = _DELIVERY_JSON.get(r.delivery) or _encode(r.delivery)
    uma = _UMA_JSON.get(r.uma) or _encode(r.uma)
    correlation = _string(render_bytes(r.correlation_id)[0]) if r.correlation_id else '""'
    reason_name = _string(status_name(r.reason)) if r.reason else "null"
    headers = r.extra.get("headers")
    headers_text = "null" if headers is None else headers_json(headers)
    principal = r.extra.get(PRINCIPAL_FIELD)
    principal_json = _string(principal) if type(principal) is str else "null"
    moment = r.confirm_time_ns or r.written_time_ns
    line = (
        f'{{"journal":"{journal.value}","seq":{r.seq},"time":{_iso_json(moment)},'
        f'"target":{_string(target_text(r))},'
        f'"source":"{r.source_group}.{r.source_queue}",'
        f'"class":{r.msg_class},"type":{r.msg_type},"priority":{r.priority},'
        f'"delivery":{delivery},"uma":{uma},"correlation_id":{correlation},'
        f'"bytes":{len(r.body)},"put_time_ns":{r.put_time_ns},'
        f'"written_time_ns":{r.written_time_ns},"confirm_value":{r.confirm_value},'
        f'"confirm_time_ns":{r.confirm_time_ns},"reason":{r.reason},'
        f'"reason_name":{reason_name},"headers":{headers_text},'
        f'"principal":{principal_json}'
    )
    if body is None:
        return line + "}"
    text, truncated = render_bytes(r.body, PREVIEW_BYTES if body == "preview" else None)
    return f'{line},"body":{_string(text)},"body_truncated":{"true" if truncated else "false"}}}'


def record_json_general(journal: Journal, record: Record, body: str | None) -> str:
    """The same object as record_json, through json.dumps: for odd records, and the
    reference the fast path is tested against."""
    item = {
        "journal": journal.value,
        "seq": record.seq,
        "time": iso_utc(record_time_ns(record)),
        "target": target_text(record),
        "source": f"{record.source_group}.{record.source_queue}",
        "class": record.msg_class,
        "type": record.msg_type,
        "priority": record.priority,
        "delivery": DELIVERY_NAMES.get(record.delivery, record.delivery),
        "uma": _UMA_NAMES.get(record.uma, record.uma),
        "correlation_id": render_bytes(bytes(record.correlation_id))[0]
        if record.correlation_id
        else "",
        "bytes": len(record.body),
        "put_time_ns": record.put_time_ns,
        "written_time_ns": record.written_time_ns,
        "confirm_value": record.confirm_value,
        "confirm_time_ns": record.confirm_time_ns,
        "reason": record.reason,
        "reason_name": status_name(record.reason) if record.reason else None,
        "headers": (
            _json_safe(record.extra.get("headers")) if isinstance(record.extra, dict) else None
        ),
        "principal": principal_of(record),
    }
    if body is not None:
        text, truncated = render_bytes(
            bytes(record.body), PREVIEW_BYTES if body == "preview" else None
        )
        item["body"] = text
        item["body_truncated"] = truncated
    return _encode(item)


_DELIVERY_JSON = {value: f'"{name}"' for value, name in DELIVERY_NAMES.items()}
_UMA_JSON = {value: f'"{name}"' for value, name in _UMA_NAMES.items()}
_string = json.encoder.encode_basestring  # the C encoder when available; no ASCII escaping
_second_cache: list = [None, ""]


def _iso_json(time_ns: int) -> str:
    """iso_utc as a JSON value, cheaply: records of one journal are close in time, so
    the formatted second is cached and only the microseconds change."""
    if not time_ns:
        return "null"
    second, rest = divmod(time_ns, 1_000_000_000)
    if _second_cache[0] != second:
        text = iso_utc(time_ns)
        if text is None:
            return "null"
        _second_cache[0] = second
        _second_cache[1] = text[:19]
    return f'"{_second_cache[1]}.{time_fraction(rest)}Z"'
