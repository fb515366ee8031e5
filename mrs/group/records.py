"""Messages as the journals keep them, and the headers MRS itself reads.

Shared by the group (local puts, recovery) and the forwarding rules (SAF, transfers),
so neither has to import the other for it.
"""

from __future__ import annotations

import functools
from typing import Final

from journals import Record
from journals.record import encode_values
from mrs.core.delivery import Refused
from mrs.group.queues import Entry
from mrs.limits import ADDRESSES_CACHED_MAX, IDEMPOTENCY_KEY_BYTES_MAX
from mrs.model import MRS_ACK_TYPE, MRS_CLASS, Address, DeliveryMode, Status, delivery_mode_of

DEAD_LETTER_HEADER = "dead_letter_header"
"""An application putting its own message on a DLQ gives its header here."""
IDEMPOTENCY_HEADER = "idempotency_key"
"""A recoverable put whose headers carry this key is stored at most once per group
(the DQF-owning group remembers the keys it stored). jplay uses it so that a replay
interrupted at any point can be re-run without double delivery."""


# Read per message (entries read back, MRS_ACKs made): C statics, not module-dict
# lookups (benchmarks/README.md).
_DELIVERY_MODE_OF: Final = delivery_mode_of
_DEAD_LETTER_HEADER: Final = DEAD_LETTER_HEADER
_NN_MEM: Final = DeliveryMode.NN_MEM
_MRS_CLASS: Final = MRS_CLASS
_MRS_ACK_TYPE: Final = MRS_ACK_TYPE


U32_MAX: Final = (1 << 32) - 1
_MODE_VALUES: Final = frozenset(int(mode) for mode in DeliveryMode)


def record_sound(record: Record) -> bool:
    """Whether a journal record's mode and addresses let it become a queue entry:
    `mrs.group.quarantine.record_problem`'s quick answer, here so that the cold reader
    (mrs.group.recovery) asks it in compiled code for every message read back, and
    calls the interpreted checks, which word the problem, only when it says no."""
    delivery, target_queue = record.delivery, record.target_queue
    source_group, source_queue = record.source_group, record.source_queue
    return (
        type(delivery) is int
        and delivery in _MODE_VALUES
        and type(target_queue) is int
        and type(source_group) is int
        and type(source_queue) is int
        and 0 <= target_queue <= U32_MAX
        and 0 <= source_group <= U32_MAX
        and 0 <= source_queue <= U32_MAX
    )


def idempotency_key(headers: dict | None) -> str | None:
    if not headers or IDEMPOTENCY_HEADER not in headers:
        return None
    key = headers[IDEMPOTENCY_HEADER]
    if not isinstance(key, str) or not 0 < len(key.encode()) <= IDEMPOTENCY_KEY_BYTES_MAX:
        raise Refused(
            Status.BADPARAM,
            f"headers.{IDEMPOTENCY_HEADER} must be a string of "
            f"1..{IDEMPOTENCY_KEY_BYTES_MAX} bytes",
        )
    return key


def _record_extra(entry: Entry) -> dict:
    extra: dict = {}
    if entry.headers:
        extra["headers"] = entry.headers
    if entry.origin_group is not None:
        extra["origin"] = entry.origin_group
    if entry.response_queue is not None:
        extra["resp_q"] = [entry.response_queue.group, entry.response_queue.queue]
    return extra


def record_from_entry(entry: Entry, written_time_ns: int) -> Record:
    """The journal record of an entry. A body that could not be read back (an entry
    quarantined for it, mrs.group.dqf) is recorded empty: a record's body is bytes."""
    return Record(
        seq=entry.seq,
        target_group=entry.target.group,
        target_queue=entry.target.queue,
        source_group=entry.source.group,
        source_queue=entry.source.queue,
        body=entry.body if entry.body is not None else b"",
        msg_class=entry.msg_class,
        msg_type=entry.msg_type,
        priority=entry.priority,
        delivery=int(entry.delivery),
        uma=int(entry.uma),
        correlation_id=entry.correlation_id,
        put_time_ns=entry.put_time_ns,
        written_time_ns=written_time_ns,
        extra=_record_extra(entry),
    )


def encode_entry(entry: Entry, written_time_ns: int) -> bytes:
    """encode_record(record_from_entry(entry, written_time_ns)), without the Record:
    every recoverable put is encoded here (tests/unit/test_records_encode.py holds the two
    equal)."""
    target, source = entry.target, entry.source
    return encode_values(
        (
            entry.seq,
            target.group,
            target.queue,
            source.group,
            source.queue,
            entry.body,
            entry.msg_class,
            entry.msg_type,
            entry.priority,
            int(entry.delivery),
            int(entry.uma),
            entry.correlation_id,
            entry.put_time_ns,
            written_time_ns,
            0,  # confirm_value
            0,  # confirm_time_ns
            0,  # reason
            _record_extra(entry),
        )
    )


def entry_from_record(record: Record) -> Entry:
    """The queue entry of a journaled record. Every message read back from a cold
    backlog passes here (benchmarks/README.md): addresses come from a bounded cache and the mode
    from a dict, not a frozen dataclass and an enum call each."""
    extra = record.extra
    headers = extra.get("headers")
    resp_q = extra.get("resp_q")
    return Entry(
        record.seq,
        record.body,
        address_of(record.source_group, record.source_queue),
        address_of(record.target_group, record.target_queue),
        _DELIVERY_MODE_OF(record.delivery),
        record.uma,
        record.msg_class,
        record.msg_type,
        record.priority,
        record.correlation_id,
        record.put_time_ns,
        headers.get(_DEAD_LETTER_HEADER) if headers else None,
        headers,
        extra.get("origin"),
        Address(*resp_q) if resp_q is not None else None,
        journaled=True,
    )


address_of: Final = functools.lru_cache(maxsize=ADDRESSES_CACHED_MAX)(Address)
"""Address(group, queue), remembered (an Address is immutable): the same few queues
come back on every record read, and the cache is bounded."""


def mrs_ack_entry(
    seq: int, body: bytes, source: Address, target: Address, put_time_ns: int, trusted: bool
) -> Entry:
    """An MRS_ACK (class 28, type -801, body = the PSB's wire form) on its way to an AK
    sender's queue.

    Why here: interpreted code calling the compiled `Entry` with keywords pays ~1.4 µs
    for mypyc's keyword matching against ~0.2 µs by position, and an AK producer's
    server makes one of these per put (benchmarks/README.md); this compiled call passes them
    natively."""
    return Entry(
        seq=seq,
        body=body,
        source=source,
        target=target,
        delivery=_NN_MEM,
        msg_class=_MRS_CLASS,
        msg_type=_MRS_ACK_TYPE,
        put_time_ns=put_time_ns,
        trusted=trusted,
    )
