"""The message's shapes, and every conversion between them: each is written once, here.

A message takes six shapes on its way from one application to another. Each exists
because its holder needs something the others cannot give it:

- `wire.Put` (mrs.protocol.events), held by a client's request and the server's
  decoder: what an application may send, checked field by field as its frame is decoded.
- `Entry` (here), held by the group's queues, rooms and timers: the server's working
  form, numbered, its addresses resolved and its mode an enum, with the state a put
  leaves on it (confirm callbacks, byte account, delivery count).
- `Record` (journals.record), held by the DQF, SAF, DLJ and PCJ journals: the durable
  form, positional and checksummed, what a restart reads back.
- `TransferredMessage` (mrs.protocol.link_events), held on a link between two groups:
  its target group is the link's peer, and `ordered` marks a SAF drain.
- `wire.Delivery` (mrs.protocol.events), held on the wire to a consumer: what a get
  answers, its addresses as text, with its delivery status.
- `Message` (mrs.model), held by the application: the public API's message, with its
  confirm.

The conversions, with who calls them:

- Put -> Entry: `entry_from_put` (intake, once the put is checked; `PutFields` is the
  Put's field order).
- Entry -> Record: `record_from_entry`, and `encode_entry` (its bytes, straight from the
  entry: every recoverable put); Record -> Entry: `entry_from_record` (recovery, the cold
  backlog, the SAF drain), after `record_sound`.
- Entry -> TransferredMessage: `transfer_fields` (outbound, SAF drain, MRS_ACKs);
  TransferredMessage -> Entry: `entry_from_transfer` (inbound, after its poison check).
- Entry -> Delivery: `delivery_event` (handover, batch get), unchecked when
  `Entry.trusted` or when a record read back `fits_a_delivery`.
- Entry -> Entry: `mrs_ack_entry` (an MRS_ACK made by the server), `nonrecoverable_copy`
  (a message returned to its sender or dead-lettered in memory), `moved_copy` (an
  operator's move).

Two conversions live with their holders, outside this module, because of the layer
rule (tests/rules/test_layers.py): Delivery -> Message in `clients.pending.Requests.message`
(`clients` may not import `mrs.group`), and DLJ Record -> Message in `mrs.dlq.sources`
(the DLQ handler, a layer above: it reads the journal, not a group). A client's own
SAF journal keeps a Put as a Record of its own (`clients.saf_drain`: its target is
still a name, and its `extra` carries the Put's timeout and response queue).

Why one module: the six shapes share twelve fields whose order and meaning must agree
everywhere; a field added to a message (a header MRS reads, a new column) is added
here, to every conversion at once. The module is compiled (mrs.native.loader): most of
these run once per put or per get, so each is a positional call with no dict built
and no field copied twice (benchmarks/README.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast

import msgspec
from msgspec.structs import astuple

from journals import Record
from journals.record import encode_values
from mrs import protocol as wire
from mrs.core.delivery import Refused, supported_pair
from mrs.core.seqspace import GROUP_SHIFT as SEQ_GROUP_SHIFT
from mrs.errors import ProtocolError
from mrs.limits import (
    ADDRESSES_CACHED_MAX,
    CORRELATION_ID_BYTES_MAX,
    HEADERS_BYTES_MAX,
    IDEMPOTENCY_KEY_BYTES_MAX,
    PRIORITY_MAX,
)
from mrs.model import (
    MRS_ACK_TYPE,
    MRS_CLASS,
    REPLY_QUEUE_HEADER,
    Address,
    DeliveryMode,
    InterestPoint,
    Status,
    delivery_mode_of,
)
from mrs.protocol.checks import INT32, INT64
from mrs.protocol.event_types import DELIVERY
from mrs.protocol.link_events import TransferredMessage
from mrs.protocol.post_init import build_unchecked_from

DEAD_LETTER_HEADER = "dead_letter_header"
"""An application putting its own message on a DLQ gives its header here."""
PRINCIPAL_FIELD = "principal"
"""A record's `extra` key for the principal that put it (`Entry.principal`). In
`extra`, not a column of its own: records written before it was kept read as they
did, without it (journals.record's format is unchanged)."""
IDEMPOTENCY_HEADER = "idempotency_key"
"""A recoverable put whose headers carry this key is stored at most once per group
(the DQF-owning group remembers the keys it stored). jplay uses it so that a replay
interrupted at any point can be re-run without double delivery."""


# Read per message (entries read back, MRS_ACKs made): an enum member's alias saves
# ~30-50 ns per read once compiled (benchmarks/README.md, "Final aliases").
_NN_MEM: Final = DeliveryMode.NN_MEM


U32_MAX: Final = (1 << 32) - 1
_MODE_VALUES: Final = frozenset(int(mode) for mode in DeliveryMode)


_ACK_POINT: Final = InterestPoint.ACK

Notify = Callable[["Entry"], None]
"""A callback an entry runs when it is dequeued or confirmed (the put's answer)."""


@dataclass(slots=True, eq=False)
class ByteAccount:
    """Bytes of message bodies one connection has waiting in memory queues (what the
    guard connection_bytes_max bounds); queues charge and release it."""

    held_bytes: int = 0


@dataclass(eq=False)
class Entry:
    """One message as the group holds it: in a target queue, on its way to a link, or
    being journaled (the module docstring lists the other shapes)."""

    seq: int
    body: bytes | None
    """None for a journaled entry whose body was left on disk (read at delivery)."""
    source: Address
    target: Address
    delivery: DeliveryMode
    uma: int = 0
    msg_class: int = 0
    msg_type: int = 0
    priority: int = 0
    correlation_id: bytes = b""
    put_time_ns: int = 0
    dead_letter_header: dict | None = None
    headers: dict | None = None
    origin_group: int | None = None
    """For a message that came over a link: the group to tell about its confirm."""
    response_queue: Address | None = None
    """AK_CONF put in this group: where its MRS_ACK goes (journaled, for a restart)."""
    delivery_status: int | None = None
    """Forced delivery status (e.g. MSGUNDEL for a returned message); None = derive."""
    journaled: bool = False
    """True when the entry is backed by a DQF record (recoverable)."""
    trusted: bool = False
    """Every field came from a Put this server checked, from the server itself (an
    MRS_ACK) or from a DQF record `fits_a_delivery` passed: its Delivery is built
    unchecked. False for other records read back, what came over a link (both checked
    by `delivery_event`), and a put that passed its own MQDLH or a dead letter's
    context (fields the server took from headers)."""
    times_delivered: int = 0
    arrival: int = 0
    """Place in its queue's arrival order: an entry taken but not delivered goes back
    to this place, so a failed delivery never reorders the queue."""
    select_order: int = 0
    """Place in its queue's selection index (mrs.group.select_index), kept while the
    entry is out: given back, it is found at its place again (0: never indexed)."""
    on_dequeue: Notify | None = None
    """WF/AK_DEQ: the sender waits for the get."""
    on_confirm: Notify | None = None
    """WF/AK_ACK and WF/AK_CONF: the sender waits for the confirm."""
    account: ByteAccount | None = None
    """The putting connection's account, charged while the body waits in memory."""
    principal: str | None = None
    """The `[auth]` principal of the client that put it (None with auth off, for a
    message from another group, or one read back from a record written without it):
    journaled with it (`PRINCIPAL_FIELD`), so the DQF, SAF, PCJ and DLJ records of
    this group say who put it."""

    def __init__(
        self,
        seq: int,
        body: bytes | None,
        source: Address,
        target: Address,
        delivery: DeliveryMode,
        uma: int = 0,
        msg_class: int = 0,
        msg_type: int = 0,
        priority: int = 0,
        correlation_id: bytes = b"",
        put_time_ns: int = 0,
        dead_letter_header: dict | None = None,
        headers: dict | None = None,
        origin_group: int | None = None,
        response_queue: Address | None = None,
        delivery_status: int | None = None,
        journaled: bool = False,
        trusted: bool = False,
        times_delivered: int = 0,
        arrival: int = 0,
        select_order: int = 0,
        on_dequeue: Notify | None = None,
        on_confirm: Notify | None = None,
        account: ByteAccount | None = None,
        principal: str | None = None,
    ) -> None:
        # written out: a dataclass's generated __init__ stays interpreted (docs/native.md)
        self.seq = seq
        self.body = body
        self.source = source
        self.target = target
        self.delivery = delivery
        self.uma = uma
        self.msg_class = msg_class
        self.msg_type = msg_type
        self.priority = priority
        self.correlation_id = correlation_id
        self.put_time_ns = put_time_ns
        self.dead_letter_header = dead_letter_header
        self.headers = headers
        self.origin_group = origin_group
        self.response_queue = response_queue
        self.delivery_status = delivery_status
        self.journaled = journaled
        self.trusted = trusted
        self.times_delivered = times_delivered
        self.arrival = arrival
        self.select_order = select_order
        self.on_dequeue = on_dequeue
        self.on_confirm = on_confirm
        self.account = account
        self.principal = principal

    @property
    def needs_confirm(self) -> bool:
        return self.journaled or self.delivery.interest_point is _ACK_POINT


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
        and (not record.extra or extra_sound(record.extra))
    )


