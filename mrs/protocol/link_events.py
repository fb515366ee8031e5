"""Link events: what two groups say to each other over a link, after the handshake."""

from __future__ import annotations

from mrs.protocol.base import EventStruct, finish
from mrs.protocol.fields import RequestId


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
