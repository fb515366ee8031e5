"""The MRS wire protocol, sans-I/O: bytes in, events out; events in, bytes out.

No sockets and no trio here (the shape is h11's): the caller feeds whatever it read to
`Connection.receive_data`, takes events from `Connection.next_event` (or all of them
at once from `Connection.events`), and writes whatever `Connection.send` returns.

Frames
------
Each frame is a 4-byte big-endian unsigned length N, then N bytes of msgpack encoding
an array ``[code, field1, field2, ...]``. Bodies are msgpack bin (bytes), names are
msgpack str. A frame longer than ``frame_bytes_max`` is refused as soon as its header
is seen, and never sent. Each event is a msgspec struct whose wire form is exactly
that array, decoded and checked by msgspec (docs/protocol.md draws a frame byte by
byte).

Modules, read top-down: `fields` (annotated field types), `checks` (the rules derived
from them, and their wording), `base` (the event base class), `events`,
`lookup_events`, `journal_events`, `admin_events` and `link_events` (the events),
`explain` (why a refused frame was refused, naming the field), `connection` (the
state machine). The I/O half is `mrs.transport.framed`.

State machine
-------------
Each side (client, server) has a state: START, OPEN or CLOSED. An event moves the
state of the side that sends it, following `_TRANSITIONS`:

=======  =======  ==============================================  =======
side     state    event                                           becomes
=======  =======  ==============================================  =======
client   START    Hello                                           OPEN
client   OPEN     Attach, Put, PutBatch, Get, GetBatch, Confirm,  OPEN
                  StatusRequest, Locate, ShowPending, SetPcj,
                  ReadJournal, CancelGet, GiveBack, AdminRequest,
                  Ping, Pong
server   START    Welcome (only once the client is OPEN)          OPEN
server   START    Fatal                                           CLOSED
server   OPEN     Attached, PutDone, Delivery, DeliveryBatch,     OPEN
                  Confirmed, AnswerBatch, StatusReply, Located,
                  PendingCounts, PcjState, JournalPage, AdminReply,
                  Failure, Ping, Pong
server   OPEN     Fatal                                           CLOSED
=======  =======  ==============================================  =======

So a client sends Hello first and exactly once; the server receives Hello before it
sends Welcome (or Fatal, which it may send at any time). The client may pipeline
requests right after its Hello without waiting for Welcome. Hello and Welcome must
carry `PROTOCOL_VERSION`. Anything not in the table -- an event of the wrong
direction, any event before the handshake, a second Hello or Welcome -- is a
`RemoteProtocolError` when received and a `LocalProtocolError` when sent. So is a
request whose id the same side already uses for an unanswered request. A PutBatch
has no id of its own: each of its puts takes its own id, answered one by one; an
AnswerBatch (sent only to a client whose Hello set `answer_batches`) has none either:
each of its PutDones and Confirmeds answers its own request.

Once a Fatal has been sent or received the connection is closed: `next_event` returns
`CLOSED` and `send` refuses everything. After a `RemoteProtocolError` the connection
is broken: `next_event` raises the same error again, and the only thing a server may
still send is a Fatal telling the peer why.

Layer: may import only the root vocabulary (`mrs.errors`, `mrs.limits`, `mrs.model`)
and `core`; sockets live in `transport`.
"""

from mrs.protocol.admin_events import AdminReply, AdminRequest
from mrs.protocol.checks import FRAME_BYTES_MAX_DEFAULT, PROTOCOL_VERSION
from mrs.protocol.connection import (
    CLIENT,
    CLOSED,
    MID_FRAME,
    NEED_DATA,
    OPEN,
    SERVER,
    START,
    Connection,
)
from mrs.protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from mrs.protocol.events import (
    CLIENT_EVENTS,
    CLIENT_SAF_BACKLOG_HEADER,
    HEARTBEAT_EVENTS,
    REPLY_WHEN_STORED_HEADER,
    SERVER_EVENTS,
    AnswerBatch,
    Attach,
    Attached,
    CancelGet,
    Confirm,
    Confirmed,
    Delivery,
    DeliveryBatch,
    Event,
    Failure,
    Fatal,
    Get,
    GetBatch,
    GiveBack,
    Hello,
    JournalPage,
    Locate,
    Located,
    PcjState,
    PendingCounts,
    Ping,
    Pong,
    Put,
    PutBatch,
    PutDone,
    ReadJournal,
    SetPcj,
    ShowPending,
    StatusReply,
    StatusRequest,
    Welcome,
)
from mrs.protocol.link_events import (
    LINK_EVENTS,
    NOTICES,
    TRANSFER_FIELDS,
    AckNotice,
    AnyNotice,
    ConfNotice,
    DeqNotice,
    ForgetNotice,
    LeaveNotice,
    LinkAck,
    LinkNotice,
    LinkPendingCounts,
    LinkPendingQuery,
    LinkResult,
    LinkTransfer,
    Notice,
    ResyncNotice,
    RoomNotice,
    TransferredMessage,
    WaitNotice,
)

__all__ = [
    "AdminReply",
    "AdminRequest",
    "CLIENT",
    "CLIENT_EVENTS",
    "CLIENT_SAF_BACKLOG_HEADER",
    "CLOSED",
    "FRAME_BYTES_MAX_DEFAULT",
    "HEARTBEAT_EVENTS",
    "MID_FRAME",
    "LINK_EVENTS",
    "NOTICES",
    "NEED_DATA",
    "OPEN",
    "PROTOCOL_VERSION",
    "REPLY_WHEN_STORED_HEADER",
    "SERVER",
    "SERVER_EVENTS",
    "START",
    "TRANSFER_FIELDS",
    "AckNotice",
    "AnswerBatch",
    "AnyNotice",
    "Attach",
    "Attached",
    "CancelGet",
    "ConfNotice",
    "Confirm",
    "Confirmed",
    "Connection",
    "DeqNotice",
    "Delivery",
    "DeliveryBatch",
    "Event",
    "Failure",
    "Fatal",
    "ForgetNotice",
    "Get",
    "GetBatch",
    "GiveBack",
    "Hello",
    "JournalPage",
    "LeaveNotice",
    "LinkAck",
    "LinkNotice",
    "LinkPendingCounts",
    "LinkPendingQuery",
    "LinkResult",
    "LinkTransfer",
    "LocalProtocolError",
    "Locate",
    "Located",
    "Notice",
    "PcjState",
    "PendingCounts",
    "Ping",
    "Pong",
    "ProtocolError",
    "Put",
    "PutBatch",
    "PutDone",
    "ReadJournal",
    "RemoteProtocolError",
    "ResyncNotice",
    "RoomNotice",
    "SetPcj",
    "ShowPending",
    "StatusReply",
    "StatusRequest",
    "TransferredMessage",
    "WaitNotice",
    "Welcome",
]
