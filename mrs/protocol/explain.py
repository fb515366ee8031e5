"""Why a frame was refused: the slow path that words a decode failure, naming the field.

msgspec decodes good frames fast but words its refusals in its own terms ("Expected
`int` >= 1 - at `$[1]`"). When it refuses a frame, the frame is decoded again here
with the plain msgpack library and looked at step by step, so the peer is told what
the protocol has always told it: "frame is not valid msgpack: ...", "unknown event
code 99", "Get frame has 1 fields, expected 2", "Put.priority must be 0..99, got
120". Only refused frames come here, so its speed does not matter.
"""

from __future__ import annotations

import re
from typing import Any

import msgpack

from mrs.protocol.checks import StructListCheck, _short, worded

_FIELD_INDEX = re.compile(r"`\$\[(\d+)\]")


def _refuse_ext(code: int, data: bytes) -> Any:
    raise _Refusal(f"frame holds a msgpack ext type ({code})")


class _Refusal(Exception):
    """The wording found, raised out of the msgpack ext hook or the checks."""


def explain(payload: bytes, by_code: dict[int, Any], msgspec_error: BaseException) -> str:
    """The one-line reason a frame whose msgpack is `payload` is refused."""
    try:
        return _explain(payload, by_code, msgspec_error)
    except _Refusal as refusal:
        return str(refusal)


def _explain(payload: bytes, by_code: dict[int, Any], msgspec_error: BaseException) -> str:
    try:
        obj = msgpack.unpackb(payload, raw=False, strict_map_key=False, ext_hook=_refuse_ext)
    except _Refusal:
        raise
    except Exception as exc:  # noqa: BLE001 - msgpack raises many kinds: all mean "not msgpack"
        return f"frame is not valid msgpack: {type(exc).__name__}: {exc}"
    if type(obj) is not list or not obj:
        return f"frame is not a non-empty msgpack array: {_short(obj)}"
    code = obj[0]
    cls = by_code.get(code) if type(code) is int else None
    if cls is None:
        return f"unknown event code {_short(code)}"
    problem = _fields_problem(cls, obj, cls.__name__)
    if problem is not None:
        return problem
    names = cls.field_names
    # The checks found nothing msgspec did not like: say it in msgspec's words, by field.
    text = str(msgspec_error) or type(msgspec_error).__name__
    match = _FIELD_INDEX.search(text)
    if match and 1 <= int(match.group(1)) <= len(names):
        text = f"{text[: match.start()]}{cls.__name__}.{names[int(match.group(1)) - 1]}"
    return f"{cls.__name__} frame refused: {text[:200]}"


def _fields_problem(cls: Any, obj: list, where: str) -> str | None:
    """The first field of the array `obj` (an event of class `cls`) that breaks its
    rule, worded with `where` (e.g. "PutBatch.puts[3]") in front; None if all pass."""
    names = cls.field_names
    required = len(names) - len(cls.__struct_defaults__)  # defaults are the trailing fields
    if not required <= len(obj) - 1 <= len(names):
        noun = f"{where} frame" if where == cls.__name__ else where
        return f"{noun} has {len(obj) - 1} fields, expected {len(names)}"
    for (name, _ok, check), value in zip(cls._rules, obj[1:], strict=False):
        if isinstance(check, StructListCheck) and type(value) is list:
            if hasattr(check.item_types[0], "code"):  # items that are events (a batch)
                problem = _items_problem(check, value, f"{where}.{name}")
            else:  # a link frame's items: "LinkNotice.notices[0].seq must be ..."
                problem = check.raw_problem(value)
                problem = None if problem is None else worded(where, name, problem)
            if problem is not None:
                return problem
            continue
        problem = check.problem(value)
        if problem is not None:
            return worded(where, name, problem)
    return None


def _items_problem(check: StructListCheck, items: list, where: str) -> str | None:
    """A list of typed items, as raw arrays: its length, then each item's fields."""
    top = check.length_max if check.length_max is not None else len(items)
    if not check.length_min <= len(items) <= top:
        return f"{where} must hold {check.length_words()} items, got {len(items)}"
    by_code = {getattr(cls, "code", None): cls for cls in check.item_types}
    for index, item in enumerate(items):
        cls = by_code.get(item[0]) if type(item) is list and item and type(item[0]) is int else None
        if cls is None:
            names = " or ".join(t.__name__ for t in check.item_types)
            return f"{where}[{index}] must be a {names}, got {_short(item)}"
        problem = _fields_problem(cls, item, f"{where}[{index}]")
        if problem is not None:
            return problem
    return None
