"""Link events: what two groups say to each other over a link, after the handshake.

Every item a link frame carries is a typed struct: a transferred message
(`TransferredMessage`), the answer for one item (`LinkResult`) and the notices, a
tagged union (`AnyNotice`: the kind is the tag, the first element on the wire).
msgspec decodes a frame straight into them and checks each field's shape; a frame
that does not fit is refused PROTOCOL_ERROR naming the field
("LinkNotice.notices[0].seq must be >= 0, got -1"), and the link is closed.

Shape, not rules: a transferred message's ranges and modes (priority 0..99, a
delivery mode that exists, a 32-bit queue) are not checked here but by the
receiving group (`mrs.group.quarantine.transfer_problem`), so one bad message from a
peer is refused alone (BADPARAM) instead of breaking the link for the good ones.

Wire form (msgpack arrays): a message is the 14 fields of `TRANSFER_FIELDS`, a result
``[seq, status, stored_seq]``, a notice ``[kind, seq, status]`` -- the same bytes as
the positional lists before them, and the notice journal keeps that form.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec
from msgspec import Meta

from mrs.limits import PENDING_QUEUES_MAX
from mrs.protocol.base import EventStruct, finish
from mrs.protocol.checks import Rules, rules_of
from mrs.protocol.fastcheck import compile_rules
from mrs.protocol.fields import I64, RequestId, Seq
from mrs.protocol.post_init import item_post_init


class LinkItem(msgspec.Struct, array_like=True, frozen=True, gc=False, forbid_unknown_fields=True):
    """Base of the items in a link frame: checked when built in Python (naming the
    field), by msgspec when decoded."""

    _rules: ClassVar[Rules]
    _all_ok: ClassVar[Any]
    """`_rules` compiled into one test (mrs.protocol.fastcheck); `validate` words a no."""

    __post_init__ = item_post_init
    """Checks an item built in Python (mrs.protocol.post_init, compiled)."""


class TransferredMessage(LinkItem):
    """One message for the peer group's queue `target_queue`, as its origin group sent
    it. `ordered`: sent by the SAF drain (see mrs.group.inbound)."""

    seq: Seq
    target_queue: int
    source_group: int
    source_queue: int
    body: bytes
    msg_class: int
    msg_type: int
    priority: int
    delivery: int
    uma: int
    correlation_id: bytes
    put_time_ns: int
    headers: dict | None
    ordered: bool


TRANSFER_FIELDS: tuple[str, ...] = TransferredMessage.__struct_fields__


class LinkResult(LinkItem):
    """The answer for one transferred message or notice: its seq, a Status, and the
    seq it is stored under (the first copy's, for a duplicate)."""

    seq: Seq
    status: I64
    stored_seq: Seq


class Notice(LinkItem, tag_field="kind"):
    """News about one message, for the group that sent it: ``[kind, seq, status]`` on
    the wire (and in the notice journal), the kind being the tag."""

    kind: ClassVar[str]
    seq: Seq
    status: I64


class ConfNotice(Notice, tag="conf"):
    """The receiver confirmed the message (durable: answers WF_CONF and AK_CONF)."""


class DeqNotice(Notice, tag="deq"):
    """A nonrecoverable message was got (AK_DEQ, WF_DEQ)."""


class AckNotice(Notice, tag="ack"):
    """A nonrecoverable message was got and confirmed (AK_ACK, WF_ACK)."""


class ResyncNotice(Notice, tag="resync"):
    """The sender starts its SAF drain over: the receiver forgets the refused rest."""


class ForgetNotice(Notice, tag="forget"):
    """The sender will never resend this seq: the receiver drops its dedupe key."""


class RoomNotice(Notice, tag="room"):
    """DQF slots the receiver now holds for a drain that waits for room: `seq` is how
    many (the drain may send that many more)."""


class WaitNotice(Notice, tag="wait"):
    """The sender's drain waits for DQF room and counts on no slot held before: the
    receiver holds what is free for it and answers how many (the answer's
    `stored_seq`); later slots come as RoomNotices."""


class LeaveNotice(Notice, tag="leave"):
    """The sender's drain has nothing left to send: the receiver gives the slots it
    holds for it back to its own senders and other drains."""


NOTICES = (
    ConfNotice,
    DeqNotice,
    AckNotice,
    ResyncNotice,
    ForgetNotice,
    RoomNotice,
    WaitNotice,
    LeaveNotice,
)
AnyNotice = (
    ConfNotice
    | DeqNotice
    | AckNotice
    | ResyncNotice
    | ForgetNotice
    | RoomNotice
    | WaitNotice
    | LeaveNotice
)
NOTICE_OF_KIND: dict[str, type[Notice]] = {}
for _cls in NOTICES:
    _cls.kind = _cls.__struct_config__.tag
    NOTICE_OF_KIND[_cls.kind] = _cls
for _cls in (TransferredMessage, LinkResult, *NOTICES):
    _cls._rules = rules_of(_cls)[0]
    _cls._all_ok = staticmethod(compile_rules(_cls._rules))

_NOTICE_ENCODER = msgspec.msgpack.Encoder()
_NOTICE_DECODER: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(AnyNotice)


def encode_notice(notice: Notice) -> bytes:
    """A notice as the notice journal keeps it (its wire form, ``[kind, seq, status]``)."""
    return _NOTICE_ENCODER.encode(notice)


def decode_notice(data: bytes) -> AnyNotice:
    """A notice read back from the notice journal; msgspec.DecodeError if corrupt."""
    return _NOTICE_DECODER.decode(data)


class LinkTransfer(EventStruct, tag=40):
    """Messages for the peer group's queues, oldest first; answered by one LinkAck."""

    request_id: RequestId
    messages: list[TransferredMessage]


class LinkAck(EventStruct, tag=41):
    """Answer to a LinkTransfer or LinkNotice: one result per item, in order."""

    request_id: RequestId
    results: list[LinkResult]


class LinkNotice(EventStruct, tag=42):
    """News for the origin group about messages it sent (or about the link: resync,
    room, forget), one typed notice each."""

    request_id: RequestId
    notices: list[AnyNotice]


class LinkPendingQuery(EventStruct, tag=43):
    """How many messages wait on these queues of the peer group (its queue ids)? A
    client's ShowPending naming the peer's queues; answered by one LinkPendingCounts.
    Nothing is journaled: a query lost with the link is answered LINK_DOWN."""

    request_id: RequestId
    queues: Annotated[list[I64], Meta(min_length=1, max_length=PENDING_QUEUES_MAX)]


class LinkPendingCounts(EventStruct, tag=44):
    """The answer to a LinkPendingQuery, one int per queue in the order asked: the
    count of messages waiting (>= 0), or a negative Status (NOSUCHQUEUE for a queue
    the group does not have)."""

    request_id: RequestId
    counts: Annotated[list[I64], Meta(max_length=PENDING_QUEUES_MAX)]


LINK_EVENTS = (LinkTransfer, LinkAck, LinkNotice, LinkPendingQuery, LinkPendingCounts)
finish(*LINK_EVENTS)
