"""Build the client's requests from the caller's arguments, checked once and cheaply.

A request built in Python is checked field by field (mrs.protocol.base), and for a
Put that generic check cost more than building it (benchmarks/README.md). The calls an
application makes most -- a put with its defaults and enum members, a get, a confirm
of a delivered seq -- have fields the client made itself (ids, str(), bytes()) or
values that are valid by construction (0, b"", None, an enum member); for those the
few fields still in doubt are checked here and the event is built unchecked. Any
other call takes the generic check, so a bad value is refused as before: a
`FieldRefused` (BADPARAM) naming the field.

Compiled (mrs.native.loader): a put, a get and a confirm of every client pass here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Final

import msgspec

from clients.errors import FieldRefused, error_for
from mrs import protocol as wire
from mrs.core.delivery import check_mode_and_uma
from mrs.errors import Refused
from mrs.limits import (
    CORRELATION_ID_BYTES_MAX,
    HEADERS_BYTES_MAX,
    PRIORITY_MAX,
    PUT_TIMEOUT_S_DEFAULT,
    REPLY_GRACE_S,
)
from mrs.model import DeliveryMode, ForceJrn, Status, Uma
from mrs.protocol.base import build_unchecked
from mrs.protocol.checks import INT32, INT64, UINT64_MAX
from mrs.protocol.event_types import CONFIRM, GET, PUT
from mrs.protocol.post_init import build_unchecked_from

# Read per request: bounds computed once, not per call.
_INT64_MIN: Final = INT64[0]
_INT64_MAX: Final = INT64[1]
_UINT64_MAX: Final = UINT64_MAX
ITEM_OVERHEAD_BYTES = 64
"""A Put's fixed fields on the wire, at most (code, id, ints, lengths): with the
variable fields this bounds an item's share of the frame."""
_ENCODE: Final = msgspec.msgpack.Encoder().encode


def wire_bytes(put: wire.Put) -> int:
    """About how many bytes `put` takes in a frame (never less): what keeps a
    PutBatch (put_many's, or puts sent together) within PUT_BATCH_BYTES_MAX."""
    size = ITEM_OVERHEAD_BYTES + len(put.body) + len(put.target) * 4 + len(put.resp_q) * 4
    size += len(put.correlation_id)
    if put.headers:
        size += len(_ENCODE(put.headers))
    return size


def built(build: Callable[..., Any], *fields: object) -> Any:
    """Build a request from the caller's arguments: a field out of its range is the
    caller's BADPARAM (`FieldRefused`, a `BadParameter`), not a protocol fault."""
    try:
        return build(*fields)
    except wire.LocalProtocolError as error:
        raise FieldRefused(Status.BADPARAM, error.message) from None


def body_bytes(body: Any) -> bytes:
    """A put's body as the wire takes it: bytes as they are, a bytearray or a
    memoryview copied; anything else BADPARAM (`FieldRefused`). Called only for a body
    that is not bytes (`type(body) is not bytes`), so a put of bytes pays nothing.
    Why: a str raised a bare TypeError from `bytes()`, None one from `len()`, and a
    list of ints was silently stored as the bytes it happens to spell."""
    if type(body) is bytes:
        return body
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise FieldRefused(
        Status.BADPARAM,
        f"put body must be bytes (or a bytearray or memoryview), got {type(body).__name__}"
        + (": encode it first, e.g. text.encode()" if isinstance(body, str) else ""),
    )


def headers_problem(headers: Any, room_bytes: int = 0) -> str | None:
    """Why a put's headers cannot travel, or None: encoded, with `room_bytes` left
    for headers the client adds itself (the SAF drain's), over HEADERS_BYTES_MAX, the
    group's bound. Called only for a put that has headers.
    Why: the group refuses such headers MSGTOOBIG only if their frame fits its frame
    limit; a bigger one (a 2 MiB header) made it close the connection, so every other
    request on it failed with it, and a journaled put with them was re-sent for ever
    by the SAF drain, reconnecting hundreds of times a second, while every put
    journaled after it waited behind it."""
    if type(headers) is not dict:
        return None  # the Put's own check names the field (FieldRefused)
    try:
        size_bytes = len(_ENCODE(headers)) + room_bytes
    except (TypeError, ValueError, OverflowError):
        return None  # not plain data: the Put's own check names it
    if size_bytes <= HEADERS_BYTES_MAX:
        return None
    bound_bytes = HEADERS_BYTES_MAX - room_bytes
    return f"headers of {size_bytes - room_bytes} bytes exceed {bound_bytes} (encoded)"