def extra_sound(extra: dict) -> bool:
    """Whether a record's `extra` can become an entry's fields: a response queue of two
    ints, headers a map. Why: found later, such a record failed its get with
    SERVER_ERROR and took every message read with it out of the queue, or (a response
    queue of text) stopped the server when its MRS_ACK was sent at the confirm."""
    resp_q = extra.get("resp_q")
    if resp_q is not None and not (
        type(resp_q) in (list, tuple)
        and len(resp_q) == 2
        and all(type(part) is int and 0 <= part <= U32_MAX for part in resp_q)
    ):
        return False
    headers = extra.get("headers")
    return headers is None or type(headers) is dict


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


_ENCODE_HEADERS: Final = msgspec.msgpack.Encoder().encode


def headers_problem(headers: dict) -> str | None:
    """Why a message's headers are too large to travel (HEADERS_BYTES_MAX), or None.
    Encoded again to be measured: only a put that has headers pays, about a
    microsecond for a few small ones."""
    size_bytes = len(_ENCODE_HEADERS(headers))
    if size_bytes <= HEADERS_BYTES_MAX:
        return None
    return f"headers of {size_bytes} bytes exceed {HEADERS_BYTES_MAX} (encoded)"


def _record_extra(entry: Entry) -> dict:
    extra: dict = {}
    if entry.headers:
        extra["headers"] = entry.headers
    if entry.principal is not None:
        extra[PRINCIPAL_FIELD] = entry.principal
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
        delivery_mode_of(record.delivery),
        record.uma,
        record.msg_class,
        record.msg_type,
        record.priority,
        record.correlation_id,
        record.put_time_ns,
        headers.get(DEAD_LETTER_HEADER) if headers else None,
        headers,
        extra.get("origin"),
        Address(*resp_q) if resp_q is not None else None,
        journaled=True,
        principal=extra.get(PRINCIPAL_FIELD),
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
        msg_class=MRS_CLASS,
        msg_type=MRS_ACK_TYPE,
        put_time_ns=put_time_ns,
        trusted=trusted,
    )


