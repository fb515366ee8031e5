"""Client and server events: what an application and a server say to each other."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from mrs.limits import (
    ANSWER_BATCH_ITEMS_MAX,
    GET_BATCH_ITEMS_MAX,
    LENT_REMEMBERED_MAX,
    PUT_BATCH_ITEMS_MAX,
    READ_AHEAD_MAX,
)
from mrs.protocol.admin_events import ADMIN_REPLIES, ADMIN_REQUESTS, AdminReply, AdminRequest
from mrs.protocol.base import EventStruct, finish
from mrs.protocol.fields import (
    I32,
    I64,
    CorrelationId,
    GetTimeoutMs,
    GroupId,
    Incarnation,
    NonNegativeMs,
    Priority,
    RequestId,
    Role,
    Seq,
)
from mrs.protocol.journal_events import JournalPage, PcjState, ReadJournal, SetPcj
from mrs.protocol.link_events import (
    LINK_EVENTS,
    LinkAck,
    LinkNotice,
    LinkPendingCounts,
    LinkPendingQuery,
    LinkTransfer,
)
from mrs.protocol.lookup_events import Locate, Located, PendingCounts, ShowPending
from mrs.protocol.post_init import put_batch_post_init

# -- events: client -> server -------------------------------------------------------


class Hello(EventStruct, tag=1, omit_defaults=True):
    """First frame of a client: who it is. role is "app" or "link" (another group);
    a link's Hello names the dialing group in `group` (0 for an application), and its
    program is free text for logs. Trailing fields left at their defaults are not
    sent (`omit_defaults`), so an application's Hello keeps the shape servers of
    earlier releases read: only a link's carries `incarnation`."""

    protocol_version: I64
    program: str
    role: Role = "app"
    group: GroupId = 0
    answer_batches: bool = False
    """The client reads AnswerBatch frames: the server may then send the PutDones and
    Confirmeds it has ready together in one frame (an older client, which does not
    send this field, gets one frame per answer)."""
    incarnation: Incarnation = b""
    """A link's: the dialing group's journals' incarnation (mrs.group.incarnation)."""
    term: Seq = 0
    """A link's from a replicated group: its active's term, so the peer refuses an
    old active that outlived its lease (mrs.group.incarnation `admit_term`); 0 (sent
    only before `welcome_term`) from an unreplicated group."""
    welcome_term: bool = False
    """A link's to a replicated group, from this release on: the dialer reads the
    accepting active's term in the Welcome (`Welcome.term`). Why a field of its own:
    a dialer of the release before refuses a Welcome longer than it knows, and a
    replicated one says a term too, so only this says the dialer takes the
    Welcome's term."""


class Attach(EventStruct, tag=10):
    """Attach this connection to a queue ("G.Q" or a name)."""

    request_id: RequestId
    queue: str


class Put(EventStruct, tag=12):
    """Send a message. uma 0 means "not given"; delivery/uma are checked by the server.
    timeout_ms 0 means the default (30 s), as a MessageQ timeout of 0 does.
    headers: application/tool metadata carried with the message (e.g. a replay's
    origin), journaled with it and delivered as is."""

    request_id: RequestId
    target: str
    body: bytes
    delivery: I32
    uma: I32
    msg_class: I64
    msg_type: I64
    priority: Priority
    timeout_ms: NonNegativeMs
    correlation_id: CorrelationId
    resp_q: str
    headers: dict | None = None


GetCount = Annotated[int, Meta(ge=1, le=GET_BATCH_ITEMS_MAX)]
"""How many messages a GetBatch asks for at most."""
ReadAheadCount = Annotated[int, Meta(ge=0, le=READ_AHEAD_MAX)]
"""How many messages a GetBatch may take beyond count_max (read-ahead)."""
GivenBackSeqs = Annotated[list[Seq], Meta(max_length=LENT_REMEMBERED_MAX)]
"""The seqs of a GiveBack: at most as many as a queue remembers lent."""
PutList = Annotated[list[Put], Meta(min_length=1, max_length=PUT_BATCH_ITEMS_MAX)]
"""The items of a PutBatch: 1..PUT_BATCH_ITEMS_MAX whole Puts."""


class Get(EventStruct, tag=14):
    """Take the next message. timeout_ms: -1 wait forever, 0 poll, > 0 wait that long."""

    request_id: RequestId
    timeout_ms: GetTimeoutMs
    select: list | None = None
    """A selective get (mrs.core.selection): [[attribute, operator, value], ...], all
    of which the message must match; None takes the next message. Checked by the
    group: a malformed one is refused BADPARAM, the connection stays."""


