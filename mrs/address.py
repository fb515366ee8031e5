"""A queue's address on the bus (GROUP.QUEUE), compiled (mrs.native.loader).

Why its own compiled module: every message carries two (source and target), and the
server reads their `group` and `queue` about ten times per put, from compiled code.
As an interpreted slotted dataclass each read was a generic attribute lookup (~40
ns, 2-3% of the server's samples under 8P × 125 puts); a native class's attribute
is a field read. `mrs.model` re-exports it, so `from mrs.model import Address`
stays the way to name it.
"""

from __future__ import annotations


def id_number(text: str) -> bool:
    """Digits 0-9 only, at most 19 of them: a group or queue number as typed. Why
    not isdigit() alone: it also accepts "²", which int() refuses, and each such
    test (an address, an admin or failover group, a grant, a rules table's FWDQM)
    ended as an unexpected ValueError."""
    return 0 < len(text) <= 19 and text.isascii() and text.isdigit()


class Address:
    """A queue on the bus: GROUP.QUEUE, e.g. 2.20; `text` is "G.Q", made once (every
    delivery carries its source and target as text).

    Immutable by convention, as the frozen dataclass it replaces was by force:
    nothing assigns to an Address once made (it is a dict key, and cached by
    `mrs.group.shapes.address_of`). Equal and hashed by (group, queue), as before."""

    group: int
    queue: int
    text: str

    def __init__(self, group: int, queue: int) -> None:
        self.group = group
        self.queue = queue
        self.text = f"{group}.{queue}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Address):
            return NotImplemented
        return self.group == other.group and self.queue == other.queue

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Address):
            return NotImplemented
        return self.group != other.group or self.queue != other.queue

    def __hash__(self) -> int:
        return hash((self.group, self.queue))

    def __repr__(self) -> str:
        return f"Address(group={self.group}, queue={self.queue})"

    def __str__(self) -> str:
        return self.text

    @classmethod
    def parse(cls, text: str) -> Address:
        """Parse 'G.Q'. Names are resolved by the config, not here."""
        group_text, dot, queue_text = text.partition(".")
        if not (dot and id_number(group_text) and id_number(queue_text)):
            raise ValueError(f"not a queue address (GROUP.QUEUE): {text[:60]!r}")
        return cls(int(group_text), int(queue_text))