# -- the put -------------------------------------------------------------------------------

PutFields = tuple[int, str, bytes, int, int, int, int, int, int, bytes, str, Any]
"""A wire.Put's fields in order (request_id .. headers), as `astuple` gives them."""


def with_reply_queue(headers: dict | None, response_queue: Address) -> dict:
    """A put's headers with its `resp_q` in them (REPLY_QUEUE_HEADER, "G.Q"), for a put
    that named a response queue other than its own: the receiver reads it as
    `Message.resp_q`. An application's own header of that name is kept as it is (it
    said where to reply). Added before the headers are measured, so a put whose headers
    it takes past HEADERS_BYTES_MAX is refused here, not by the group it is sent to."""
    if headers is not None and REPLY_QUEUE_HEADER in headers:
        return headers
    return {**(headers or {}), REPLY_QUEUE_HEADER: response_queue.text}


def entry_from_put(
    seq: int,
    body: bytes,
    source: Address,
    target: Address,
    mode: DeliveryMode,
    uma: int,
    msg_class: int,
    msg_type: int,
    priority: int,
    correlation_id: bytes,
    put_time_ns: int,
    own_header: dict | None,
    headers: dict | None,
    account: ByteAccount | None,
    trusted: bool,
    principal: str | None,
) -> Entry:
    """The entry of a checked put (mrs.group.intake): its addresses resolved, its mode
    and UMA checked, its own dead-letter header and passed context taken from its
    headers. Every put of every client passes here, compiled to compiled: a native
    call, its keywords resolved when it is compiled."""
    return Entry(
        seq,
        body,
        source,
        target,
        mode,
        uma,
        msg_class,
        msg_type,
        priority,
        correlation_id,
        put_time_ns,
        own_header,
        headers,
        account=account,
        trusted=trusted,
        principal=principal,
    )


