"""The event base: a frozen, array-like msgspec struct whose wire form is [code, *fields].

Every event is a `msgspec.Struct` with `array_like=True` and its event code as the
tag, so msgspec encodes it as the msgpack array ``[code, field1, field2, ...]`` and
decodes such an array straight into the right class, checking each field against its
annotation (the `mrs.protocol.fields` types) in C. `gc=False`: events hold no
cycles, so the collector need not track the millions a busy server makes.

An event built in Python is checked in `__post_init__` (msgspec does not check
`__init__`), by the rules `mrs.protocol.checks` derives from the same annotations.
While msgspec decodes a frame it has checked the fields itself, so only the
free-form ones (dicts, lists) are looked into.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from mrs.protocol.checks import Rules, rules_of
from mrs.protocol.fastcheck import compile_rules
from mrs.protocol.post_init import build_unchecked as build_unchecked  # re-exported
from mrs.protocol.post_init import event_post_init


class EventStruct(
    msgspec.Struct, frozen=True, array_like=True, gc=False, forbid_unknown_fields=True
):
    """Base of every MRS event. `code` is its wire code; `field_names` its fields in
    wire order."""

    code: ClassVar[int]
    field_names: ClassVar[tuple[str, ...]]
    _rules: ClassVar[Rules]
    _deep_rules: ClassVar[Rules]
    _all_ok: ClassVar[Any]
    """`_rules` compiled into one test (mrs.protocol.fastcheck); `validate` words a no."""

    __post_init__ = event_post_init
    """Checks the event as it is made (mrs.protocol.post_init, compiled: msgspec calls
    it unbound, with the event, for every event decoded as well as built). A subclass
    with checks of its own calls `event_post_init(self)` first."""


def finish(*classes: Any) -> None:
    """Give each event class its code, field names and rules (once all are defined)."""
    for cls in classes:
        cls.code = cls.__struct_config__.tag
        cls.field_names = cls.__struct_fields__
        cls._rules, cls._deep_rules = rules_of(cls)
        cls._all_ok = staticmethod(compile_rules(cls._rules))