class GetBatch(EventStruct, tag=23):
    """Take up to count_max messages at once (the client's get_many, a prefetch).
    Answered by one DeliveryBatch holding 1..count_max messages: those ready now, or
    the first to arrive within timeout_ms (-1 wait forever, 0 poll: NOMOREMSG if
    none). Each message is delivered as a Get would deliver it (delivery mark,
    CONFIRMREQ/POSSDUPL, the unconfirmed cap); CancelGet withdraws it as a Get.
    wait_at_cap: at the unconfirmed cap, wait (as gets parked before the cap was
    reached do) instead of being refused EXCMAXUNCONF: the client's pool sets it when
    it asks again for gets that were already waiting (clients.get_pool).
    read_ahead_max: after count_max messages, up to this many more that are in
    memory only, need no confirm and have no sender waiting on their dequeue (an
    MRS_ACK, a plain NN message): a read-ahead, lent to the client for its next
    gets and taken back by GiveBack."""

    request_id: RequestId
    count_max: GetCount
    timeout_ms: GetTimeoutMs
    wait_at_cap: bool = False
    read_ahead_max: ReadAheadCount = 0
    select: list | None = None
    """As a Get's: every message of the batch matches it (no read-ahead then)."""


class Confirm(EventStruct, tag=16):
    """Confirm a delivered recoverable message by its seq."""

    request_id: RequestId
    seq: Seq
    confirm_value: I64
    force_j: I64


class CancelGet(EventStruct, tag=20):
    """Withdraw the parked Get whose id is request_id. If it is still parked the
    server answers that Get with Failure(TIMEOUT) and it takes no message; if a
    message was already handed to it, its Delivery stands (the client keeps it for
    the next get), so nothing is lost either way. No reply of its own."""

    request_id: RequestId


class GiveBack(EventStruct, tag=25):
    """Return messages needing no confirm the application never took (a client closing
    with them held: read ahead, or the answer of a get given up): the server puts each
    seq it lent to this connection's queue back at
    the front, in arrival order; a seq it did not lend is ignored, so a client can
    neither add a message nor take one twice. No reply of its own."""

    seqs: GivenBackSeqs


class PutBatch(EventStruct, tag=22):
    """Many puts in one frame (the client's `put_many`). Each item is a whole Put with
    its own request_id and is answered on its own (PutDone or Failure), exactly as if
    it had come alone: one bad item never fails the others. The batch itself has no
    id and no reply. At most PUT_BATCH_ITEMS_MAX items and PUT_BATCH_BYTES_MAX bytes
    of bodies (mrs.limits); a frame beyond either is a protocol error."""

    puts: PutList

    __post_init__ = put_batch_post_init  # the bodies' bound too (compiled)


REPLY_WHEN_STORED_HEADER = "reply_when_stored"
"""A Put header (true) asking for the PutDone once the message is durably stored
(DQF or SAF), whatever its notification mode; AK/CONF notifications still follow.
The client-side SAF journal drains with it, so a record leaves the client's journal
only when the server has stored it."""
CLIENT_SAF_BACKLOG_HEADER = "client_saf_backlog"
"""On a drained put: records still in the client's journal (`mrs status` shows it)."""


class StatusRequest(EventStruct, tag=18):
    """Ask the server for its status."""

    request_id: RequestId


# -- events: server -> client -------------------------------------------------------


class Welcome(EventStruct, tag=2, omit_defaults=True):
    """The server's answer to Hello. message_bytes_max lets a client refuse an
    oversized body itself (MSGTOOBIG) instead of sending a frame the server must
    reject by closing the connection; 0 = not stated. Trailing fields left at their
    defaults are not sent (`omit_defaults`): a client of an earlier release, which
    refuses a Welcome with more fields than it knows, still connects; only a link's
    Welcome carries `incarnation`."""

    protocol_version: I64
    group_id: I64
    group_name: str
    message_bytes_max: I64 = 0
    incarnation: Incarnation = b""
    """To a link: this group's journals' incarnation (mrs.group.incarnation)."""
    term: Seq = 0
    """To a link whose Hello set `welcome_term`, from a replicated group: its active's
    term, so the dialer refuses an old active that outlived its lease and still takes
    links (mrs.group.incarnation `admit_term`); 0 (not sent) otherwise."""


class Attached(EventStruct, tag=11):
    """Attach succeeded: the address attached to."""

    request_id: RequestId
    group: I64
    queue: I64


class PutDone(EventStruct, tag=13):
    """The PSB of a put."""

    request_id: RequestId
    status: I64
    delivery_status: I64
    seq: Seq
    uma_status: I64