# -- between groups ------------------------------------------------------------------------


class TransferError(ProtocolError, ValueError):
    """A peer sent a transfer that does not decode: the link is broken."""


def transfer_fields(entry: Entry, ordered: bool = False) -> TransferredMessage:
    """An entry as sent over a link; `ordered` for the SAF drain (mrs.group.inbound).
    Only a queued entry leaves its body on disk: what a link sends (a put for another
    group, a SAF record read back, an MRS_ACK) always holds it."""
    body = entry.body
    assert body is not None, f"message {entry.seq} sent over a link without its body"
    return TransferredMessage(
        entry.seq,
        entry.target.queue,
        entry.source.group,
        entry.source.queue,
        body,
        entry.msg_class,
        entry.msg_type,
        entry.priority,
        int(entry.delivery),
        int(entry.uma),
        entry.correlation_id,
        entry.put_time_ns,
        entry.headers,
        ordered,
    )


TransferFields = tuple[int, int, int, int, bytes, int, int, int, int, int, bytes, int, Any, bool]
"""A TransferredMessage's fields in order (seq .. ordered), as `astuple` gives them."""


def transfer_sound(message: TransferredMessage) -> bool:
    """Whether a transferred message without headers keeps every rule a client's put
    keeps: `mrs.group.quarantine.transfer_problem`'s quick answer, as `record_sound` is
    `record_problem`'s. Every SAF-drained message is asked, in compiled code, with no
    dict of its fields and no Put built (that was about 7% of the receiver's CPU per
    drained message, benchmarks/README.md); a message with headers (free-form, with
    the idempotency and dead-letter rules) or one this says no to goes through the
    checks that word the problem. Each test is one of `wire.Put`'s field rules, the
    mode/UMA pair one that `check_mode_and_uma` accepts, the addresses and put time
    those of `transfer_problem`.

    The fields are read in one call (`astuple`, as `mrs.group.intake` reads a Put's)
    and untyped: a peer's message may hold anything (a test builds one unchecked),
    and compiled code would raise TypeError on a typed read of a field of the wrong
    type, where this must answer no."""
    fields: tuple[Any, ...] = astuple(message)
    (
        _seq,
        target_queue,
        source_group,
        source_queue,
        body,
        msg_class,
        msg_type,
        priority,
        delivery,
        uma,
        correlation_id,
        put_time_ns,
        headers,
        _ordered,
    ) = fields
    return (
        headers is None
        and type(delivery) is int
        and type(uma) is int
        and supported_pair(delivery, uma)
        and type(target_queue) is int
        and type(source_group) is int
        and type(source_queue) is int
        and 0 <= target_queue <= U32_MAX
        and 0 <= source_group <= U32_MAX
        and 0 <= source_queue <= U32_MAX
        and type(put_time_ns) is int
        and _I64_MIN <= put_time_ns <= _I64_MAX
        and type(msg_class) is int
        and type(msg_type) is int
        and _I64_MIN <= msg_class <= _I64_MAX
        and _I64_MIN <= msg_type <= _I64_MAX
        and type(priority) is int
        and 0 <= priority <= PRIORITY_MAX
        and type(body) is bytes
        and type(correlation_id) is bytes
        and len(correlation_id) <= CORRELATION_ID_BYTES_MAX
    )


