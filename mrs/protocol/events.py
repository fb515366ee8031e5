"""Client and server events: what an application and a server say to each other."""

from __future__ import annotations

from dataclasses import dataclass

from mrs.model import CORRELATION_ID_BYTES_MAX, PRIORITY_MAX
from mrs.protocol.checks import (
    _BYTES,
    _I32,
    _I64,
    _REQUEST_ID,
    _SEQ,
    _STR,
    INT64,
    _Bytes,
    _Dict,
    _event,
    _Int,
    _OneOf,
)
from mrs.protocol.link_events import LINK_EVENTS, LinkAck, LinkNotice, LinkTransfer

# -- events: client -> server -------------------------------------------------------


@dataclass(frozen=True, slots=True)
@_event(1, protocol_version=_I64, program=_STR, role=_OneOf("app", "link"))
class Hello:
    """First frame of a client: who it is. role is "app" or "link" (another group)."""

    protocol_version: int
    program: str
    role: str = "app"


@dataclass(frozen=True, slots=True)
@_event(10, request_id=_REQUEST_ID, queue=_STR)
class Attach:
    """Attach this connection to a queue ("G.Q" or a name)."""

    request_id: int
    queue: str


@dataclass(frozen=True, slots=True)
@_event(
    12,
    request_id=_REQUEST_ID,
    target=_STR,
    body=_BYTES,
    delivery=_I32,
    uma=_I32,
    msg_class=_I64,
    msg_type=_I64,
    priority=_Int(0, PRIORITY_MAX),
    timeout_ms=_Int(0, INT64[1], ">= 0"),
    correlation_id=_Bytes(CORRELATION_ID_BYTES_MAX),
    resp_q=_STR,
    headers=_Dict(optional=True),
)
class Put:
    """Send a message. uma 0 means "not given"; delivery/uma are checked by the server.
    timeout_ms 0 means the default (30 s), as a MessageQ timeout of 0 does.
    headers: application/tool metadata carried with the message (e.g. a replay's
    origin), journaled with it and delivered as is."""

    request_id: int
    target: str
    body: bytes
    delivery: int
    uma: int
    msg_class: int
    msg_type: int
    priority: int
    timeout_ms: int
    correlation_id: bytes
    resp_q: str
    headers: dict | None = None


@dataclass(frozen=True, slots=True)
@_event(14, request_id=_REQUEST_ID, timeout_ms=_Int(-1, INT64[1], ">= -1"))
class Get:
    """Take the next message. timeout_ms: -1 wait forever, 0 poll, > 0 wait that long."""

    request_id: int
    timeout_ms: int


@dataclass(frozen=True, slots=True)
@_event(16, request_id=_REQUEST_ID, seq=_SEQ, confirm_value=_I64, force_j=_I64)
class Confirm:
    """Confirm a delivered recoverable message by its seq."""

    request_id: int
    seq: int
    confirm_value: int
    force_j: int


@dataclass(frozen=True, slots=True)
@_event(20, request_id=_REQUEST_ID)
class CancelGet:
    """Withdraw the parked Get whose id is request_id. If it is still parked the
    server answers that Get with Failure(TIMEOUT) and it takes no message; if a
    message was already handed to it, its Delivery stands (the client keeps it for
    the next get), so nothing is lost either way. No reply of its own."""

    request_id: int


REPLY_WHEN_STORED_HEADER = "reply_when_stored"
"""A Put header (true) asking for the PutDone once the message is durably stored
(DQF or SAF), whatever its notification mode; AK/CONF notifications still follow.
The client-side SAF journal drains with it, so a record leaves the client's journal
only when the server has stored it."""
CLIENT_SAF_BACKLOG_HEADER = "client_saf_backlog"
"""On a drained put: records still in the client's journal (`mrs status` shows it)."""


@dataclass(frozen=True, slots=True)
@_event(18, request_id=_REQUEST_ID)
class StatusRequest:
    """Ask the server for its status."""

    request_id: int


# -- events: server -> client -------------------------------------------------------


