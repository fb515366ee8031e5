"""Room: this group's side of the link to one peer — window, SAF drain, retry, resync —
without I/O.

Sans-I/O: the session is given the time (`now_s`) and a channel to send events on,
is told what arrived (`handle`) and when the connection came and went (`up`,
`down`), and asks its driver to `flush()` soon by calling `wake()`. Every network
and timing decision lives in mrs.group.link_driver, so this state machine is tested
without sockets. When the connection drops, everything in flight is answered
LINK_LOST (the outbound rules decide what that means).
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from mrs import protocol as wire
from mrs.group.drain import DrainAnswer
from mrs.group.peers import Result
from mrs.group.queue_lookup import local_counts
from mrs.group.transfer import LINK_LOST, TransferError, status_name
from mrs.group.wiring import LinkRooms
from mrs.limits import LINK_DIRECT_MESSAGES_MAX
from mrs.limits import LINK_FRAME_OVERHEAD_BYTES as FRAME_OVERHEAD_BYTES  # noqa: F401 (re-exported)
from mrs.limits import LINK_NOTICES_PER_FRAME_MAX as NOTICES_PER_FRAME_MAX
from mrs.limits import LINK_RETRY_S_MAX as RETRY_S_MAX
from mrs.limits import LINK_RETRY_S_MIN as RETRY_S_MIN
from mrs.limits import LINK_TRANSFER_BYTES_MAX as TRANSFER_BYTES_MAX
from mrs.limits import LINK_TRANSFER_MESSAGES_MAX as TRANSFER_MESSAGES_MAX
from mrs.limits import LINK_WINDOW_MESSAGES_MAX as WINDOW_MESSAGES_MAX
from mrs.model import Status

log = logging.getLogger("mrs.links")



def _no_clock() -> float:
    raise RuntimeError("PeerLink.now_s not set: run it under mrs.group.link_driver")


def _nothing() -> None:
    pass


class Channel(Protocol):
    closed: bool

    def send(self, event: object) -> None: ...


class Sent(enum.Enum):
    """What an unanswered frame carried, so its LinkAck is settled the right way."""

    DIRECT = "direct"
    """Messages sent straight from a put; items: their on_result callbacks."""
    SAF = "saf"
    """A SAF drain transfer; items: the SAF keys."""
    NOTICE = "notice"
    """Journaled notices; items: their journal keys."""
    FORGET = "forget"
    """Forget notices; items: their seqs (put back if the link drops)."""
    VOLATILE = "volatile"
    """Notices kept nowhere but the sender's memory; items: [answered()] or []."""
    QUERY = "query"
    """A pending-count query (mrs.group.queue_lookup); items: [answered(counts)]."""


@dataclass(eq=False)
class _Outstanding:
    sent: Sent
    items: list
    count: int


