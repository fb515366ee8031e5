"""The check every event and link item runs when it is made (msgspec's
`__post_init__`), compiled.

Why: msgspec calls a struct's `__post_init__` for every one it decodes, not only for
those built in Python: a server decodes a Put and a Confirm for each message it
carries, a consumer a Delivery and a Confirmed. As an interpreted method it was 4.4%
of the server's samples in peerbench's end-to-end shape (benchmarks/README.md). msgspec calls it
as `type(event).__post_init__(event)`, so a compiled function serves as it is: no
bound method and no Python frame per event (mrs.native.loader compiles this module).

What is checked is the rules' business (mrs.protocol.checks): after a decode only the
free-form fields (msgspec checked the others in C); for an event built in Python every
field, by the compiled test first (mrs.protocol.fastcheck) and by `validate`, which
words the refusal, only when that says no.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any, Final

from mrs.limits import PUT_BATCH_BYTES_MAX
from mrs.protocol.checks import DECODE_STATE, validate, worded
from mrs.protocol.errors import LocalProtocolError

_DEEP_FIELDS: Final[dict[type, tuple[tuple[str, Any], ...]]] = {}
"""Each event class's (field name, check) of its deep rules, as a typed tuple: read
through `cls._deep_rules` (Any) each decode cost a class lookup and generic
iteration and unpacking per rule. One entry per event class."""


def _deep_fields(cls: type) -> tuple[tuple[str, Any], ...]:
    fields = _DEEP_FIELDS.get(cls)
    if fields is None:
        rules: Any = cls._deep_rules  # type: ignore[attr-defined]
        fields = _DEEP_FIELDS[cls] = tuple((name, check) for name, _ok, check in rules)
    return fields


def event_post_init(event: Any) -> None:
    """EventStruct.__post_init__."""
    cls = type(event)
    if DECODE_STATE.decoding:
        for name, check in _deep_fields(cls):
            value = getattr(event, name)
            if value is None:  # msgspec let None through: the field is Optional
                continue
            problem = check.problem(value)
            if problem is not None:
                raise LocalProtocolError(worded(cls.__name__, name, problem))
    elif not cls._all_ok(event):
        validate(event, cls._rules)


_BODY_OF: Final = attrgetter("body")


def put_batch_post_init(batch: Any) -> None:
    """PutBatch.__post_init__: the event's check, then the bound on its bodies' bytes.
    Compiled here: as an interpreted method it ran once per PutBatch frame on both
    sides, 0.9% of the server's samples under 1P puts (benchmarks/README.md)."""
    event_post_init(batch)
    # summed in C (map over the bodies), not a loop per put
    body_bytes = sum(map(len, map(_BODY_OF, batch.puts)))
    if body_bytes > PUT_BATCH_BYTES_MAX:
        raise LocalProtocolError(
            f"PutBatch.puts hold {body_bytes} bytes of bodies, more than "
            f"PUT_BATCH_BYTES_MAX {PUT_BATCH_BYTES_MAX}: send them in smaller batches"
        )


def item_post_init(item: Any) -> None:
    """LinkItem.__post_init__: msgspec checked every field of a decoded item."""
    if not DECODE_STATE.decoding:
        cls = type(item)
        if not cls._all_ok(item):
            validate(item, cls._rules)


def build_unchecked(cls: Any, *fields: Any) -> Any:
    """Build an event without the Python-side check of its fields (only free-form
    fields are looked into, as after a decode), for a caller that made or checked
    every field itself: the client's request path, where the generic check cost more
    than the rest of building a Put, and the server's answers (benchmarks/README.md). A free-form
    field given None is taken as an absent Optional one, as after a decode (msgspec
    lets None through only there): callers pass None only for those. The encoder
    still refuses what msgpack cannot carry, and the peer checks every frame it
    decodes. Compiled here (it was 0.6-0.7 µs a call interpreted; every PutDone and
    Delivery the server sends is built by it)."""
    return build_unchecked_from(cls, fields)


def build_unchecked_all(cls: Any, rows: Sequence[tuple]) -> list:
    """`build_unchecked_from` for many items of one class, the decode state set once:
    it is a thread-local, and setting it cost as much as building a LinkResult
    (a link answers each message of a transfer with one, benchmarks/README.md)."""
    state = DECODE_STATE
    state.decoding = True
    try:
        return [cls(*fields) for fields in rows]
    finally:
        state.decoding = False


def build_unchecked_from(cls: Any, fields: tuple) -> Any:
    """`build_unchecked(cls, *fields)` for fields already in a tuple, which is passed
    on as it is: from compiled code a star call first copies the tuple into a list
    and back, 322 ns against 152 ns for a Delivery's fourteen fields (benchmarks/README.md)."""
    state = DECODE_STATE
    state.decoding = True
    try:
        return cls(*fields)
    finally:
        state.decoding = False