@dataclass(frozen=True, slots=True)
@_event(2, protocol_version=_I64, group_id=_I64, group_name=_STR, message_bytes_max=_I64)
class Welcome:
    """The server's answer to Hello. message_bytes_max lets a client refuse an
    oversized body itself (MSGTOOBIG) instead of sending a frame the server must
    reject by closing the connection; 0 = not stated."""

    protocol_version: int
    group_id: int
    group_name: str
    message_bytes_max: int = 0


@dataclass(frozen=True, slots=True)
@_event(11, request_id=_REQUEST_ID, group=_I64, queue=_I64)
class Attached:
    """Attach succeeded: the address attached to."""

    request_id: int
    group: int
    queue: int


@dataclass(frozen=True, slots=True)
@_event(13, request_id=_REQUEST_ID, status=_I64, delivery_status=_I64, seq=_SEQ, uma_status=_I64)
class PutDone:
    """The PSB of a put."""

    request_id: int
    status: int
    delivery_status: int
    seq: int
    uma_status: int


@dataclass(frozen=True, slots=True)
@_event(
    15,
    request_id=_REQUEST_ID,
    seq=_SEQ,
    body=_BYTES,
    source=_STR,
    target=_STR,
    msg_class=_I64,
    msg_type=_I64,
    priority=_Int(0, PRIORITY_MAX),
    delivery=_I32,
    delivery_status=_I64,
    correlation_id=_Bytes(CORRELATION_ID_BYTES_MAX),
    put_time_ns=_I64,
    dead_letter_header=_Dict(optional=True),
    headers=_Dict(optional=True),
)
class Delivery:
    """A message for a Get. source and target are "G.Q" strings."""

    request_id: int
    seq: int
    body: bytes
    source: str
    target: str
    msg_class: int
    msg_type: int
    priority: int
    delivery: int
    delivery_status: int
    correlation_id: bytes
    put_time_ns: int
    dead_letter_header: dict | None
    headers: dict | None = None


@dataclass(frozen=True, slots=True)
@_event(17, request_id=_REQUEST_ID, seq=_SEQ, status=_I64)
class Confirmed:
    """The outcome of a Confirm."""

    request_id: int
    seq: int
    status: int


@dataclass(frozen=True, slots=True)
@_event(19, request_id=_REQUEST_ID, info=_Dict())
class StatusReply:
    """The server's status, as plain data."""

    request_id: int
    info: dict


@dataclass(frozen=True, slots=True)
@_event(30, request_id=_REQUEST_ID, status=_I64, message=_STR)
class Failure:
    """A request failed (e.g. a get timed out); the connection stays open."""

    request_id: int
    status: int
    message: str


@dataclass(frozen=True, slots=True)
@_event(31, status=_I64, message=_STR)
class Fatal:
    """A connection-level error; its sender closes the connection after sending it."""

    status: int
    message: str


# -- heartbeats (either side, after the handshake) ------------------------------------


@dataclass(frozen=True, slots=True)
@_event(50, nonce=_I64)
class Ping:
    """Are you there? The receiver answers a Pong with the same nonce. Sent after a
    silence (mrs.watchdog), so a peer that vanished without FIN or RST is noticed."""

    nonce: int


@dataclass(frozen=True, slots=True)
@_event(51, nonce=_I64)
class Pong:
    """The answer to a Ping."""

    nonce: int


HEARTBEAT_EVENTS = (Ping, Pong)
CLIENT_EVENTS = (
    Hello,
    Attach,
    Put,
    Get,
    Confirm,
    StatusRequest,
    CancelGet,
    *LINK_EVENTS,
    *HEARTBEAT_EVENTS,
)
SERVER_EVENTS = (
    Welcome,
    Attached,
    PutDone,
    Delivery,
    Confirmed,
    StatusReply,
    Failure,
    Fatal,
    *LINK_EVENTS,
    *HEARTBEAT_EVENTS,
)
Event = (
    Hello
    | Attach
    | Put
    | Get
    | Confirm
    | StatusRequest
    | CancelGet
    | Welcome
    | Attached
    | PutDone
    | Delivery
    | Confirmed
    | StatusReply
    | Failure
    | Fatal
    | LinkTransfer
    | LinkAck
    | LinkNotice
    | Ping
    | Pong
)
