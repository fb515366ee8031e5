"""Field rules of events: derived from their msgspec annotations, worded for humans.

msgspec checks a decoded frame against each event's annotations (types, ranges,
lengths, literals) in C. Two things it cannot do are done here, in Python:

- check an event built in Python (msgspec does not validate `__init__`), so a bad
  Put is refused where it is built, naming the field, as before;
- word a refusal the way the protocol always has ("Put.priority must be 0..99, got
  120"), and check what msgspec lets through in free-form dict/list fields (msgpack
  ext types, timestamps, tuple keys, nesting deeper than `NEST_MAX`).

Each field's `Check` is derived once per class from `msgspec.inspect.type_info`, so
the annotation is the single source of a field's rule.
"""

from __future__ import annotations

import reprlib
import threading
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import inspect as mi
from msgspec.structs import astuple

from mrs.limits import FRAME_BYTES_MAX_DEFAULT as FRAME_BYTES_MAX_DEFAULT  # re-exported
from mrs.protocol.errors import LocalProtocolError
from mrs.protocol.plain_data import INT64 as INT64  # re-exported
from mrs.protocol.plain_data import NEST_MAX as NEST_MAX  # re-exported
from mrs.protocol.plain_data import UINT64_MAX as UINT64_MAX  # re-exported
from mrs.protocol.plain_data import plain_data_problem as plain_data_problem  # re-exported

PROTOCOL_VERSION = 1

INT32 = (-(2**31), 2**31 - 1)

_REPR = reprlib.Repr()
_REPR.maxlevel = 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 60
"""Shows at most 4 levels of a value: a frame nested 1,000 deep must not make the
error message itself raise RecursionError."""


def _short(value: Any) -> str:
    try:
        text = _REPR.repr(value)
    except Exception as exc:  # noqa: BLE001 - a value whose repr fails still gets a message
        text = f"<{type(value).__name__}: unprintable ({type(exc).__name__})>"
    return text if len(text) <= 60 else text[:57] + "..."


def worded(owner: str, name: str, problem: str) -> str:
    """ "Put.priority must be 0..99, got 120"; an item's problem names its place
    ("LinkNotice.notices[0].seq must be ...")."""
    return f"{owner}.{name}{'' if problem[:1] in '[.' else ' '}{problem}"


def _never(value: Any) -> bool:
    return False


