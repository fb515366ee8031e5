"""Cross-group links: dial, handshake, pipelined transfers, SAF drain, reconnect.

One TCP connection per linked pair; the lower-numbered group dials (to the peer's
listen address, or the link's `address` override, e.g. a fault proxy). Both sides
then send `LinkTransfer`s (messages), `LinkNotice`s (confirms travelling back) and
answer each with one `LinkAck`. A bounded window of messages is in flight; each
transfer carries many messages and the peer's DQF commit for them is one group
commit. When the connection drops, everything in flight is answered LINK_LOST (the
forwarding rules decide what that means), and the dialer reconnects with capped
exponential backoff.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import trio

from mrs import protocol as wire
from mrs.errors import MrsError
from mrs.forwarding import LINK_LOST, DrainAnswer, Result, TransferError, status_name
from mrs.guards import Guards
from mrs.limits import RECEIVE_BYTES_MAX
from mrs.model import Status
from mrs.network import TCP, Network
from mrs.watchdog import Liveness, next_nonce, watch

if TYPE_CHECKING:
    from mrs.group import Group

log = logging.getLogger("mrs.links")

WINDOW_MESSAGES_MAX = 2048
TRANSFER_MESSAGES_MAX = 256
TRANSFER_BYTES_MAX = 1 << 20
"""Bodies per transfer frame (one bigger message still goes alone): with the peer's
message_bytes_max this bounds every frame a link sends."""
FRAME_OVERHEAD_BYTES = 64 * 1024
RETRY_S_MIN = 0.2
RETRY_S_MAX = 5.0
NOTICES_PER_FRAME_MAX = 512
BACKOFF_S_MIN = 0.05
BACKOFF_S_MAX = 2.0
HANDSHAKE_TIMEOUT_S = 5.0
LINK_PROGRAM_PREFIX = "group:"


class Channel(Protocol):
    closed: bool

    def send(self, event: object) -> None: ...


@dataclass(eq=False)
class _Outstanding:
    kind: str  # "direct", "saf", "notice", "forget", "volatile"
    items: list
    count: int


@dataclass(eq=False)
class PeerLink:
    """This group's side of the link to one peer group."""

    group: Group
    peer_id: int
    channel: Channel | None = None
    generation: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    _request_ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _direct: deque = field(default_factory=deque)
    _outstanding: dict[int, _Outstanding] = field(default_factory=dict)
    _in_flight: int = 0
    _saf_cursor: bytes | None = None
    _notices_in_flight: set[bytes] = field(default_factory=set)
    _wake: trio.Event = field(default_factory=trio.Event)
    _forget: list[int] = field(default_factory=list)
    """Seqs the peer stored and this side will never resend: the peer may drop their
    dedupe keys (sent as "forget" notices)."""
    inbound_failed_at: int | None = None
    """Ordinal of the first ordered message this peer sent on the current connection
    that could not be stored (later ones are refused until it resyncs)."""
    inbound_ordinal: int = 0
    _saf_copies: Counter = field(default_factory=Counter)
    """SAF key -> copies sent and not yet answered (a restarted drain resends)."""
    _saf_gone: set[bytes] = field(default_factory=set)
    """Keys already stored by one copy while another copy is still unanswered."""
    drain_wait: dict | None = None
    """Why the SAF drain waits (RETRY): the stuck message, its status and reason."""
    _room_seen: bool = False
    _resync_due: bool = False
    retry_until: float = 0.0
    """While trio.current_time() < this, the SAF drain is in RETRY (channel rules)."""
    _retry_s: float = RETRY_S_MIN

    # ------------------------------------------------------------------ LinkPort
    def send_message(self, fields: list, on_result: Result) -> None:
        self._direct.append((fields, on_result))
        self._wake.set()

    def poke(self) -> None:
        self._wake.set()

    def resend_saf(self) -> None:
        """Drained records could not be deleted: drain again from the oldest record
        (the peer answers its copies STORED again), so they are deleted in the end."""
        self.restart_drain()
        self._wake.set()

    def send_notices(self, notices: list, answered: Callable[[], None] | None = None) -> None:
        """Notices not journaled here; `answered()` once the peer answered them."""
        if self.channel is not None:
            items = [answered] if answered is not None else []
            self._send(wire.LinkNotice(self._next_id(), notices), "volatile", items, 0)

    def room(self) -> None:
        """The peer holds a DQF slot for this drain: end the RETRY backoff now."""
        self._room_seen = True
        if self.retry_until > trio.current_time():
            self.retry_until = trio.current_time()
        self._wake.set()

    def status_info(self) -> dict:
        wait = None
        if self.drain_wait is not None:
            backlog = self.group.forwarding.peers[self.peer_id].saf_backlog
            wait = {
                **self.drain_wait,
                "waiting_behind": max(backlog - 1, 0),
                "retry_in_s": round(max(self.retry_until - trio.current_time(), 0.0), 3),
            }
        return {
            "drain": "retry" if trio.current_time() < self.retry_until else "running",
            "drain_wait": wait,
            "in_flight": self._in_flight,
            "queued": len(self._direct),
            "connections": self.generation,
            "messages_sent": self.messages_sent,
            "messages_received": self.messages_received,
        }

    # ------------------------------------------------------------------ up / down
    def up(self, channel: Channel) -> None:
        if self.channel is not None:
            self.down("replaced by a new connection")
        self.channel = channel
        self.generation += 1
        self.inbound_failed_at = None
        self._saf_copies.clear()
        self._saf_gone.clear()
        self._resync_due = False
        self._saf_cursor = None
        self._notices_in_flight.clear()
        self.group.forwarding.link_up(self.peer_id, self)
        self._wake.set()

    def down(self, why: str, channel: Channel | None = None) -> None:
        """The connection ended: answer everything in flight LINK_LOST."""
        if self.channel is None or (channel is not None and channel is not self.channel):
            return
        self.channel = None
        log.warning("link to group %d lost: %s", self.peer_id, why)
        self.group.forwarding.link_down(self.peer_id)
        outstanding, self._outstanding = self._outstanding, {}
        self._in_flight = 0
        for pending in outstanding.values():
            if pending.kind == "forget":
                self._forget.extend(pending.items)
            if pending.kind == "direct":
                for on_result in pending.items:
                    on_result(LINK_LOST, 0)
        while self._direct:
            _, on_result = self._direct.popleft()
            on_result(LINK_LOST, 0)

    # ------------------------------------------------------------------ sending
    async def pump(self) -> None:
        """Forever: whenever woken, send what the window allows."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            if self.channel is not None:
                self._flush()

    def _flush(self) -> None:
        forwarding = self.group.forwarding
        peer = forwarding.peers[self.peer_id]
        draining = trio.current_time() >= self.retry_until
        if draining and self._resync_due:
            # Tell the peer we start over from the oldest record: it accepts again.
            self._resync_due = False
            self._send(wire.LinkNotice(self._next_id(), [["resync", 0, 0]]), "volatile", [], 0)
        while draining and peer.saf_backlog > 0 and self._in_flight < WINDOW_MESSAGES_MAX:
            room = min(TRANSFER_MESSAGES_MAX, WINDOW_MESSAGES_MAX - self._in_flight)
            records, last_key = forwarding.saf_batch(
                self.peer_id, self._saf_cursor, room, TRANSFER_BYTES_MAX
            )
            if last_key == self._saf_cursor:
                break  # nothing more committed yet; a commit will poke us
            self._saf_cursor = last_key
            if records:
                keys = [key for key, _ in records]
                self._saf_copies.update(keys)
                transfer = wire.LinkTransfer(self._next_id(), [fields for _, fields in records])
                self._send(transfer, "saf", keys, len(keys))
        while self._direct and self._in_flight < WINDOW_MESSAGES_MAX:
            room = min(TRANSFER_MESSAGES_MAX, WINDOW_MESSAGES_MAX - self._in_flight)
            chunk = [self._direct.popleft()]
            size = len(chunk[0][0][4])  # the body
            while self._direct and len(chunk) < room:
                size += len(self._direct[0][0][4])
                if size > TRANSFER_BYTES_MAX:
                    break
                chunk.append(self._direct.popleft())
            transfer = wire.LinkTransfer(self._next_id(), [fields for fields, _ in chunk])
            self._send(transfer, "direct", [on_result for _, on_result in chunk], len(chunk))
        if self._forget:
            forget, self._forget = self._forget, []
            for start in range(0, len(forget), NOTICES_PER_FRAME_MAX):
                seqs = forget[start : start + NOTICES_PER_FRAME_MAX]
                notices = [["forget", seq, 0] for seq in seqs]
                # kept until answered: a drop puts them back, so no dedupe key leaks
                self._send(wire.LinkNotice(self._next_id(), notices), "forget", seqs, 0)
        if peer.notices_pending > len(self._notices_in_flight):
            fresh = [
                (key, notice)
                for key, notice in forwarding.pending_notices(
                    self.peer_id, NOTICES_PER_FRAME_MAX + len(self._notices_in_flight)
                )
                if key not in self._notices_in_flight
            ][:NOTICES_PER_FRAME_MAX]
            if fresh:
                keys = [key for key, _ in fresh]
                self._notices_in_flight.update(keys)
                notice = wire.LinkNotice(self._next_id(), [item for _, item in fresh])
                self._send(notice, "notice", keys, 0)

    def _send(self, event: object, kind: str, items: list, count: int) -> None:
        self._outstanding[event.request_id] = _Outstanding(kind, items, count)
        self._in_flight += count
        self.messages_sent += count
        self.channel.send(event)

    def _forgettable(self, seqs: list[int]) -> None:
        """SAF records the peer stored are deleted here for good: no resend possible."""
        self._forget.extend(seqs)
        self._wake.set()

    def restart_drain(self) -> None:
        """The peer refuses the rest of the drain until told we start over: resend
        from the oldest record, after a resync notice."""
        self._resync_due = True
        self._saf_cursor = None

    def _enter_retry(self, answer: DrainAnswer) -> None:
        """Channel rules: a message the peer refused and the DLQ could not take stays
        in the SAF; the drain backs off and starts again from the oldest record (a
        "room" notice from the peer ends the backoff early)."""
        self.drain_wait = {
            "stuck_seq": answer.stuck_seq,
            "status": status_name(answer.stuck_status),
            "reason": answer.reason,
        }
        self.restart_drain()
        if trio.current_time() < self.retry_until:
            return
        if self._room_seen and answer.stuck_status == Status.DQF_FULL:
            self._room_seen = False  # room was freed for us while the answer travelled
            return
        log.warning(
            "link to group %d: SAF drain in RETRY for %.1f s: message %d %s",
            self.peer_id,
            self._retry_s,
            answer.stuck_seq,
            status_name(answer.stuck_status),
        )
        self.retry_until = trio.current_time() + self._retry_s
        self.group.timers.call_later(self._retry_s, self.poke)
        self._retry_s = min(self._retry_s * 2, RETRY_S_MAX)

    def _first_answers(self, answers: list[tuple[bytes, int]]) -> list[tuple[bytes, int]]:
        """Drop answers for records another copy already got stored (a restarted drain
        resends records still in flight), so none is deleted twice."""
        kept = []
        for key, status in answers:
            left = self._saf_copies[key] - 1
            if left > 0:
                self._saf_copies[key] = left
            else:
                self._saf_copies.pop(key, None)
            if key in self._saf_gone:
                if left <= 0:
                    self._saf_gone.discard(key)
                continue
            if status == Status.STORED and left > 0:
                self._saf_gone.add(key)
            kept.append((key, status))
        return kept

    def _next_id(self) -> int:
        return next(self._request_ids)

    # ------------------------------------------------------------------ receiving
    def handle(self, event: object, channel: Channel) -> None:
        """A link event from the peer. Raises wire.RemoteProtocolError on nonsense."""
        forwarding = self.group.forwarding
        try:
            match event:
                case wire.LinkTransfer():
                    self.messages_received += len(event.messages)
                    forwarding.accept_transfer(
                        self.peer_id,
                        event.messages,
                        lambda results, rid=event.request_id: (
                            channel.send(wire.LinkAck(rid, results)) if not channel.closed else None
                        ),
                        self,
                    )
                case wire.LinkNotice():
                    results = forwarding.accept_notices(self.peer_id, event.notices, self)
                    channel.send(wire.LinkAck(event.request_id, results))
                case wire.LinkAck():
                    self._acknowledged(event)
                case wire.Ping():
                    channel.send(wire.Pong(event.nonce))
                case wire.Pong():
                    pass  # heard: the watchdog has noted it
                case _:
                    raise TransferError(f"unexpected {type(event).__name__} on a link")
        except TransferError as error:
            raise wire.RemoteProtocolError(str(error)) from None

    def _acknowledged(self, ack: wire.LinkAck) -> None:
        pending = self._outstanding.pop(ack.request_id, None)
        if pending is None:
            return  # an answer from a connection generation already given up
        self._in_flight -= pending.count
        if pending.kind in ("direct", "saf") and len(ack.results) != len(pending.items):
            raise TransferError(
                f"LinkAck answers {len(ack.results)} messages, {len(pending.items)} were sent"
            )
        if pending.kind == "direct":
            for on_result, result in zip(pending.items, ack.results, strict=True):
                seq, status, stored_seq = _result(result)
                if status == Status.STORED:
                    self._forget.append(seq)
                on_result(status, stored_seq)
        elif pending.kind == "saf":
            answers = self._first_answers(
                [
                    (key, _result(result)[1])
                    for key, result in zip(pending.items, ack.results, strict=True)
                ]
            )
            answer = self.group.forwarding.saf_answered(self.peer_id, answers, self._forgettable)
            if answer.retry:
                self._enter_retry(answer)
            elif answer.restart:
                self.restart_drain()
            else:
                self._retry_s = RETRY_S_MIN
                self._room_seen = False
                if answers:
                    self.drain_wait = None
        elif pending.kind == "volatile" and pending.items:
            pending.items[0]()  # mrs.receipts: the peer has them
        elif pending.kind == "notice":
            # Keep them "in flight" until their deletion is durable, or they would be
            # read back from the journal and sent again meanwhile.
            keys = pending.items
            self.group.forwarding.notices_delivered(
                self.peer_id, keys, lambda: self._notices_in_flight.difference_update(keys)
            )
        self._wake.set()


def _result(result: object) -> tuple[int, int, int]:
    if (
        not isinstance(result, list)
        or len(result) != 3
        or not all(isinstance(value, int) for value in result)
    ):
        raise TransferError(f"a LinkAck result must be [seq, status, stored_seq], got {result!r}")
    return result[0], result[1], result[2]


# ---------------------------------------------------------------------- dialing side
@dataclass(eq=False)
class DialedChannel:
    """The dialer's end of a link connection: a send loop like a server session's."""

    stream: trio.abc.Stream
    connection: wire.Connection
    closed: bool = False
    _outbox: list[bytes] = field(default_factory=list)
    _ready: trio.Event = field(default_factory=trio.Event)

    def send(self, event: object) -> None:
        if self.closed:
            return
        self._outbox.append(self.connection.send(event))
        self._ready.set()

    async def send_loop(self) -> None:
        while True:
            await self._ready.wait()
            self._ready = trio.Event()
            if self._outbox:
                data = b"".join(self._outbox)
                self._outbox.clear()
                await self.stream.send_all(data)


async def dial_forever(
    link: PeerLink,
    host: str,
    port: int,
    group_id: int,
    frame_bytes_max: int,
    network: Network = TCP,
    guards: Guards | None = None,
    secure: Callable[[trio.abc.Stream, int], Awaitable[None]] | None = None,
) -> None:
    """Keep the link to a higher-numbered peer up: connect, handshake, serve; on any
    failure wait (capped exponential backoff) and try again. secure: authenticate the
    new stream to the peer (mrs.security) before the link Hello."""
    backoff_s = BACKOFF_S_MIN
    while True:
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                stream = await network.connect(host, port)
            async with stream:
                if secure is not None:
                    with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                        await secure(stream, link.peer_id)
                channel = DialedChannel(stream, wire.Connection("client", frame_bytes_max))
                await _handshake(channel, link.peer_id, group_id)
                backoff_s = BACKOFF_S_MIN
                link.up(channel)
                try:
                    await _serve_dialed(link, channel, guards or Guards())
                finally:
                    channel.closed = True
                    link.down("connection closed", channel)
        except Exception as error:  # noqa: BLE001 - the link retries whatever went wrong
            log.info(
                "link to group %d at %s:%d: %s; retrying in %.2f s",
                link.peer_id,
                host,
                port,
                _describe(error),
                backoff_s,
            )
        await trio.sleep(backoff_s)
        backoff_s = min(backoff_s * 2, BACKOFF_S_MAX)


def _describe(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in error.exceptions)
    return str(error) or type(error).__name__


class LinkRefused(MrsError):
    """The peer closed, refused or was not the group we dialed: the link stays down."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.LINK_DOWN, message)