class Delivery(EventStruct, tag=15):
    """A message for a Get. source and target are "G.Q" strings."""

    request_id: RequestId
    seq: Seq
    body: bytes
    source: str
    target: str
    msg_class: I64
    msg_type: I64
    priority: Priority
    delivery: I32
    delivery_status: I64
    correlation_id: CorrelationId
    put_time_ns: I64
    dead_letter_header: dict | None
    headers: dict | None = None


DeliveryList = Annotated[list[Delivery], Meta(min_length=1)]
"""The messages of a DeliveryBatch, oldest first, each with the GetBatch's id."""


class DeliveryBatch(EventStruct, tag=24):
    """The answer to a GetBatch: its messages, oldest first."""

    request_id: RequestId
    deliveries: DeliveryList


class Confirmed(EventStruct, tag=17):
    """The outcome of a Confirm."""

    request_id: RequestId
    seq: Seq
    status: I64


AnswerList = Annotated[
    list[PutDone | Confirmed], Meta(min_length=1, max_length=ANSWER_BATCH_ITEMS_MAX)
]
"""The answers of an AnswerBatch, in the order the server made them."""


class AnswerBatch(EventStruct, tag=26):
    """Many answers in one frame, to a client that said `answer_batches` in its Hello.
    Each item is the PutDone or Confirmed the server would otherwise have sent alone,
    with its own request_id, and counts exactly as if it had come alone. Why: a busy
    connection gets hundreds of answers per commit; one frame for them costs the
    server one encode and the client one decode instead of one per answer (benchmarks/README.md).
    The batch itself has no id and answers nothing."""

    answers: AnswerList


class StatusReply(EventStruct, tag=19):
    """The server's status, as plain data."""

    request_id: RequestId
    info: dict


class Failure(EventStruct, tag=30):
    """A request failed (e.g. a get timed out); the connection stays open."""

    request_id: RequestId
    status: I64
    message: str


class Fatal(EventStruct, tag=31):
    """A connection-level error; its sender closes the connection after sending it."""

    status: I64
    message: str


# -- heartbeats (either side, after the handshake) ------------------------------------


class Ping(EventStruct, tag=50):
    """Are you there? The receiver answers a Pong with the same nonce. Sent after a
    silence (mrs.transport.watchdog), so a peer that vanished without FIN or RST is noticed."""

    nonce: I64


class Pong(EventStruct, tag=51):
    """The answer to a Ping."""

    nonce: I64


HEARTBEAT_EVENTS = (Ping, Pong)
CLIENT_EVENTS = (
    Hello,
    Attach,
    Put,
    PutBatch,
    Get,
    GetBatch,
    Confirm,
    StatusRequest,
    Locate,
    ShowPending,
    SetPcj,
    ReadJournal,
    CancelGet,
    GiveBack,
    *ADMIN_REQUESTS,
    *LINK_EVENTS,
    *HEARTBEAT_EVENTS,
)
SERVER_EVENTS = (
    Welcome,
    Attached,
    PutDone,
    Delivery,
    DeliveryBatch,
    Confirmed,
    AnswerBatch,
    StatusReply,
    Located,
    PendingCounts,
    PcjState,
    JournalPage,
    Failure,
    Fatal,
    *ADMIN_REPLIES,
    *LINK_EVENTS,
    *HEARTBEAT_EVENTS,
)
Event = (
    Hello
    | Attach
    | Put
    | PutBatch
    | Get
    | GetBatch
    | Confirm
    | StatusRequest
    | Locate
    | ShowPending
    | SetPcj
    | ReadJournal
    | CancelGet
    | Welcome
    | Attached
    | PutDone
    | Delivery
    | DeliveryBatch
    | Confirmed
    | AnswerBatch
    | StatusReply
    | Located
    | PendingCounts
    | PcjState
    | JournalPage
    | Failure
    | Fatal
    | LinkTransfer
    | LinkAck
    | LinkNotice
    | LinkPendingQuery
    | LinkPendingCounts
    | GiveBack
    | Ping
    | Pong
    | AdminRequest
    | AdminReply
)

finish(
    Hello,
    Attach,
    Put,
    PutBatch,
    Get,
    GetBatch,
    Confirm,
    CancelGet,
    GiveBack,
    StatusRequest,
    Welcome,
    Attached,
    PutDone,
    Delivery,
    DeliveryBatch,
    Confirmed,
    AnswerBatch,
    StatusReply,
    Failure,
    Fatal,
    Ping,
    Pong,
)
