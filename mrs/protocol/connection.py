"""The connection state machine: bytes in, events out; events in, bytes out."""

from __future__ import annotations

from typing import Any, Final, NoReturn

from mrs.protocol.checks import DECODE_STATE, FRAME_BYTES_MAX_DEFAULT, PROTOCOL_VERSION, _short
from mrs.protocol.errors import (
    FrameRefused,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
)
from mrs.protocol.events import Event, Fatal, Hello, Welcome
from mrs.protocol.explain import explain
from mrs.protocol.link_events import LinkNotice, LinkTransfer
from mrs.protocol.states import (
    _ACKS,
    _ALL_EVENTS,
    _ANSWERS,
    _ANSWERS_MANY,
    _ASKS,
    _ASKS_MANY,
    _BY_CODE,
    _DECODE,
    _ENCODE_INTO,
    _HEADER,
    _HEADER_BYTES,
    _OTHER,
    _OTHER_KIND,
    _SENDS,
    _STEADY,
    _TRANSFERS,
    _TRANSITIONS,
    _UINT32_MAX,
    CLIENT,
    CLOSED,
    NEED_DATA,
    OPEN,
    SERVER,
    START,
    _Sentinel,
)

__all__ = ["CLIENT", "CLOSED", "MID_FRAME", "NEED_DATA", "OPEN", "SERVER", "START", "Connection"]

# Read per frame sent or received: a bound method's alias saves ~14 ns per call once
# compiled; plain imported names are read directly (benchmarks/README.md, "Final aliases").
_UNPACK_HEADER: Final = _HEADER.unpack_from
_PACK_HEADER_INTO: Final = _HEADER.pack_into