@dataclass(eq=False)
class PeerLink:
    """This group's side of the link to one peer group."""

    rooms: LinkRooms
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
    """While now_s() < this, the SAF drain is in RETRY (channel rules)."""
    _retry_s: float = RETRY_S_MIN
    now_s: Callable[[], float] = _no_clock
    """The time in seconds (the driver's clock; a test gives its own)."""
    wake: Callable[[], None] = _nothing
    """Ask the driver to call flush() soon (set by mrs.group.link_driver)."""

    # ------------------------------------------------------------------ LinkPort
    @property
    def direct_full(self) -> bool:
        return len(self._direct) >= LINK_DIRECT_MESSAGES_MAX

    def send_message(self, message: wire.TransferredMessage, on_result: Result) -> None:
        self._direct.append((message, on_result))
        self.wake()

    def poke(self) -> None:
        self.wake()

    def resend_saf(self) -> None:
        """Drained records could not be deleted: drain again from the oldest record
        (the peer answers its copies STORED again), so they are deleted in the end."""
        self.restart_drain()
        self.wake()

    def send_notices(
        self, notices: list[wire.AnyNotice], answered: Callable[[], None] | None = None
    ) -> None:
        """Notices not journaled here; `answered()` once the peer answered them."""
        if self.channel is not None:
            items = [answered] if answered is not None else []
            self._send(wire.LinkNotice(self._next_id(), notices), Sent.VOLATILE, items, 0)

    def ask_pending(
        self, queue_ids: list[int], answered: Callable[[list[int] | None], None]
    ) -> None:
        """Ask the peer for its queues' pending counts (a client's ShowPending):
        `answered(counts)` with its LinkPendingCounts, `answered(None)` if the link
        drops first (nothing is journaled: the client is answered LINK_DOWN)."""
        if self.channel is None:
            answered(None)
            return
        query = wire.LinkPendingQuery(self._next_id(), queue_ids)
        self._send(query, Sent.QUERY, [answered], 0)

    def room(self) -> None:
        """The peer holds a DQF slot for this drain: end the RETRY backoff now."""
        self._room_seen = True
        if self.retry_until > self.now_s():
            self.retry_until = self.now_s()
        self.wake()

    def status_info(self) -> dict:
        wait = None
        if self.drain_wait is not None:
            backlog = self.rooms.peers[self.peer_id].saf_backlog
            wait = {
                **self.drain_wait,
                "waiting_behind": max(backlog - 1, 0),
                "retry_in_s": round(max(self.retry_until - self.now_s(), 0.0), 3),
            }
        return {
            "drain": "retry" if self.now_s() < self.retry_until else "running",
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
        self.rooms.outbound.link_up(self.peer_id, self)
        self.wake()

    def down(self, why: str, channel: Channel | None = None) -> None:
        """The connection ended: answer everything in flight LINK_LOST."""
        if self.channel is None or (channel is not None and channel is not self.channel):
            return
        self.channel = None
        log.warning("link to group %d lost: %s", self.peer_id, why)
        self.rooms.outbound.link_down(self.peer_id)
        outstanding, self._outstanding = self._outstanding, {}
        self._in_flight = 0
        for pending in outstanding.values():
            if pending.sent is Sent.FORGET:
                self._forget.extend(pending.items)
            if pending.sent is Sent.DIRECT:
                for on_result in pending.items:
                    on_result(LINK_LOST, 0)
            if pending.sent is Sent.QUERY:
                pending.items[0](None)
        while self._direct:
            _, on_result = self._direct.popleft()
            on_result(LINK_LOST, 0)

    # ------------------------------------------------------------------ sending
    def flush(self) -> None:
        rooms = self.rooms
        peer = rooms.peers[self.peer_id]
        draining = self.now_s() >= self.retry_until
        if draining and self._resync_due:
            # Tell the peer we start over from the oldest record: it accepts again.
            self._resync_due = False
            resync = wire.LinkNotice(self._next_id(), [wire.ResyncNotice(0, 0)])
            self._send(resync, Sent.VOLATILE, [], 0)
        while draining and peer.saf_backlog > 0 and self._in_flight < WINDOW_MESSAGES_MAX:
            room = min(TRANSFER_MESSAGES_MAX, WINDOW_MESSAGES_MAX - self._in_flight)
            records, last_key = rooms.drain.saf_batch(
                self.peer_id, self._saf_cursor, room, TRANSFER_BYTES_MAX
            )
            if last_key == self._saf_cursor:
                break  # nothing more committed yet; a commit will poke us
            self._saf_cursor = last_key
            if records:
                keys = [key for key, _ in records]
                self._saf_copies.update(keys)
                transfer = wire.LinkTransfer(self._next_id(), [message for _, message in records])
                self._send(transfer, Sent.SAF, keys, len(keys))
        while self._direct and self._in_flight < WINDOW_MESSAGES_MAX:
            room = min(TRANSFER_MESSAGES_MAX, WINDOW_MESSAGES_MAX - self._in_flight)
            chunk = [self._direct.popleft()]
            size = len(chunk[0][0].body)
            while self._direct and len(chunk) < room:
                size += len(self._direct[0][0].body)
                if size > TRANSFER_BYTES_MAX:
                    break
                chunk.append(self._direct.popleft())
            transfer = wire.LinkTransfer(self._next_id(), [message for message, _ in chunk])
            self._send(transfer, Sent.DIRECT, [on_result for _, on_result in chunk], len(chunk))
        if self._forget:
            forget, self._forget = self._forget, []
            for start in range(0, len(forget), NOTICES_PER_FRAME_MAX):
                seqs = forget[start : start + NOTICES_PER_FRAME_MAX]
                notices = [wire.ForgetNotice(seq, 0) for seq in seqs]
                # kept until answered: a drop puts them back, so no dedupe key leaks
                self._send(wire.LinkNotice(self._next_id(), notices), Sent.FORGET, seqs, 0)
        if peer.notices_pending > len(self._notices_in_flight):
            fresh = [
                (key, notice)
                for key, notice in rooms.notices.pending_notices(
                    self.peer_id, NOTICES_PER_FRAME_MAX + len(self._notices_in_flight)
                )
                if key not in self._notices_in_flight
            ][:NOTICES_PER_FRAME_MAX]
            if fresh:
                keys = [key for key, _ in fresh]
                self._notices_in_flight.update(keys)
                notice = wire.LinkNotice(self._next_id(), [item for _, item in fresh])
                self._send(notice, Sent.NOTICE, keys, 0)

    def _send(self, event: object, sent: Sent, items: list, count: int) -> None:
        self._outstanding[event.request_id] = _Outstanding(sent, items, count)
        self._in_flight += count
        self.messages_sent += count
        self.channel.send(event)

    def _forgettable(self, seqs: list[int]) -> None:
        """SAF records the peer stored are deleted here for good: no resend possible."""
        self._forget.extend(seqs)
        self.wake()

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
        if self.now_s() < self.retry_until:
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
        self.retry_until = self.now_s() + self._retry_s
        self.rooms.timers.call_later(self._retry_s, self.poke)
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
        rooms = self.rooms
        try:
            match event:
                case wire.LinkTransfer():
                    self.messages_received += len(event.messages)
                    rooms.inbound.accept_transfer(
                        self.peer_id,
                        event.messages,
                        lambda results, rid=event.request_id: (
                            channel.send(wire.LinkAck(rid, results)) if not channel.closed else None
                        ),
                        self,
                    )
                case wire.LinkNotice():
                    results = rooms.notices.accept_notices(self.peer_id, event.notices, self)
                    channel.send(wire.LinkAck(event.request_id, results))
                case wire.LinkAck():
                    self._acknowledged(event)
                case wire.LinkPendingQuery():
                    counts = local_counts(rooms.peers.ctx, event.queues)
                    channel.send(wire.LinkPendingCounts(event.request_id, counts))
                case wire.LinkPendingCounts():
                    self._counted(event)
                case wire.Ping():
                    channel.send(wire.Pong(event.nonce))
                case wire.Pong():
                    pass  # heard: the watchdog has noted it
                case _:
                    raise TransferError(f"unexpected {type(event).__name__} on a link")
        except TransferError as error:
            raise wire.RemoteProtocolError(str(error)) from None

    def _counted(self, answer: wire.LinkPendingCounts) -> None:
        pending = self._outstanding.get(answer.request_id)
        if pending is None or pending.sent is not Sent.QUERY:
            return  # an answer from a connection generation already given up
        del self._outstanding[answer.request_id]
        pending.items[0](list(answer.counts))

    def _acknowledged(self, ack: wire.LinkAck) -> None:
        pending = self._outstanding.pop(ack.request_id, None)
        if pending is None:
            return  # an answer from a connection generation already given up
        self._in_flight -= pending.count
        sent = pending.sent
        if sent in (Sent.DIRECT, Sent.SAF) and len(ack.results) != len(pending.items):
            raise TransferError(
                f"LinkAck answers {len(ack.results)} messages, {len(pending.items)} were sent"
            )
        if sent is Sent.DIRECT:
            for on_result, result in zip(pending.items, ack.results, strict=True):
                if result.status == Status.STORED:
                    self._forget.append(result.seq)
                on_result(result.status, result.stored_seq)
        elif sent is Sent.SAF:
            answers = self._first_answers(
                [
                    (key, result.status)
                    for key, result in zip(pending.items, ack.results, strict=True)
                ]
            )
            answer = self.rooms.drain.saf_answered(self.peer_id, answers, self._forgettable)
            if answer.retry:
                self._enter_retry(answer)
            elif answer.restart:
                self.restart_drain()
            else:
                self._retry_s = RETRY_S_MIN
                self._room_seen = False
                if answers:
                    self.drain_wait = None
        elif sent is Sent.VOLATILE and pending.items:
            pending.items[0]()  # mrs.group.receipts: the peer has them
        elif sent is Sent.NOTICE:
            # Keep them "in flight" until their deletion is durable, or they would be
            # read back from the journal and sent again meanwhile.
            keys = pending.items
            self.rooms.notices.notices_delivered(
                self.peer_id, keys, lambda: self._notices_in_flight.difference_update(keys)
            )
        self.wake()
