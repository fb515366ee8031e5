"""The Delivery event of a queue entry, as a get or a batch get hands it over.

Its own module so the hand-over (mrs.group.handover) and the batch get
(mrs.group.batch_get) build it the same way, checked or not (see below), and so that
what makes a record read back from the DQF safe to deliver unchecked is decided next
to where the check is skipped (`fits_a_delivery`).
"""

from __future__ import annotations

from typing import Final

from journals import Record
from mrs import protocol as wire
from mrs.group.queues import Entry
from mrs.limits import CORRELATION_ID_BYTES_MAX, PRIORITY_MAX
from mrs.protocol.checks import INT32, INT64
from mrs.protocol.event_types import DELIVERY
from mrs.protocol.post_init import build_unchecked_from

_I64_MIN: Final = INT64[0]
_I64_MAX: Final = INT64[1]
_I32_MIN: Final = INT32[0]
_I32_MAX: Final = INT32[1]
_PRIORITY_MAX: Final = PRIORITY_MAX
_CORRELATION_ID_BYTES_MAX: Final = CORRELATION_ID_BYTES_MAX


def delivery_event(request_id: int, entry: Entry, status: int) -> wire.Delivery:
    """The Delivery of `entry`, checked: this is where a record read back from the
    journal with a field no client could have put (tampered, or written by a bug) is
    refused, and `hand_over` quarantines it (tests/process/test_poison.py). A trusted entry
    (`Entry.trusted`: made from a Put checked at decode, by the server, or read back
    from a record `fits_a_delivery` passed) is not checked twice: that check was
    about 5% of the server's CPU per get."""
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
        return build_unchecked_from(DELIVERY, fields)
    return DELIVERY(*fields)  # type: ignore[arg-type]  # checked here: the point


def fits_a_delivery(record: Record) -> bool:
    """Whether the Delivery of a record read back from the DQF keeps every rule of
    wire.Delivery without a field-by-field check: each scalar the record gives it is
    in its wire range, and it has no headers (free-form: left to the full check).

    The record's checksum and field types were checked when it was decoded, and its
    mode and addresses by `mrs.group.quarantine.record_problem`; what is left are ranges,
    tested here on native ints. Why: a consumer behind a deep queue gets every message
    from a cold backlog (mrs.group.backlog), and the generic check of its Delivery was 3.9%
    of the server's samples in peerbench's 8P/1C end-to-end shape (benchmarks/README.md). A record
    this refuses is checked as before, and refused and quarantined if it breaks a
    rule (tests/process/test_poison.py)."""
    return (
        record.seq >= 0
        and _I64_MIN <= record.msg_class <= _I64_MAX
        and _I64_MIN <= record.msg_type <= _I64_MAX
        and 0 <= record.priority <= _PRIORITY_MAX
        and _I32_MIN <= record.delivery <= _I32_MAX
        and _I64_MIN <= record.put_time_ns <= _I64_MAX
        and len(record.correlation_id) <= _CORRELATION_ID_BYTES_MAX
        and "headers" not in record.extra
    )