MID_FRAME = "connection closed mid-frame"
"""A ProtocolError's words for a connection that ended inside a frame (a cut, or a
peer killed mid-send): links say it as a cut (mrs.group.link_driver)."""


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
        self._in_flight: dict[str, set[int]] = {CLIENT: set(), SERVER: set()}
        """Ids of the requests each side sent that are not answered yet."""
        self._steady: dict[str, dict[type, str | None]] = {CLIENT: {}, SERVER: {}}
        """Per side, once it is OPEN: the events that keep it OPEN (see _process)."""
        self._transfer_seqs: dict[int, tuple[str, list[int]]] = {}
        """The seqs of each LinkTransfer or LinkNotice we sent that is not answered yet,
        by request id, with what its items are ("message" or "notice": the wording of
        a refusal): its LinkAck must name them, one result per item, in order."""

    # -- state ----------------------------------------------------------------------

    @property
    def our_state(self) -> str | _Sentinel:
        return self._states[self.our_role]

    @property
    def their_state(self) -> str | _Sentinel:
        return self._states[self.their_role]

    @property
    def our_requests_in_flight(self) -> int:
        """Requests we sent that are not answered yet."""
        return len(self._in_flight[self.our_role])

    @property
    def their_requests_in_flight(self) -> int:
        """Requests the peer sent that we have not answered yet."""
        return len(self._in_flight[self.their_role])

    @property
    def closed(self) -> bool:
        """True once a Fatal has been sent or received."""
        return self._closed

    def can_send(self, event: object) -> bool:
        """Whether `event` may still be sent, as `send` would judge it: nothing once a
        Fatal went either way, only a Fatal once the peer's bytes broke the protocol."""
        return not self._closed and (self._error is None or type(event) is Fatal)

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet parsed: the start of an unfinished frame."""
        return len(self._buf) - self._pos

    def _process(self, role: str, event: Any, error: type[ProtocolError]) -> None:
        """Move `role`'s state for an event it sends, or raise `error`.

        Most events are requests and answers between open sides: `_steady` says in one
        lookup that such an event keeps the state, and whether it takes or frees a
        request id; everything else (handshake, Fatal, refusals) takes the long way."""
        kind = self._steady[role].get(type(event), _OTHER_KIND)
        if kind is _ASKS:  # a request: its id is taken until its answer comes
            in_flight = self._in_flight[role]
            request_id = event.request_id
            if request_id in in_flight:
                raise error(f"request_id {request_id} reused while in flight")
            in_flight.add(request_id)
            return
        if kind is _ASKS_MANY:
            self._take_ids(role, event.puts, error)
            return
        if kind is _ANSWERS:  # the one answer to the other side's request
            self._in_flight[_OTHER[role]].discard(event.request_id)
            return
        if kind is _ANSWERS_MANY:  # each item answers one of the other side's requests
            answered = self._in_flight[_OTHER[role]]
            for answer in event.answers:
                answered.discard(answer.request_id)
            return
        if kind is _TRANSFERS or kind is _ACKS:
            self._transfer_or_ack(role, event, error)
            return
        if kind is None:
            return
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
            self._steady[role] = _STEADY[role] if new is OPEN else {}
            if new is CLOSED:
                self._closed = True

    def _transfer_or_ack(self, role: str, event: Any, error: type[ProtocolError]) -> None:
        """A LinkTransfer or a LinkNotice takes its id, and when we send it its items'
        seqs are kept; a LinkAck from the peer answering one must name those seqs, one
        result per item, in order. Why: the sender settles each message by its place
        in the answer (deleted from its SAF when STORED), and each notice too (a
        confirm notice is deleted from its journal once answered), so an answer in
        another order, short, or naming seqs never sent, would delete a message the
        peer said it did not store, or a notice it never took (what each result says
        is the session's to judge: mrs.group.link_session)."""
        request_id = event.request_id
        if type(event) is LinkTransfer or type(event) is LinkNotice:
            in_flight = self._in_flight[role]
            if request_id in in_flight:
                raise error(f"request_id {request_id} reused while in flight")
            in_flight.add(request_id)
            if role == self.our_role:
                self._keep_seqs(event)
            return
        self._in_flight[_OTHER[role]].discard(request_id)
        kept = self._transfer_seqs.pop(request_id, None) if role == self.their_role else None
        if kept is None:  # it answers a query, or we answer
            return
        item, seqs = kept
        frame = "LinkNotice" if item == "notice" else "LinkTransfer"
        results = event.results
        if len(results) != len(seqs):
            raise error(f"LinkAck answers {len(results)} {item}s, {len(seqs)} were sent")
        for index, (result, seq) in enumerate(zip(results, seqs, strict=True)):
            if result.seq != seq:
                raise error(
                    f"LinkAck.results[{index}].seq {result.seq} does not answer {item}"
                    f" {index} of {frame} {request_id} (seq {seq}): one result per"
                    f" {item}, in order"
                )

    def _keep_seqs(self, event: Any) -> None:
        """Keep the seqs of a LinkTransfer's messages or a LinkNotice's notices we send,
        for `_transfer_or_ack` to check the answer by."""
        request_id = event.request_id
        if type(event) is LinkTransfer:
            self._transfer_seqs[request_id] = ("message", [m.seq for m in event.messages])
        else:
            self._transfer_seqs[request_id] = ("notice", [n.seq for n in event.notices])

    def _take_ids(self, role: str, requests: list, error: type[ProtocolError]) -> None:
        """Every request of a batch takes its id, all or none: a reused id (in flight
        or twice in the batch) refuses the whole batch."""
        in_flight = self._in_flight[role]
        ids = {request.request_id for request in requests}
        if len(ids) != len(requests) or not in_flight.isdisjoint(ids):
            seen: set[int] = set()
            for request in requests:
                if request.request_id in seen or request.request_id in in_flight:
                    raise error(f"request_id {request.request_id} reused while in flight")
                seen.add(request.request_id)
        in_flight |= ids

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

    def receive_data(self, data: bytes | bytearray) -> None:
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

    def discard_buffered(self) -> None:
        """Let go of the bytes of an unfinished frame at once (the connection is being
        closed, and a server bounds what such frames hold in all)."""
        self._buf = bytearray()
        self._pos = 0

    def next_event(self) -> Event | _Sentinel:
        """The next event, NEED_DATA, or CLOSED. Raises RemoteProtocolError."""
        if self._error is not None:
            raise self._error.with_traceback(None)
        if self._closed:
            return CLOSED
        out: list[Event] = []
        pos = self._decode_all(self._buf, self._pos, len(self._buf), out, first_only=True)
        if out:
            return out[0]
        if self._eof:
            if pos == len(self._buf):
                return CLOSED
            self._fail(MID_FRAME)
        return NEED_DATA

    def events(self) -> list[Event]:
        """Every complete event now buffered (stops at NEED_DATA, CLOSED or a Fatal).

        If a frame is bad, raises RemoteProtocolError and the events before it in this
        batch are dropped: the connection is broken anyway.

        Why one loop and not `next_event` per frame: a receive brings a hundred or more
        frames under load, and the per-call work (a view per frame, the decode flag set
        and reset, the state machine's call) was two thirds of a Put's decoding cost
        (benchmarks/README.md). Requests and answers between open sides keep the state in one dict
        lookup here; everything else takes `_process`, as `next_event` does.
        """
        if self._error is not None:
            raise self._error.with_traceback(None)
        out: list[Event] = []
        if self._closed:
            return out
        pos = self._decode_all(self._buf, self._pos, len(self._buf), out)
        if self._eof and not self._closed and pos != len(self._buf):
            self._fail(MID_FRAME)
        return out  # the peer closed after whole frames: CLOSED comes next

    def _decode_all(
        self, buf: bytearray, pos: int, have: int, out: list[Event], first_only: bool = False
    ) -> int:
        """Decode the whole frames of buf[pos:have] into `out` (the first one only, for
        `next_event`); the new position."""
        if have - pos < _HEADER_BYTES:
            return pos
        role = self.their_role
        steady = self._steady[role]
        asked = self._in_flight[role]
        answered = self._in_flight[_OTHER[role]]
        frame_bytes_max = self.frame_bytes_max
        unpack_from = _UNPACK_HEADER
        decode = _DECODE
        view = memoryview(buf)
        state = DECODE_STATE
        state.decoding = True
        try:
            while have - pos >= _HEADER_BYTES:
                size = unpack_from(buf, pos)[0]
                if size > frame_bytes_max or size == 0:
                    self._fail_frame(bytes(buf[pos : pos + 4]), size, frame_bytes_max)
                start = pos + _HEADER_BYTES
                end = start + size
                if end > have:
                    break
                pos = self._pos = end
                try:
                    event = decode(view[start:end])
                except ProtocolError as exc:  # a free-form field's check in __post_init__
                    self._fail(exc.message)
                except Exception as exc:  # noqa: BLE001 - msgspec raises many kinds: word them
                    self._fail(explain(bytes(view[start:end]), _BY_CODE, exc))
                kind = steady.get(type(event), _OTHER_KIND)
                if kind is _ASKS and event.request_id not in asked:
                    asked.add(event.request_id)
                elif kind is _ANSWERS:
                    answered.discard(event.request_id)
                elif kind is not None:  # the long way: ids reused, batches, handshake
                    try:
                        self._process(role, event, RemoteProtocolError)
                    except RemoteProtocolError as exc:
                        self._error = exc
                        raise
                    steady = self._steady[role]
                    first_only = first_only or self._closed  # after a Fatal nothing counts
                out.append(event)
                if first_only:
                    break
        finally:
            state.decoding = False
            view.release()  # the buffer cannot grow or shrink while a view is alive
        return pos

    def _fail(self, message: str) -> NoReturn:
        self._error = RemoteProtocolError(message)
        raise self._error

    def _fail_frame(self, head: bytes, size: int, frame_bytes_max: int) -> NoReturn:
        """A frame length refused: the error carries the four bytes read (FrameRefused)."""
        named = size != 0 and any(head.startswith(start) for start, _ in _FOREIGN_STARTS)
        self._error = FrameRefused(_size_problem(head, size, frame_bytes_max), head, named)
        raise self._error

    # -- sending --------------------------------------------------------------------

    def send(self, event: Event) -> bytes:
        """The bytes of one frame for `event`. Raises LocalProtocolError."""
        out = bytearray()
        self._encode_into(event, out)
        return bytes(out)

    def send_into(self, event: Event, out: bytearray) -> None:
        """Append the frame for `event` to `out` (an outbox written in one go later);
        on LocalProtocolError `out` is left as it was.

        A request or an answer between open sides (every message a busy connection
        carries) keeps the state in one dict lookup, as `_decode_all` does; anything
        else takes `_encode_into`'s checks."""
        kind = self._steady[self.our_role].get(type(event), _OTHER_KIND)
        if self._error is None:
            if kind is _ANSWERS:
                self._frame_into(event, out)
                self._in_flight[self.their_role].discard(event.request_id)  # type: ignore[attr-defined,union-attr]
                return
            if kind is _ASKS:
                asked = self._in_flight[self.our_role]
                if event.request_id not in asked:  # type: ignore[attr-defined,union-attr]
                    self._frame_into(event, out)
                    asked.add(event.request_id)  # type: ignore[attr-defined,union-attr]
                    return
        self._encode_into(event, out)

    def send_many(self, events: list[Event]) -> bytes:
        """The bytes of one frame per event, concatenated, for one write."""
        out = bytearray()
        for event in events:
            self._encode_into(event, out)
        return bytes(out)

    def _encode_into(self, event: Any, out: bytearray) -> None:
        """Append `event`'s frame (header, then msgpack) to `out`."""
        if self._closed:
            raise LocalProtocolError(f"connection is closed; cannot send {type(event).__name__}")
        if self._error is not None and type(event) is not Fatal:
            raise LocalProtocolError(
                f"connection is broken ({self._error.message}); only a Fatal may be sent"
            )
        if type(event) not in _ALL_EVENTS:
            raise LocalProtocolError(f"not an MRS event: {_short(event)}")
        start = self._frame_into(_handshake_form(event), out)
        try:
            self._process(self.our_role, event, LocalProtocolError)
        except LocalProtocolError:
            del out[start:]
            raise

    def _frame_into(self, event: Any, out: bytearray) -> int:
        """Append `event`'s frame to `out` and return where it starts; on
        LocalProtocolError (not encodable, too long) `out` is left as it was."""
        start = len(out)
        try:
            _ENCODE_INTO(event, out, start + _HEADER_BYTES)
        except Exception as exc:  # noqa: BLE001 - the encoder raises many kinds
            del out[start:]
            raise LocalProtocolError(
                f"cannot encode {type(event).__name__}: {type(exc).__name__}: {exc}"
            ) from None
        size = len(out) - start - _HEADER_BYTES
        if size > self.frame_bytes_max:
            del out[start:]
            raise LocalProtocolError(
                f"{type(event).__name__} frame of {size} bytes exceeds frame_bytes_max"
                f" {self.frame_bytes_max}"
            )
        _PACK_HEADER_INTO(out, start, size)
        return start


def _handshake_form(event: Any) -> Any:
    """What goes on the wire for `event`: a Hello or a Welcome without its trailing
    fields left at their defaults (the array msgspec writes for the event, cut), any
    other event as it is. Why: a peer of an earlier release refuses a frame with more
    fields than it knows, and these two are the first it reads; an application's
    Hello and Welcome keep the shape they had (only a link's carries `incarnation`).
    msgspec's `omit_defaults` does not cut array-like structs."""
    cls = type(event)
    if cls is not Hello and cls is not Welcome:
        return event
    names = cls.__struct_fields__
    values = [getattr(event, name) for name in names]
    defaults = cls.__struct_defaults__
    kept = len(values)
    while (
        kept > len(names) - len(defaults)
        and values[kept - 1] == defaults[kept - 1 - (len(names) - len(defaults))]
    ):
        kept -= 1
    return (cls.__struct_config__.tag, *values[:kept])


TLS_RECORD_START: Final = b"\x16\x03"
"""A TLS ClientHello's first bytes (handshake record, version 3.x): read as a frame
length they are far over any limit, so a TLS client on a plain port is told apart
(here and in the auth handshake, mrs.security.handshake)."""

_FOREIGN_STARTS: Final = (
    (
        TLS_RECORD_START,
        "a TLS handshake on a port without TLS (no [group.tls]): connect without tls",
    ),
    (b"GET ", "an HTTP request on the MRS client port (the web page is web_listen's)"),
    (b"POST", "an HTTP request on the MRS client port (the web page is web_listen's)"),
    (b"PRI ", "an HTTP request on the MRS client port (the web page is web_listen's)"),
)
"""What a frame length too large to be MRS usually is: another protocol's first bytes."""


def _size_problem(head: bytes, size: int, frame_bytes_max: int) -> str:
    """Why a frame's length is refused, naming the protocol a peer spoke instead when
    its first bytes tell (a TLS client on a plain port got "frame of 369295618 bytes")."""
    if size == 0:
        return "empty frame"
    for start, words in _FOREIGN_STARTS:
        if head.startswith(start):
            return f"{words} (frame length {size})"
    return f"frame of {size} bytes exceeds frame_bytes_max {frame_bytes_max}"
