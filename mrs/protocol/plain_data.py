"""Whether a free-form field (a put's headers, a dead-letter header) is plain msgpack data.

Its own module so that it can be compiled (mrs.native.loader): it runs on the headers of
every put, in the client's check and in the server's decode, and a replay's puts all
carry headers (`mrs jplay`'s origin and key), where it was 10% of the jplay process's
samples and 4% of the server's. `mrs.protocol.checks` re-exports it.
"""

from __future__ import annotations

from typing import Any

from mrs.limits import NEST_DEPTH_MAX as NEST_MAX

INT64 = (-(2**63), 2**63 - 1)
UINT64_MAX = 2**64 - 1
_INT_MIN = INT64[0]

_SCALARS = (bool, str, bytes, float, type(None))
_LEAF_TYPES = frozenset(_SCALARS)
"""Exact types that need no look at all: the common header values."""
_KEY_TYPES = (int, *_SCALARS)


def plain_data_problem(root: dict) -> str | None:
    """What keeps `root` from being plain msgpack data, or None.

    Recursive, at most NEST_MAX deep (a deeper container is refused before it is
    entered), and quick for the usual case of str keys and scalar values."""
    return _container_problem(root, 0)


def _container_problem(item: Any, depth: int) -> str | None:
    if depth >= NEST_MAX:
        return f"is nested deeper than {NEST_MAX} levels"
    leaves = _LEAF_TYPES
    if isinstance(item, dict):
        for key, value in item.items():
            if type(key) is not str:
                if not isinstance(key, _KEY_TYPES):
                    return f"holds a key of type {type(key).__name__}"
                if (problem := _value_problem(key, depth + 1)) is not None:
                    return problem
            kind = type(value)
            if kind in leaves or (kind is int and _INT_MIN <= value <= UINT64_MAX):
                continue
            if (problem := _value_problem(value, depth + 1)) is not None:
                return problem
    else:
        for value in item:
            kind = type(value)
            if kind in leaves or (kind is int and _INT_MIN <= value <= UINT64_MAX):
                continue
            if (problem := _value_problem(value, depth + 1)) is not None:
                return problem
    return None


def _value_problem(value: Any, depth: int) -> str | None:
    if isinstance(value, _SCALARS):
        return None
    if isinstance(value, int):
        if not _INT_MIN <= value <= UINT64_MAX:
            return f"holds an int out of msgpack range: {value}"
        return None
    if isinstance(value, dict | list | tuple):
        return _container_problem(value, depth)
    return f"holds a value of type {type(value).__name__}"
