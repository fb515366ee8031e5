"""The Delivery event of a queue entry, as a get or a batch get hands it over.

Its own module so the hand-over (mrs.group.handover) and the batch get
(mrs.group.batch_get) build it the same way, checked or not (see below).
"""

from __future__ import annotations

from mrs import protocol as wire
from mrs.protocol.post_init import build_unchecked_from
from mrs.queues import Entry


def delivery_event(request_id: int, entry: Entry, status: int) -> wire.Delivery:
    """The Delivery of `entry`, checked: this is where a record read back from the
    journal with a field no client could have put (tampered, or written by a bug) is
    refused, and `hand_over` quarantines it (tests/test_poison.py). A trusted entry
    (`Entry.trusted`: made from a Put checked at decode, or by the server) is not
    checked twice: that check was about 5% of the server's CPU per get."""
    fields = (
        request_id,
        entry.seq,
        entry.body,
        entry.source.text,
        entry.target.text,
        entry.msg_class,
        entry.msg_type,
        entry.priority,
        int(entry.delivery),
        int(status),
        entry.correlation_id,
        entry.put_time_ns,
        entry.dead_letter_header,
        entry.headers,
    )
    if entry.trusted:
        return build_unchecked_from(wire.Delivery, fields)
    return wire.Delivery(*fields)  # type: ignore[arg-type]  # checked here: the point
