"""Selective reception: which pending message a get may take (MessageQ's `sel_filter`,
`pams_set_select`; IBM MQ's match on CorrelId).

Why a typed value and not a callback: a selection crosses the wire (the group picks
the message, so a client never sees what it did not ask for) and the group answers
the common keys from an index (mrs.group.select_index) instead of a scan, which it
can only do for keys it understands. A `Selection` is built once and reused for every
get, as a `pams_set_select` index is; on the wire it is plain data, a list of
`[attribute, operator, value]` triples, all of which must hold (AND).

Attributes: `correlation_id` (bytes), `priority`, `msg_class`, `msg_type` (ints),
`source` ("G.Q"). Operators: eq, ne, gt, lt, ge, le (ordering ones on ints only).
Among the pending messages that match, the get takes the one the queue would hand out
first: highest priority, then first arrived (docs/delivery-modes.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from mrs.errors import BadParameter, Refused
from mrs.limits import CORRELATION_ID_BYTES_MAX, PRIORITY_MAX, SELECTION_KEYS_MAX
from mrs.model import Address, Status

EQ: Final = "eq"
NE: Final = "ne"
GT: Final = "gt"
LT: Final = "lt"
GE: Final = "ge"
LE: Final = "le"
OPERATORS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    EQ: lambda a, b: a == b,
    NE: lambda a, b: a != b,
    GT: lambda a, b: a > b,
    LT: lambda a, b: a < b,
    GE: lambda a, b: a >= b,
    LE: lambda a, b: a <= b,
}
INT_ATTRIBUTES: Final = ("priority", "msg_class", "msg_type")
ATTRIBUTES: Final = ("correlation_id", *INT_ATTRIBUTES, "source")
_INT64_MAX: Final = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class Key:
    """One condition: `attribute operator value`, e.g. Key("priority", "ge", 5)."""

    attribute: str
    operator: str
    value: int | bytes | str


@dataclass(frozen=True, slots=True)
class Selection:
    """Keys that must all hold. Build with the helpers (`by_correlation_id`, ...) or
    from keys; `to_wire()` is what a Get carries."""

    keys: tuple[Key, ...]

    def __init__(self, *keys: Key) -> None:
        object.__setattr__(self, "keys", tuple(keys))
        check_keys(self.keys)

    def to_wire(self) -> list[list]:
        return [[key.attribute, key.operator, key.value] for key in self.keys]

    def equal_value(self, attribute: str) -> int | bytes | str | None:
        """The value an `eq` key gives `attribute`, or None (what the index looks up)."""
        for key in self.keys:
            if key.attribute == attribute and key.operator == EQ:
                return key.value
        return None

    def matches(self, message: Any) -> bool:
        """Whether a message (anything with the attributes; `source` an Address or
        its text) satisfies every key."""
        for key in self.keys:
            value = getattr(message, key.attribute)
            if key.attribute == "source":
                value = getattr(value, "text", value)
            if not OPERATORS[key.operator](value, key.value):
                return False
        return True

    def priority_allows(self, priority: int) -> bool:
        """Whether the priority keys alone admit `priority` (lanes to look in)."""
        return all(
            OPERATORS[key.operator](priority, key.value)
            for key in self.keys
            if key.attribute == "priority"
        )


_SOURCE_TEXT: Final = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
"""A source as messages carry it (`Address.text`): decimal numbers, no leading zeros."""


def by_correlation_id(correlation_id: bytes) -> Selection:
    return Selection(Key("correlation_id", EQ, correlation_id))


def by_class_type(msg_class: int, msg_type: int | None = None) -> Selection:
    keys = [Key("msg_class", EQ, msg_class)]
    if msg_type is not None:
        keys.append(Key("msg_type", EQ, msg_type))
    return Selection(*keys)


def by_priority(operator: str, priority: int) -> Selection:
    return Selection(Key("priority", operator, priority))


def by_source(source: str | Address) -> Selection:
    """The messages put from `source`: "G.Q", or an Address (a message's `source`, so
    `by_source(reply.source)` reads as it should: it was refused BADPARAM)."""
    if isinstance(source, Address):
        source = source.text
    return Selection(Key("source", EQ, source))


def _refuse(problem: str) -> BadParameter:
    return BadParameter(Status.BADPARAM, f"bad selection: {problem}")


def check_keys(keys: Sequence[Key]) -> None:
    """Raise BadParameter (BADPARAM, one line) unless every key is one the group
    serves: where an application builds its Selection, before anything is sent."""
    if not keys:
        raise _refuse("no keys (omit select for the default selection)")
    if len(keys) > SELECTION_KEYS_MAX:
        raise _refuse(f"{len(keys)} keys, at most {SELECTION_KEYS_MAX}")
    for key in keys:
        _check_key(key)


def _check_key(key: Key) -> None:
    if type(key) is not Key:  # a list of keys given as one: an AttributeError before
        hint = ""
        if isinstance(key, list | tuple):
            hint = ": pass the keys one by one, Selection(*keys)"
        raise _refuse(f"a key is a Key(attribute, operator, value), not {type(key).__name__}{hint}")
    attribute, operator, value = key.attribute, key.operator, key.value
    if type(attribute) is not str or type(operator) is not str:  # a list: unhashable
        raise _refuse(
            f"a key's attribute and operator are strings, got {type(attribute).__name__} "
            f"and {type(operator).__name__}"
        )
    if attribute not in ATTRIBUTES:
        raise _refuse(f"attribute {attribute!r} is not one of {', '.join(ATTRIBUTES)}")
    if operator not in OPERATORS:
        raise _refuse(f"operator {operator!r} is not one of {', '.join(OPERATORS)}")
    if attribute in INT_ATTRIBUTES:
        if type(value) is not int:
            raise _refuse(f"{attribute} takes an int, not {type(value).__name__}")
        high = PRIORITY_MAX if attribute == "priority" else _INT64_MAX
        if not -_INT64_MAX - 1 <= value <= high:
            raise _refuse(f"{attribute} {value} is out of range")
        return
    if operator not in (EQ, NE):
        raise _refuse(f"{attribute} takes eq or ne only, not {operator}")
    if attribute == "correlation_id":
        if type(value) is not bytes or len(value) > CORRELATION_ID_BYTES_MAX:
            raise _refuse(f"correlation_id takes bytes of at most {CORRELATION_ID_BYTES_MAX}")
        return
    if type(value) is not str or _SOURCE_TEXT.fullmatch(value) is None:
        # as a message carries it: "01.13" or "NYC.ORDERS" passed, and matched nothing
        raise _refuse(f"source takes a queue address 'G.Q' in numbers (e.g. '1.13'), got {value!r}")


def from_wire(keys: object) -> Selection:
    """The Selection a Get carried, or Refused(BADPARAM) with one line (the group's
    answer to the get; the connection stays)."""
    try:
        return _parsed(keys)
    except BadParameter as bad:
        raise Refused(Status.BADPARAM, bad.message) from None


def _parsed(keys: object) -> Selection:
    if not isinstance(keys, list):
        raise _refuse(f"a list of [attribute, operator, value], not {type(keys).__name__}")
    parsed = []
    for item in keys[: SELECTION_KEYS_MAX + 1]:
        if not isinstance(item, list | tuple) or len(item) != 3:
            raise _refuse("each key is [attribute, operator, value]")
        attribute, operator, value = item
        if not isinstance(attribute, str) or not isinstance(operator, str):
            raise _refuse("attribute and operator are strings")
        parsed.append(Key(attribute, operator, value))
    return Selection(*parsed)
