"""The MRS wire protocol, sans-I/O: bytes in, events out; events in, bytes out.

No sockets and no trio here (the shape is h11's): the caller feeds whatever it read to
`Connection.receive_data`, takes events from `Connection.next_event` (or all of them
at once from `Connection.events`), and writes whatever `Connection.send` returns.

Frames
------
Each frame is a 4-byte big-endian unsigned length N, then N bytes of msgpack encoding
an array ``[code, field1, field2, ...]``. Bodies are msgpack bin (bytes), names are
msgpack str. A frame longer than ``frame_bytes_max`` is refused as soon as its header
is seen, and never sent.

State machine
-------------
Each side (client, server) has a state: START, OPEN or CLOSED. An event moves the
state of the side that sends it, following `_TRANSITIONS`:

=======  =======  ==============================================  =======
side     state    event                                           becomes
=======  =======  ==============================================  =======
client   START    Hello                                           OPEN
client   OPEN     Attach, Put, Get, Confirm, StatusRequest,       OPEN
                  CancelGet, Ping, Pong
server   START    Welcome (only once the client is OPEN)          OPEN
server   START    Fatal                                           CLOSED
server   OPEN     Attached, PutDone, Delivery, Confirmed,         OPEN
                  StatusReply, Failure, Ping, Pong
server   OPEN     Fatal                                           CLOSED
=======  =======  ==============================================  =======

So a client sends Hello first and exactly once; the server receives Hello before it
sends Welcome (or Fatal, which it may send at any time). The client may pipeline
requests right after its Hello without waiting for Welcome. Hello and Welcome must
carry `PROTOCOL_VERSION`. Anything not in the table -- an event of the wrong
direction, any event before the handshake, a second Hello or Welcome -- is a
`RemoteProtocolError` when received and a `LocalProtocolError` when sent.

Once a Fatal has been sent or received the connection is closed: `next_event` returns
`CLOSED` and `send` refuses everything. After a `RemoteProtocolError` the connection
is broken: `next_event` raises the same error again, and the only thing a server may
still send is a Fatal telling the peer why.
"""

from __future__ import annotations

import reprlib
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import msgpack

from mrs.model import CORRELATION_ID_BYTES_MAX, PRIORITY_MAX, Status

PROTOCOL_VERSION = 1
FRAME_BYTES_MAX_DEFAULT = 2 * 1024 * 1024

_T = TypeVar("_T", bound=type)
_HEADER = struct.Struct(">I")
_HEADER_BYTES = _HEADER.size
_UINT32_MAX = 2**32 - 1
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1
_NEST_MAX = 100
"""Deepest nesting accepted inside the dict fields (info, dead_letter_header)."""


# -- errors -------------------------------------------------------------------------