class Check:
    """One field's rule: `ok` is the fast test (a closure: no attribute lookups), and
    only when it fails does `problem` decide (an IntEnum is a fine int) and word it."""

    deep = False
    """True for free-form fields that must be looked into even after msgspec decoded them."""
    ok: Callable[[Any], bool] = staticmethod(_never)

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` ("must be ..., got ..."), or None if it is fine."""
        raise NotImplementedError


_RANGE_WORDS = {
    (1, INT64[1]): "1..2**63-1",
    (0, UINT64_MAX): "0..2**64-1",
    INT64: "in int64 range",
    INT32: "in int32 range",
}


class IntCheck(Check):
    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.what = _RANGE_WORDS.get((lo, hi)) or (f">= {lo}" if hi == INT64[1] else f"{lo}..{hi}")

    def ok(self, value: Any) -> bool:
        return type(value) is int and self.lo <= value <= self.hi

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"must be an int, got {type(value).__name__}"
        if not self.lo <= value <= self.hi:
            return f"must be {self.what}, got {value}"
        return None


def _is_str(value: Any) -> bool:
    return type(value) is str


class StrCheck(Check):
    ok = staticmethod(_is_str)

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, str) else f"must be a str, got {type(value).__name__}"


class BoundedStrCheck(Check):
    """A str of `length_min..length_max` characters (a queue name as people write it)."""

    def __init__(self, length_min: int, length_max: int | None) -> None:
        self.length_min, self.length_max = length_min, length_max

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, str):
            return f"must be a str, got {type(value).__name__}"
        top = len(value) if self.length_max is None else self.length_max
        if not self.length_min <= len(value) <= top:
            return f"must be {self.length_min}..{top} characters, got {len(value)}"
        return None


class OneOfCheck(Check):
    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = choices
        self.ok = lambda value: type(value) is str and value in choices

    def problem(self, value: Any) -> str | None:
        if isinstance(value, str) and value in self.choices:
            return None
        return f"must be one of {', '.join(map(repr, self.choices))}, got {_short(value)}"


class BytesCheck(Check):
    def __init__(self, max_len: int | None = None) -> None:
        self.max_len = top = max_len if max_len is not None else UINT64_MAX
        self.ok = lambda value: type(value) is bytes and len(value) <= top

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, bytes):
            return f"must be bytes, got {type(value).__name__}"
        if len(value) > self.max_len:
            return f"must be at most {self.max_len} bytes, got {len(value)}"
        return None


class DictCheck(Check):
    """A dict of plain msgpack data (no ext types, no Timestamp), or None if optional."""

    deep = True

    def __init__(self, optional: bool = False) -> None:
        self.optional = optional

    def problem(self, value: Any) -> str | None:
        if value is None and self.optional:
            return None
        if not isinstance(value, dict):
            wanted = "a dict or None" if self.optional else "a dict"
            return f"must be {wanted}, got {type(value).__name__}"
        return plain_data_problem(value)


class ListCheck(Check):
    """A list of plain msgpack data, or None if optional (a Get's selection)."""

    deep = True

    def __init__(self, optional: bool = False) -> None:
        self.optional = optional

    def problem(self, value: Any) -> str | None:
        if value is None and self.optional:
            return None
        if not isinstance(value, list):
            return f"must be a list, got {type(value).__name__}"
        return plain_data_problem({"items": value})


class StructListCheck(Check):
    """A list of typed items (msgspec structs of the given classes: a batch's puts,
    a link frame's messages, results and notices), with its length bounds if the
    annotation gives them. Built or decoded items are structs; a refused frame's raw
    arrays are worded field by field (`raw_problem`, for `mrs.protocol.explain`).

    Not deep: a decoded list was checked by msgspec in C (item types, each item's own
    fields, the length bounds), so this loop runs only for lists built in Python. It
    ran once per put of every PutBatch the server decoded, 1% of its samples with
    eight producers (benchmarks/README.md)."""

    def __init__(
        self, item_types: tuple[type, ...], length_min: int = 0, length_max: int | None = None
    ) -> None:
        self.item_types = item_types
        self.length_min, self.length_max = length_min, length_max
        tags = [cls.__struct_config__.tag for cls in item_types]
        self.by_tag = dict(zip(tags, item_types, strict=True)) if tags[0] is not None else None
        self.tag_field = item_types[0].__struct_config__.tag_field
        self.names = " or ".join(t.__name__ for t in item_types)

    def length_words(self) -> str:
        if self.length_max is None:
            return f"at least {self.length_min}"
        return f"{self.length_min}..{self.length_max}"

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, list):
            return f"must be a list, got {type(value).__name__}"
        top = len(value) if self.length_max is None else self.length_max
        if not self.length_min <= len(value) <= top:
            return f"must hold {self.length_words()} items, got {len(value)}"
        for index, item in enumerate(value):
            if type(item) not in self.item_types:
                return f"[{index}] must be a {self.names}, got {_short(item)}"
        return None

    def raw_problem(self, value: Any) -> str | None:
        """`problem` for a refused frame's field, whose items are still raw arrays."""
        if not isinstance(value, list):
            return f"must be a list, got {type(value).__name__}"
        top = len(value) if self.length_max is None else self.length_max
        if not self.length_min <= len(value) <= top:
            return f"must hold {self.length_words()} items, got {len(value)}"
        for index, item in enumerate(value):
            problem = self._item_problem(item)
            if problem is not None:
                return f"[{index}]{problem}"
        return None

    def _item_problem(self, item: Any) -> str | None:
        """Why one raw item (an array of a refused frame) is not one of the item
        types, naming its field; None if it would be."""
        if not isinstance(item, list):
            return f" must be a {self.names}, got {_short(item)}"
        fields = item
        cls = self.item_types[0]
        if self.by_tag is not None:
            tag = item[0] if item else None
            if type(tag) not in (str, int) or tag not in self.by_tag:
                kinds = ", ".join(map(repr, self.by_tag))
                return f".{self.tag_field} must be one of {kinds}, got {_short(tag)}"
            cls, fields = self.by_tag[tag], item[1:]
        names = cls.__struct_fields__
        if len(fields) != len(names):
            return f" ({cls.__name__}) has {len(fields)} fields, expected {len(names)}"
        for (name, _ok, check), field_value in zip(rules_of(cls)[0], fields, strict=True):
            if (problem := check.problem(field_value)) is not None:
                return f".{name} {problem}"
        return None


class ItemListCheck(Check):
    """A list of ints or strs within bounds (GiveBack's seqs, ShowPending's queues),
    `length_min..length_max` long. Not deep: msgspec checks a decoded one (each item's
    bounds, the length) in C."""

    def __init__(self, item: Check, length_min: int, length_max: int | None) -> None:
        self.item = item
        self.length_min, self.length_max = length_min, length_max

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, list):
            return f"must be a list, got {type(value).__name__}"
        if len(value) < self.length_min:
            return f"must hold at least {self.length_min} items, got {len(value)}"
        if self.length_max is not None and len(value) > self.length_max:
            return f"must hold at most {self.length_max} items, got {len(value)}"
        for index, item in enumerate(value):
            if (problem := self.item.problem(item)) is not None:
                return f"[{index}] {problem}"
        return None


class BoolCheck(Check):
    def ok(self, value: Any) -> bool:
        return type(value) is bool

    def problem(self, value: Any) -> str | None:
        return None if type(value) is bool else f"must be a bool, got {type(value).__name__}"


def check_for(info: mi.Type) -> Check:
    """The Check of one field, from msgspec's description of its annotation."""
    if isinstance(info, mi.IntType):
        lo = INT64[0] if info.ge is None else info.ge
        return IntCheck(lo, UINT64_MAX if info.le is None else info.le)
    if isinstance(info, mi.StrType):
        if info.min_length or info.max_length is not None:
            return BoundedStrCheck(info.min_length or 0, info.max_length)
        return StrCheck()
    if isinstance(info, mi.BoolType):
        return BoolCheck()
    if isinstance(info, mi.BytesType):
        return BytesCheck(info.max_length)
    if isinstance(info, mi.LiteralType):
        return OneOfCheck(tuple(info.values))
    if isinstance(info, mi.DictType):
        return DictCheck()
    if isinstance(info, mi.UnionType):
        kinds = {type(t) for t in info.types}
        if kinds == {mi.DictType, mi.NoneType}:
            return DictCheck(optional=True)
        if kinds == {mi.ListType, mi.NoneType}:
            return ListCheck(optional=True)
    if isinstance(info, mi.ListType):
        item = info.item_type
        if isinstance(item, mi.StructType):
            return StructListCheck((item.cls,), info.min_length or 0, info.max_length)
        if isinstance(item, mi.UnionType) and all(isinstance(t, mi.StructType) for t in item.types):
            return StructListCheck(
                tuple(t.cls for t in item.types), info.min_length or 0, info.max_length
            )
        if isinstance(item, mi.IntType | mi.StrType):
            return ItemListCheck(check_for(item), info.min_length or 0, info.max_length)
        return ListCheck()
    raise TypeError(f"no protocol check for a field of type {info}")


# -- validation on construction --------------------------------------------------------


class _DecodeState(threading.local):
    decoding = False
    """True while msgspec decodes a frame in this thread: it has checked the fields."""


DECODE_STATE = _DecodeState()
Rules = tuple[tuple[str, Callable[[Any], bool], Check], ...]


def rules_of(cls: type[msgspec.Struct]) -> tuple[Rules, Rules]:
    """(every field's rule, the deep fields' rules) of an event class."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    rules = tuple((f.name, check.ok, check) for f in info.fields for check in [check_for(f.type)])
    return rules, tuple(rule for rule in rules if rule[2].deep)


def validate(event: Any, rules: Rules) -> None:
    """Raise LocalProtocolError naming the first field of `event` that breaks its rule."""
    for (name, ok, check), value in zip(rules, astuple(event), strict=True):
        if not ok(value):
            problem = check.problem(value)
            if problem is not None:
                raise LocalProtocolError(worded(type(event).__name__, name, problem))
