"""Link events: what two groups say to each other over a link, after the handshake."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from mrs.protocol.base import EventStruct, finish
from mrs.protocol.fields import I64, RequestId, Seq


class Notice(
    msgspec.Struct,
    array_like=True,
    frozen=True,
    gc=False,
    forbid_unknown_fields=True,
    tag_field="kind",
):
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
    """A DQF slot freed at the receiver: a drain that waited for room may send again."""


NOTICES = (ConfNotice, DeqNotice, AckNotice, ResyncNotice, ForgetNotice, RoomNotice)
AnyNotice = ConfNotice | DeqNotice | AckNotice | ResyncNotice | ForgetNotice | RoomNotice
NOTICE_OF_KIND: dict[str, type[Notice]] = {}
for _cls in NOTICES:
    _cls.kind = _cls.__struct_config__.tag
    NOTICE_OF_KIND[_cls.kind] = _cls


class LinkTransfer(EventStruct, tag=40):
    """Messages for the peer group's queues, oldest first; answered by one LinkAck.
    Each message is a list of fields in `mrs.links.TRANSFER_FIELDS` order."""

    request_id: RequestId
    messages: list


class LinkAck(EventStruct, tag=41):
    """Answer to a LinkTransfer or LinkNotice: one [seq, status] per item, in order."""

    request_id: RequestId
    results: list


class LinkNotice(EventStruct, tag=42):
    """News for the origin group about messages it sent: [kind, seq, status] each
    (kind "conf": the receiver confirmed; "deq": got; "ack": confirmed, ACK mode)."""

    request_id: RequestId
    notices: list


LINK_EVENTS = (LinkTransfer, LinkAck, LinkNotice)
finish(*LINK_EVENTS)