class ProtocolError(Exception):
    """A frame or an event broke the protocol. `.status` is the status to answer with."""

    def __init__(self, message: str, status: Status = Status.PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class LocalProtocolError(ProtocolError):
    """Our side tried to build or send something the protocol forbids."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids; the connection is broken."""


# -- sentinels ----------------------------------------------------------------------


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


NEED_DATA = _Sentinel("NEED_DATA")
"""`next_event`: no complete frame is buffered; feed more bytes."""
CLOSED = _Sentinel("CLOSED")
"""`next_event`: the peer closed (EOF with an empty buffer), or a Fatal was exchanged."""


# -- field checks -------------------------------------------------------------------
#
# Each event class declares one check per field. From those, `_event` generates the
# class's __post_init__: a fast inline test per field (exact types, ranges); only when
# that test trips does the check's `problem` run to decide (an IntEnum is a fine int)
# and word the error.


_REPR = reprlib.Repr()
_REPR.maxlevel = 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 60
"""Shows at most 4 levels of a value: a frame nested 1,000 deep must not make the
error message itself raise RecursionError."""


def _short(value: Any) -> str:
    try:
        text = _REPR.repr(value)
    except Exception as exc:  # noqa: BLE001 - a value whose repr fails still gets a message
        text = f"<{type(value).__name__}: unprintable ({type(exc).__name__})>"
    return text if len(text) <= 60 else text[:57] + "..."


class _Check:
    def bad_expr(self, v: str) -> str:
        """A Python expression over variable `v`, true when `v` may be invalid."""
        raise NotImplementedError

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` ("must be ..., got ..."), or None if it is fine."""
        raise NotImplementedError


class _Int(_Check):
    def __init__(self, lo: int, hi: int, what: str | None = None) -> None:
        self.lo, self.hi = lo, hi
        self.what = what or f"{lo}..{hi}"

    def bad_expr(self, v: str) -> str:
        return f"type({v}) is not int or not {self.lo} <= {v} <= {self.hi}"

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return f"must be an int, got {type(value).__name__}"
        if not self.lo <= value <= self.hi:
            return f"must be {self.what}, got {value}"
        return None


class _Str(_Check):
    def bad_expr(self, v: str) -> str:
        return f"type({v}) is not str"

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, str) else f"must be a str, got {type(value).__name__}"


class _OneOf(_Check):
    def __init__(self, *choices: str) -> None:
        self.choices = choices

    def bad_expr(self, v: str) -> str:
        return f"type({v}) is not str or {v} not in {self.choices!r}"

    def problem(self, value: Any) -> str | None:
        if isinstance(value, str) and value in self.choices:
            return None
        return f"must be one of {', '.join(map(repr, self.choices))}, got {_short(value)}"


class _Bytes(_Check):
    def __init__(self, max_len: int | None = None) -> None:
        self.max_len = max_len

    def bad_expr(self, v: str) -> str:
        expr = f"type({v}) is not bytes"
        return expr if self.max_len is None else f"{expr} or len({v}) > {self.max_len}"

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, bytes):
            return f"must be bytes, got {type(value).__name__}"
        if self.max_len is not None and len(value) > self.max_len:
            return f"must be at most {self.max_len} bytes, got {len(value)}"
        return None


class _Dict(_Check):
    """A dict of plain msgpack data (no ext types, no Timestamp), or None if optional."""

    def __init__(self, optional: bool = False) -> None:
        self.optional = optional

    def bad_expr(self, v: str) -> str:
        return "True"  # rare events: always look inside

    def problem(self, value: Any) -> str | None:
        if value is None and self.optional:
            return None
        if not isinstance(value, dict):
            wanted = "a dict or None" if self.optional else "a dict"
            return f"must be {wanted}, got {type(value).__name__}"
        return _plain_data_problem(value)


class _List(_Check):
    """A list of plain msgpack data (link events carry batches as lists)."""

    def bad_expr(self, v: str) -> str:
        return "True"

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, list):
            return f"must be a list, got {type(value).__name__}"
        return _plain_data_problem({"items": value})


_SCALARS = (bool, str, bytes, float, type(None))


def _plain_data_problem(root: dict) -> str | None:
    stack: list[tuple[Any, int]] = [(root, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, _SCALARS):
            continue
        if isinstance(item, int):
            if not _INT64[0] <= item <= _UINT64_MAX:
                return f"holds an int out of msgpack range: {item}"
            continue
        if depth >= _NEST_MAX:
            return f"is nested deeper than {_NEST_MAX} levels"
        if isinstance(item, dict):
            for key, val in item.items():
                if not isinstance(key, (int, *_SCALARS)):
                    return f"holds a key of type {type(key).__name__}"
                stack.append((key, depth + 1))
                stack.append((val, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((x, depth + 1) for x in item)
        else:
            return f"holds a value of type {type(item).__name__}"
    return None


_REQUEST_ID = _Int(1, _INT64[1], "1..2**63-1")
_SEQ = _Int(0, _UINT64_MAX, "0..2**64-1")
_I64 = _Int(*_INT64, "in int64 range")
_I32 = _Int(*_INT32, "in int32 range")
_STR = _Str()
_BYTES = _Bytes()


def _reject(event: Any, name: str, value: Any, check: _Check) -> None:
    problem = check.problem(value)
    if problem is not None:
        raise LocalProtocolError(f"{type(event).__name__}.{name} {problem}")


def _event(code: int, **checks: _Check) -> Callable[[_T], _T]:
    """Give an event class its wire code and a generated, validating __post_init__.

    Goes under @dataclass, so the dataclass sees the __post_init__.
    """

    def attach(cls: _T) -> _T:
        names = tuple(cls.__annotations__)
        if names != tuple(checks):
            raise TypeError(f"{cls.__name__}: checks {tuple(checks)} != fields {names}")
        lines = ["def __post_init__(self):"]
        namespace: dict[str, Any] = {"_reject": _reject}
        for i, (name, check) in enumerate(checks.items()):
            namespace[f"c{i}"] = check
            lines += [
                f"    v = self.{name}",
                f"    if {check.bad_expr('v')}:",
                f"        _reject(self, {name!r}, v, c{i})",
            ]
        # The wire form, without reflection per frame: [code, self.f1, self.f2, ...]
        lines += [
            "def _wire(self):",
            f"    return [{code}, {', '.join('self.' + name for name in names)}]",
        ]
        exec("\n".join(lines), namespace)  # source built from the constants above
        cls.__post_init__ = namespace["__post_init__"]
        cls._wire = namespace["_wire"]
        cls.code = code
        cls.field_names = names
        return cls

    return attach


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
    timeout_ms=_Int(0, _INT64[1], ">= 0"),
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
@_event(14, request_id=_REQUEST_ID, timeout_ms=_Int(-1, _INT64[1], ">= -1"))
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


# -- events: group <-> group, over a link (either side, after the handshake) ----------


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
LINK_EVENTS = (LinkTransfer, LinkAck, LinkNotice)
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


def _wire_constructor(cls: type) -> Callable[..., Any]:
    """A constructor for decoding, from the fields in wire order.

    A frozen dataclass's __init__ sets each field through object.__setattr__, which
    costs more than the decode itself; this one sets the slots directly, then runs the
    same __post_init__ validation, so a decoded event is exactly as checked as a built
    one.
    """
    names = cls.field_names
    namespace: dict[str, Any] = {"cls": cls, "new": object.__new__}
    for i, name in enumerate(names):
        namespace[f"set{i}"] = cls.__dict__[name].__set__  # the slot's descriptor
    args = ", ".join(names)
    lines = [f"def make({args}):", "    self = new(cls)"]
    lines += [f"    set{i}(self, {name})" for i, name in enumerate(names)]
    lines += ["    self.__post_init__()", "    return self"]
    exec("\n".join(lines), namespace)  # source built from the field names
    return namespace["make"]


_DECODERS: dict[int, tuple[type, int, Callable[..., Any]]] = {
    cls.code: (cls, len(cls.field_names) + 1, _wire_constructor(cls))
    for cls in CLIENT_EVENTS + SERVER_EVENTS
}
assert len(_DECODERS) == len(set(CLIENT_EVENTS + SERVER_EVENTS)), "duplicate event code"
_ALL_EVENTS = frozenset(CLIENT_EVENTS + SERVER_EVENTS)


# -- state machine ------------------------------------------------------------------

CLIENT = "client"
SERVER = "server"
START = "START"
OPEN = "OPEN"
# CLOSED (the sentinel above) doubles as the state after a Fatal.

_REQUESTS = dict.fromkeys(
    (Attach, Put, Get, Confirm, StatusRequest, CancelGet, *LINK_EVENTS, *HEARTBEAT_EVENTS),
    OPEN,
)
_REPLIES = dict.fromkeys(
    (Attached, PutDone, Delivery, Confirmed, StatusReply, Failure) + LINK_EVENTS + HEARTBEAT_EVENTS,
    OPEN,
)

_TRANSITIONS: dict[str, dict[Any, dict[type, Any]]] = {
    CLIENT: {
        START: {Hello: OPEN},
        OPEN: _REQUESTS,
    },
    SERVER: {
        START: {Welcome: OPEN, Fatal: CLOSED},
        OPEN: {**_REPLIES, Fatal: CLOSED},
    },
}
_SENDS = {CLIENT: frozenset(CLIENT_EVENTS), SERVER: frozenset(SERVER_EVENTS)}
_OTHER = {CLIENT: SERVER, SERVER: CLIENT}


_unpackb = msgpack.unpackb


def _refuse_ext(code: int, data: bytes) -> Any:
    raise RemoteProtocolError(f"frame holds a msgpack ext type ({code})")


class Connection:
    """One end of an MRS connection. our_role is "client" or "server"."""

    def __init__(self, our_role: str, frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> None:
        if our_role not in (CLIENT, SERVER):
            raise ValueError(f"our_role must be 'client' or 'server', got {our_role!r}")
        if not 1 <= frame_bytes_max <= _UINT32_MAX:
            raise ValueError(f"frame_bytes_max must be 1..2**32-1, got {frame_bytes_max}")
        self.our_role = our_role
        self.their_role = _OTHER[our_role]
        self.frame_bytes_max = frame_bytes_max
        self._states = {CLIENT: START, SERVER: START}
        self._buf = bytearray()
        self._pos = 0  # start of the first unparsed frame in _buf
        self._eof = False
        self._closed = False  # a Fatal went one way or the other
        self._error: RemoteProtocolError | None = None
        self._packer = msgpack.Packer(use_bin_type=True)

    # -- state ----------------------------------------------------------------------

    @property
    def our_state(self) -> str | _Sentinel:
        return self._states[self.our_role]

    @property
    def their_state(self) -> str | _Sentinel:
        return self._states[self.their_role]

    @property
    def closed(self) -> bool:
        """True once a Fatal has been sent or received."""
        return self._closed

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet parsed: the start of an unfinished frame."""
        return len(self._buf) - self._pos

    def _process(self, role: str, event: Any, error: type[ProtocolError]) -> None:
        """Move `role`'s state for an event it sends, or raise `error`."""
        state = self._states[role]
        new = _TRANSITIONS[role][state].get(type(event))
        if new is None:
            raise error(self._refusal(role, event, error))
        if new is not state:  # Hello, Welcome or Fatal
            if type(event) is Welcome and self._states[CLIENT] is not OPEN:
                raise error(self._wording(role, "Welcome before the client's Hello", error))
            if type(event) in (Hello, Welcome) and event.protocol_version != PROTOCOL_VERSION:
                what = (
                    f"{type(event).__name__} with protocol_version {event.protocol_version}"
                    f" (this side speaks {PROTOCOL_VERSION})"
                )
                raise error(self._wording(role, what, error))
            self._states[role] = new
            if new is CLOSED:
                self._closed = True

    def _refusal(self, role: str, event: Any, error: type) -> str:
        name = type(event).__name__
        if type(event) not in _SENDS[role]:
            if type(event) in _SENDS[_OTHER[role]]:
                what = f"{name}, which only a {_OTHER[role]} sends"
            else:
                what = f"{_short(event)}, which is not an MRS event"
        elif type(event) is Hello:
            what = "a second Hello"
        elif type(event) is Welcome:
            what = "a second Welcome"
        else:
            what = f"{name} before {'Hello' if role == CLIENT else 'Welcome'}"
        return self._wording(role, what, error)

    @staticmethod
    def _wording(role: str, what: str, error: type) -> str:
        verb = "sent" if error is RemoteProtocolError else "cannot send"
        return f"{role} {verb} {what}"

    # -- receiving ------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Buffer bytes read from the peer; b"" means the peer closed (EOF)."""
        if self._closed or self._error is not None:
            return
        if self._eof:
            raise LocalProtocolError("receive_data after EOF")
        if not data:
            self._eof = True
            return
        buf = self._buf
        if self._pos:
            del buf[: self._pos]  # cheap: bytearray trims its front without copying
            self._pos = 0
        buf += data

    def next_event(self) -> Event | _Sentinel:
        """The next event, NEED_DATA, or CLOSED. Raises RemoteProtocolError."""
        if self._error is not None:
            raise self._error.with_traceback(None)
        if self._closed:
            return CLOSED
        buf = self._buf
        pos = self._pos
        have = len(buf) - pos
        if have >= _HEADER_BYTES:
            size = _HEADER.unpack_from(buf, pos)[0]
            if size > self.frame_bytes_max:
                self._fail(f"frame of {size} bytes exceeds frame_bytes_max {self.frame_bytes_max}")
            if size == 0:
                self._fail("empty frame")
            start = pos + _HEADER_BYTES
            end = start + size
            if len(buf) >= end:
                self._pos = end
                event = self._decode(buf, start, end)
                try:
                    self._process(self.their_role, event, RemoteProtocolError)
                except RemoteProtocolError as exc:
                    self._error = exc
                    raise
                return event
        if self._eof:
            if have == 0:
                return CLOSED
            self._fail("connection closed mid-frame")
        return NEED_DATA

    def events(self) -> list[Event]:
        """Every complete event now buffered (stops at NEED_DATA, CLOSED or a Fatal).

        If a frame is bad, raises RemoteProtocolError and the events before it in this
        batch are dropped: the connection is broken anyway.
        """
        out: list[Event] = []
        append = out.append
        next_event = self.next_event
        while True:
            event = next_event()
            if event is NEED_DATA or event is CLOSED:
                return out
            append(event)

    def _fail(self, message: str) -> NoReturn:
        self._error = RemoteProtocolError(message)
        raise self._error

    def _decode(self, buf: bytearray, start: int, end: int) -> Any:
        view = memoryview(buf)[start:end]
        try:
            obj = _unpackb(view, raw=False, strict_map_key=False, ext_hook=_refuse_ext)
        except RemoteProtocolError as exc:
            self._error = exc
            raise
        except Exception as exc:  # msgpack raises many kinds: all mean "not msgpack"
            self._fail(f"frame is not valid msgpack: {type(exc).__name__}: {exc}")
        finally:
            view.release()  # the buffer cannot grow or shrink while a view is alive
        if type(obj) is not list or not obj:
            self._fail(f"frame is not a non-empty msgpack array: {_short(obj)}")
        code = obj[0]
        decoder = _DECODERS.get(code) if type(code) is int else None
        if decoder is None:
            self._fail(f"unknown event code {_short(code)}")
        cls, arity, make = decoder
        if len(obj) != arity:
            self._fail(
                f"{cls.__name__} frame has {len(obj) - 1} fields, expected {len(cls.field_names)}"
            )
        try:
            return make(*obj[1:])
        except LocalProtocolError as exc:
            self._fail(exc.message)

    # -- sending --------------------------------------------------------------------

    def send(self, event: Event) -> bytes:
        """The bytes of one frame for `event`. Raises LocalProtocolError."""
        return b"".join(self._encode(event))

    def send_many(self, events: list[Event]) -> bytes:
        """The bytes of one frame per event, concatenated, for one write."""
        parts: list[bytes] = []
        for event in events:
            parts += self._encode(event)
        return b"".join(parts)

    def _encode(self, event: Any) -> tuple[bytes, bytes]:
        if self._closed:
            raise LocalProtocolError(f"connection is closed; cannot send {type(event).__name__}")
        if self._error is not None and type(event) is not Fatal:
            raise LocalProtocolError(
                f"connection is broken ({self._error.message}); only a Fatal may be sent"
            )
        cls = type(event)
        if cls not in _ALL_EVENTS:
            raise LocalProtocolError(f"not an MRS event: {_short(event)}")
        try:
            payload = self._packer.pack(event._wire())
        except Exception as exc:  # the packer raises many kinds
            raise LocalProtocolError(
                f"cannot encode {cls.__name__}: {type(exc).__name__}: {exc}"
            ) from None
        if len(payload) > self.frame_bytes_max:
            raise LocalProtocolError(
                f"{cls.__name__} frame of {len(payload)} bytes exceeds frame_bytes_max"
                f" {self.frame_bytes_max}"
            )
        self._process(self.our_role, event, LocalProtocolError)
        return _HEADER.pack(len(payload)), payload
