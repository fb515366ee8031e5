"""Link events: what two groups say to each other over a link, after the handshake."""

from __future__ import annotations

from dataclasses import dataclass

from mrs.protocol.checks import _REQUEST_ID, _event, _List


@dataclass(frozen=True, slots=True, eq=True)
@_event(40, request_id=_REQUEST_ID, messages=_List())
class LinkTransfer:
    """Messages for the peer group's queues, oldest first; answered by one LinkAck.
    Each message is a list of fields in `mrs.links.TRANSFER_FIELDS` order."""

    request_id: int
    messages: list


@dataclass(frozen=True, slots=True, eq=True)
@_event(41, request_id=_REQUEST_ID, results=_List())
class LinkAck:
    """Answer to a LinkTransfer or LinkNotice: one [seq, status] per item, in order."""

    request_id: int
    results: list


@dataclass(frozen=True, slots=True, eq=True)
@_event(42, request_id=_REQUEST_ID, notices=_List())
class LinkNotice:
    """News for the origin group about messages it sent: [kind, seq, status] each
    (kind "conf": the receiver confirmed; "deq": got; "ack": confirmed, ACK mode)."""

    request_id: int
    notices: list


LINK_EVENTS = (LinkTransfer, LinkAck, LinkNotice)