_ENUM_OF_FIELD = {
    "delivery": "DeliveryMode (e.g. DeliveryMode.WF_DQF)",
    "uma": "Uma (e.g. Uma.DLJ)",
    "force_j": "ForceJrn (e.g. ForceJrn.FORCE_JRN)",
}
"""The enum each field takes, as its refusal names it."""

_NO_MEMBER: Final = {
    "delivery": (Status.BADDELIVERY, "a delivery mode"),
    "uma": (Status.BADUMA, "a UMA"),
}
"""An int the wire's int32 cannot carry is no delivery mode or UMA: refused as the
group refuses one that names none (mrs.core.delivery), BADDELIVERY or BADUMA as
MessageQ and docs/delivery-modes.md say, not BADPARAM "must be in int32 range"."""
_INT32_MIN, _INT32_MAX = INT32


def wire_int(value: Any, name: str) -> int:
    """An enum field of a request (delivery, uma, force_j) as the int the wire
    carries; BADPARAM (`FieldRefused`) for what is no int. Only on the checked path:
    `int("WF_MEM")` raised a bare ValueError, `int(None)` a TypeError. The refusal
    names the enum: "must be one of its enum's members" left a newcomer who passed
    `delivery="WF_DQF"` to guess which enum, and from where."""
    if isinstance(value, int) and type(value) is not bool:
        if name in _NO_MEMBER and not _INT32_MIN <= value <= _INT32_MAX:
            status, what = _NO_MEMBER[name]
            raise error_for(status, f"{value} is not {what}")
        return int(value)
    kind = _ENUM_OF_FIELD.get(name, "member of its enum")
    raise FieldRefused(
        Status.BADPARAM, f"{name} must be a {kind}, imported from clients, got {value!r}"
    )


def refuse_bad_pair(delivery: int, uma: int) -> None:
    """Raise what the server would answer a put whose delivery mode or UMA is none
    (BADDELIVERY, BADUMA) or whose pair MessageQ does not combine (NOTSUPPORTED),
    for a put no server answers now: one journaled by the
    client (its PSB says STORED, so a refusal at drain time would lose it) or made
    while the link is down (the mistake is named, not the link). The rule is the
    server's own (mrs.core.delivery): one rule, both sides."""
    try:
        check_mode_and_uma(delivery, uma)
    except Refused as refused:
        raise error_for(refused.status, refused.message) from None


def put_timeout_ms(timeout_s: Any) -> int:
    """A put's timeout on the wire: 0 for None or 0 (the group's default, MessageQ's
    meaning), else milliseconds, at least 1. BADPARAM for a negative, NaN or infinite
    one, or one that is no number (NaN once slipped through every comparison)."""
    if timeout_s is None or (type(timeout_s) in _NUMBERS and timeout_s == 0):
        return 0
    if type(timeout_s) not in _NUMBERS or not 0 < timeout_s < math.inf:
        raise FieldRefused(
            Status.BADPARAM,
            "put timeout must be a finite number of seconds >= 0 (None: the group's "
            f"default), got {timeout_s!r}",
        )
    return max(1, _wire_ms(timeout_s))


def get_timeout_ms(timeout_s: Any) -> int:
    """A get's timeout on the wire: -1 for None (wait as long as it takes), else
    milliseconds (0: a poll). BADPARAM as for a put's."""
    if timeout_s is None:
        return -1
    if type(timeout_s) not in _NUMBERS or not 0 <= timeout_s < math.inf:
        raise FieldRefused(
            Status.BADPARAM,
            "get timeout must be a finite number of seconds >= 0 (None: no limit), "
            f"got {timeout_s!r}",
        )
    return _wire_ms(timeout_s)


def _wire_ms(timeout_s: float) -> int:
    """A finite timeout >= 0 in milliseconds, at most _TIMEOUT_MS_MAX. Why the bound
    before the product: 1e308 s times 1000 is inf, and round(inf) raised
    OverflowError out of `put`/`get` (and `mrs jplay --timeout 1e308` ended
    "unexpected error") where a longer timeout than the wire carries is that long."""
    return min(_TIMEOUT_MS_MAX, round(min(timeout_s, _TIMEOUT_MS_MAX / 1000) * 1000))