def entry_from_transfer(
    group_id: int, peer_id: int, message: TransferredMessage
) -> tuple[Entry, bool]:
    """The entry (and its `ordered` flag) for a message group `peer_id` sent to group
    `group_id`, once `transfer_sound` or `mrs.group.quarantine.transfer_problem` found
    nothing a client could not have put. TransferError: it still does not make an
    entry, the link is broken. A drain sends every message here: its fields are read
    in one call (`astuple`), its mode comes from a dict and its addresses from
    `address_of`'s cache, as for a record read back."""
    try:
        (
            seq,
            target_queue,
            source_group,
            source_queue,
            body,
            msg_class,
            msg_type,
            priority,
            delivery,
            uma,
            correlation_id,
            put_time_ns,
            headers,
            ordered,
        ) = cast(TransferFields, astuple(message))
        if seq >> SEQ_GROUP_SHIFT != peer_id:
            # A group's seqs carry its id (mrs.core.seqspace); another's would be stored
            # under the key of a message of that group here (one in this group's DQF
            # overwritten: lost) and deduped against its keys.
            raise TransferError(f"seq {seq} is not one of group {peer_id}'s")
        mode = delivery_mode_of(delivery)
        entry = Entry(
            seq,
            body,
            address_of(source_group, source_queue),
            address_of(group_id, target_queue),
            mode,
            uma,
            msg_class,
            msg_type,
            priority,
            correlation_id,
            put_time_ns,
            (headers or {}).get(DEAD_LETTER_HEADER),
            headers,
            peer_id if mode.recoverable else None,
        )
    except (ValueError, TypeError) as error:
        raise TransferError(f"bad transferred message: {error}") from None
    return entry, ordered


# -- to a consumer -----------------------------------------------------------------------

_I64_MIN: Final = INT64[0]
_I64_MAX: Final = INT64[1]
_I32_MIN: Final = INT32[0]
_I32_MAX: Final = INT32[1]


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
        and 0 <= record.priority <= PRIORITY_MAX
        and _I32_MIN <= record.delivery <= _I32_MAX
        and _I64_MIN <= record.put_time_ns <= _I64_MAX
        and len(record.correlation_id) <= CORRELATION_ID_BYTES_MAX
        and "headers" not in record.extra
    )


# -- copies --------------------------------------------------------------------------------


def nonrecoverable_copy(entry: Entry, target: Address) -> Entry:
    """The message sent on to `target` in memory (returned to its sender, or to a DLQ
    that does not journal): its fields, none of its state in this queue."""
    return Entry(
        seq=entry.seq,
        body=entry.body,
        source=entry.source,
        target=target,
        delivery=entry.delivery,
        uma=entry.uma,
        msg_class=entry.msg_class,
        msg_type=entry.msg_type,
        priority=entry.priority,
        correlation_id=entry.correlation_id,
        put_time_ns=entry.put_time_ns,
        headers=entry.headers,
        principal=entry.principal,
    )


def moved_copy(entry: Entry, seq: int, target: Address, headers: dict) -> Entry:
    """The message as an operator's move stores it on `target` (mrs.ops.admin_actions):
    a new seq there and the headers given (its `moved` header), the rest as it was."""
    return Entry(
        seq=seq,
        body=entry.body,
        source=entry.source,
        target=target,
        delivery=entry.delivery,
        uma=entry.uma,
        msg_class=entry.msg_class,
        msg_type=entry.msg_type,
        priority=entry.priority,
        correlation_id=entry.correlation_id,
        put_time_ns=entry.put_time_ns,
        dead_letter_header=entry.dead_letter_header,
        headers=headers,
        origin_group=entry.origin_group,
        response_queue=entry.response_queue,
        delivery_status=entry.delivery_status,
        journaled=entry.journaled,
        times_delivered=entry.times_delivered,
        on_dequeue=entry.on_dequeue,
        on_confirm=entry.on_confirm,
        principal=entry.principal,
    )
