"""Turn an event class's field rules into one function that says whether all hold.

Why: every event built in Python is checked field by field (`checks.validate`): a
loop that calls one `Check.ok` per field. A server sends a Delivery, a Confirmed and
a PutDone for every message it carries, and a client builds a Put, a Get and a
Confirm; that loop cost 0.7-1.7 µs per event. The function made here runs the same
tests inline in one loop over a plan of plain tuples (no call per scalar field) and
only says yes or no: when it says no, `validate` runs as before, finds the first
field that breaks its rule and words the refusal. So the rules and their wording
stay where they are (mrs.protocol.checks); this is only their fast path. No code is
generated (tests/unit/test_protocol.py forbids it in the protocol package).

A field whose rule is not a plain scalar test (a free-form dict or list) is checked
by its `Check.problem`, as `validate` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from msgspec.structs import astuple

from mrs.protocol.checks import BytesCheck, IntCheck, OneOfCheck, Rules, StrCheck

_INT, _STR, _BYTES, _CHOICE, _OTHER = range(5)


def _step(check: object) -> tuple[int, Any, Any]:
    """One field's test as (kind, a, b)."""
    if type(check) is IntCheck:
        return _INT, check.lo, check.hi
    if type(check) is StrCheck:
        return _STR, None, None
    if type(check) is BytesCheck:
        return _BYTES, check.max_len, None
    if type(check) is OneOfCheck:
        return _CHOICE, frozenset(check.choices), None
    return _OTHER, check.problem, None  # type: ignore[attr-defined]


def compile_rules(rules: Rules) -> Callable[[Any], bool]:
    """`all_ok(event)`: True when every field of `event` keeps its rule."""
    plan = tuple(_step(check) for _name, _ok, check in rules)

    def all_ok(event: Any) -> bool:
        for (kind, a, b), value in zip(plan, astuple(event)):  # noqa: B905 - same length
            kind_of = type(value)
            if kind == _INT:
                if kind_of is not int and (kind_of is bool or not isinstance(value, int)):
                    return False  # an IntEnum (e.g. Status) is a fine int; a bool is not
                if not a <= value <= b:
                    return False
            elif kind == _STR:
                if kind_of is not str:
                    return False
            elif kind == _BYTES:
                if kind_of is not bytes or len(value) > a:
                    return False
            elif kind == _CHOICE:
                if kind_of is not str or value not in a:
                    return False
            elif a(value) is not None:
                return False
        return True

    return all_ok