_NUMBERS: Final = (int, float)
_TIMEOUT_MS_MAX: Final = (1 << 63) - 1
"""The wire's bound (int64 ms, 292 million years): a longer timeout is that long.
Why: 1e16 s went out as 10**19 ms and came back refused "timeout_ms must be >= 0",
pointing the user the wrong way."""


def put_reply_wait_s(timeout_s: float | None) -> float:
    """How long a client waits for a put's answer before it takes the server to have
    lost it: the put's own timeout (None or 0: the 30 s default, as on the wire) plus
    REPLY_GRACE_S. A put the application awaits and a put the SAF drain sends alike."""
    return (timeout_s or PUT_TIMEOUT_S_DEFAULT) + REPLY_GRACE_S


def put_request(
    request_id: int,
    target: str,
    body: bytes,
    delivery: Any,
    uma: Any,
    msg_class: Any,
    msg_type: Any,
    priority: Any,
    timeout_ms: Any,
    correlation_id: Any,
    resp_q: Any,
    headers: Any,
) -> wire.Put:
    """The Put; built unchecked when every field is already what the wire takes (what
    `Client.put` and `put_many` pass), else checked field by field (a `FieldRefused`
    naming the field): the generic check cost more than building the Put (benchmarks/README.md)."""
    unchecked = False  # else checked field by field
    if (
        type(delivery) is DeliveryMode
        and (type(uma) is Uma or uma == 0)
        and type(msg_class) is int
        and type(msg_type) is int
        and type(priority) is int
        and type(timeout_ms) is int
        and type(correlation_id) is bytes
    ):
        optional = (msg_class, msg_type, priority, timeout_ms, correlation_id, resp_q, headers)
        if optional == (0, 0, 0, 0, b"", "", None):  # all at their defaults: most puts
            return build_unchecked_from(  # the fields as a tuple: no star call
                PUT,
                (request_id, target, body, int(delivery), int(uma), 0, 0, 0, 0, b"", "", None),
            )
        unchecked = (  # headers, free-form, are still looked into (FieldRefused if not plain)
            type(resp_q) is str
            and _INT64_MIN <= msg_class <= _INT64_MAX
            and _INT64_MIN <= msg_type <= _INT64_MAX
            and 0 <= priority <= PRIORITY_MAX
            and 0 <= timeout_ms <= _INT64_MAX
            and len(correlation_id) <= CORRELATION_ID_BYTES_MAX
            and (headers is None or type(headers) is dict)
        )
    return built(
        _UNCHECKED_PUT if unchecked else wire.Put,
        request_id,
        target,
        body,
        wire_int(delivery, "delivery"),
        wire_int(uma, "uma"),
        msg_class,
        msg_type,
        priority,
        timeout_ms,
        correlation_id,
        resp_q,
        headers,
    )


_UNCHECKED_PUT = functools.partial(build_unchecked, wire.Put)


def get_request(request_id: int, timeout_ms: Any) -> wire.Get:
    """The Get; its one field from the caller checked here (-1 .. 2**63-1 ms)."""
    if type(timeout_ms) is int and -1 <= timeout_ms <= _INT64_MAX:
        return build_unchecked_from(GET, (request_id, timeout_ms))
    return built(wire.Get, request_id, timeout_ms)


def confirm_request(request_id: int, seq: Any, confirm_value: Any, force_j: Any) -> wire.Confirm:
    """The Confirm; unchecked for an int seq in range, confirm value 0 and a ForceJrn.
    A message passed whole (`q.confirm(message)`, a newcomer's first try) is refused
    saying what to pass: "Confirm.seq must be an int, got Message" did not."""
    if (
        type(seq) is int
        and 0 <= seq <= _UINT64_MAX
        and type(confirm_value) is int
        and confirm_value == 0
        and type(force_j) is ForceJrn
    ):
        return build_unchecked_from(CONFIRM, (request_id, seq, 0, int(force_j)))
    if isinstance(getattr(seq, "seq", None), int):  # a Message given for its seq
        raise FieldRefused(
            Status.BADPARAM,
            f"confirm takes the message's seq, got a {type(seq).__name__}: "
            "confirm(message.seq), or message.confirm()",
        )
    return built(wire.Confirm, request_id, seq, confirm_value, wire_int(force_j, "force_j"))
