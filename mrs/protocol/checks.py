"""Field checks for events: each field's rule, and the wording of what is wrong.

Each event class declares one check per field. From those, `event` generates the
class's __post_init__: a fast inline test per field (exact types, ranges); only when
that test trips does the check's `problem` run to decide (an IntEnum is a fine int)
and word the error.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from typing import Any, TypeVar

from mrs.protocol.errors import LocalProtocolError

PROTOCOL_VERSION = 1
FRAME_BYTES_MAX_DEFAULT = 2 * 1024 * 1024

_T = TypeVar("_T", bound=type)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT64_MAX = 2**64 - 1
NEST_MAX = 100
"""Deepest nesting accepted inside the dict fields (info, dead_letter_header)."""

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


class _Check:
    def bad_expr(self, v: str) -> str:
        """A Python expression over variable `v`, true when `v` may be invalid."""
        raise NotImplementedError

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` ("must be ..., got ..."), or None if it is fine."""
        raise NotImplementedError


class _Int(_Check):
    def __init__(self, lo: int, hi: int, what: str | None = None) -> None:
        self.lo, self.hi = lo, hi
        self.what = what or f"{lo}..{hi}"

    def bad_expr(self, v: str) -> str:
        return f"type({v}) is not int or not {self.lo} <= {v} <= {self.hi}"

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"must be an int, got {type(value).__name__}"
        if not self.lo <= value <= self.hi:
            return f"must be {self.what}, got {value}"
        return None


class _Str(_Check):
    def bad_expr(self, v: str) -> str:
        return f"type({v}) is not str"

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, str) else f"must be a str, got {type(value).__name__}"


class _OneOf(_Check):
    def __init__(self, *choices: str) -> None:
        self.choices = choices

    def bad_expr(self, v: str) -> str:
        return f"type({v}) is not str or {v} not in {self.choices!r}"

    def problem(self, value: Any) -> str | None:
        if isinstance(value, str) and value in self.choices:
            return None
        return f"must be one of {', '.join(map(repr, self.choices))}, got {_short(value)}"


class _Bytes(_Check):
    def __init__(self, max_len: int | None = None) -> None:
        self.max_len = max_len

    def bad_expr(self, v: str) -> str:
        expr = f"type({v}) is not bytes"
        return expr if self.max_len is None else f"{expr} or len({v}) > {self.max_len}"

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, bytes):
            return f"must be bytes, got {type(value).__name__}"
        if self.max_len is not None and len(value) > self.max_len:
            return f"must be at most {self.max_len} bytes, got {len(value)}"
        return None


class _Dict(_Check):
    """A dict of plain msgpack data (no ext types, no Timestamp), or None if optional."""

    def __init__(self, optional: bool = False) -> None:
        self.optional = optional

    def bad_expr(self, v: str) -> str:
        return "True"  # rare events: always look inside

    def problem(self, value: Any) -> str | None:
        if value is None and self.optional:
            return None
        if not isinstance(value, dict):
            wanted = "a dict or None" if self.optional else "a dict"
            return f"must be {wanted}, got {type(value).__name__}"
        return _plain_data_problem(value)


class _List(_Check):
    """A list of plain msgpack data (link events carry batches as lists)."""

    def bad_expr(self, v: str) -> str:
        return "True"

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, list):
            return f"must be a list, got {type(value).__name__}"
        return _plain_data_problem({"items": value})


_SCALARS = (bool, str, bytes, float, type(None))


def _plain_data_problem(root: dict) -> str | None:
    stack: list[tuple[Any, int]] = [(root, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, _SCALARS):
            continue
        if isinstance(item, int):
            if not INT64[0] <= item <= UINT64_MAX:
                return f"holds an int out of msgpack range: {item}"
            continue
        if depth >= NEST_MAX:
            return f"is nested deeper than {NEST_MAX} levels"
        if isinstance(item, dict):
            for key, val in item.items():
                if not isinstance(key, (int, *_SCALARS)):
                    return f"holds a key of type {type(key).__name__}"
                stack.append((key, depth + 1))
                stack.append((val, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((x, depth + 1) for x in item)
        else:
            return f"holds a value of type {type(item).__name__}"
    return None


_REQUEST_ID = _Int(1, INT64[1], "1..2**63-1")
_SEQ = _Int(0, UINT64_MAX, "0..2**64-1")
_I64 = _Int(*INT64, "in int64 range")
_I32 = _Int(*INT32, "in int32 range")
_STR = _Str()
_BYTES = _Bytes()


def _reject(event: Any, name: str, value: Any, check: _Check) -> None:
    problem = check.problem(value)
    if problem is not None:
        raise LocalProtocolError(f"{type(event).__name__}.{name} {problem}")


def _event(code: int, **checks: _Check) -> Callable[[_T], _T]:
    """Give an event class its wire code and a generated, validating __post_init__.

    Goes under @dataclass, so the dataclass sees the __post_init__.
    """

    def attach(cls: _T) -> _T:
        names = tuple(cls.__annotations__)
        if names != tuple(checks):
            raise TypeError(f"{cls.__name__}: checks {tuple(checks)} != fields {names}")
        lines = ["def __post_init__(self):"]
        namespace: dict[str, Any] = {"_reject": _reject}
        for i, (name, check) in enumerate(checks.items()):
            namespace[f"c{i}"] = check
            lines += [
                f"    v = self.{name}",
                f"    if {check.bad_expr('v')}:",
                f"        _reject(self, {name!r}, v, c{i})",
            ]
        # The wire form, without reflection per frame: [code, self.f1, self.f2, ...]
        lines += [
            "def _wire(self):",
            f"    return [{code}, {', '.join('self.' + name for name in names)}]",
        ]
        exec("\n".join(lines), namespace)  # source built from the constants above
        cls.__post_init__ = namespace["__post_init__"]
        cls._wire = namespace["_wire"]
        cls.code = code
        cls.field_names = names
        return cls

    return attach