async def _handshake(channel: DialedChannel, peer_id: int, group_id: int) -> None:
    hello = wire.Hello(wire.PROTOCOL_VERSION, f"{LINK_PROGRAM_PREFIX}{group_id}", "link", group_id)
    await channel.stream.send_all(channel.connection.send(hello))
    with trio.fail_after(HANDSHAKE_TIMEOUT_S):
        while True:
            event = channel.connection.next_event()
            if event is wire.NEED_DATA:
                data = await channel.stream.receive_some(RECEIVE_BYTES_MAX)
                if not data:
                    raise LinkRefused("peer closed during the handshake")
                channel.connection.receive_data(data)
                continue
            break
    if isinstance(event, wire.Fatal):
        raise LinkRefused(f"peer refused the link: {event.message}")
    if not isinstance(event, wire.Welcome) or event.group_id != peer_id:
        found = getattr(event, "group_id", event)
        raise LinkRefused(f"expected group {peer_id} at this address, found {found}")


async def _serve_dialed(link: PeerLink, channel: DialedChannel, guards: Guards) -> None:
    liveness = Liveness(handshake_done=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(channel.send_loop)
        nursery.start_soon(_watch_dialed, link, channel, liveness, guards, nursery.cancel_scope)
        connection = channel.connection
        data = b"(events already buffered with the Welcome)"
        while True:
            events = connection.events()
            for event in events:
                if event is wire.CLOSED or isinstance(event, wire.Fatal):
                    nursery.cancel_scope.cancel()
                    return
                link.handle(event, channel)
            if not data:
                nursery.cancel_scope.cancel()
                return
            liveness.heard(connection.buffered_bytes, len(events))
            data = await channel.stream.receive_some(RECEIVE_BYTES_MAX)
            connection.receive_data(data)


def _ping(channel: DialedChannel) -> None:
    with contextlib.suppress(wire.ProtocolError):
        channel.send(wire.Ping(next_nonce()))


async def _watch_dialed(
    link: PeerLink,
    channel: DialedChannel,
    liveness: Liveness,
    guards: Guards,
    scope: trio.CancelScope,
) -> None:
    """Ping a quiet peer; after link_silence_s_max of silence, give the link up (the
    dial loop reconnects; meanwhile LINK_DOWN and the UMAs apply)."""
    why = await watch(
        liveness,
        guards,
        lambda: guards.link_silence_s_max,
        lambda: _ping(channel),
    )
    log.warning("link to group %d declared down: %s", link.peer_id, why)
    scope.cancel()


LINK_PROGRAM_DIGITS_MAX = 5
"""Group ids are 1..32000: more digits than this is not a group (and int() of a few
thousand digits would raise ValueError)."""


def parse_link_program(program: str) -> int | None:
    """The group id a link Hello names ("group:3" -> 3), None if malformed.

    Only ASCII digits count: str.isdigit() is also true for "²" or "٣", which int()
    refuses or reads as another number."""
    if not program.startswith(LINK_PROGRAM_PREFIX):
        return None
    digits = program[len(LINK_PROGRAM_PREFIX) :]
    if not (0 < len(digits) <= LINK_PROGRAM_DIGITS_MAX and digits.isascii() and digits.isdigit()):
        return None
    return int(digits)
