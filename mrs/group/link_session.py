"""Room: this group's side of the link to one peer — window, SAF drain, retry, resync —
without I/O.

Sans-I/O: the session is given the time (`now_s`) and a channel to send events on,
is told what arrived (`handle`) and when the connection came and went (`up`,
`down`), and asks its driver to `flush()` soon by calling `wake()`. Every network
and timing decision lives in mrs.group.link_driver, so this state machine is tested
without sockets. When the connection drops, everything in flight is answered
LINK_LOST (the outbound rules decide what that means).

The drain never resends what the peer refused before the peer can take it: refused
DQF_FULL, it asks the peer to hold DQF room for it (WaitNotice) and then sends only
into the slots the peer says it holds (the answer, then RoomNotices), until its
backlog is empty (LeaveNotice); refused for another reason, it backs off (RETRY)
and then sends the stuck message alone until one transfer is stored. A WARNING is
logged when the drain starts to wait, not for each message refused.
"""

from __future__ import annotations

import enum
import itertools
import logging
import re
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

from journals import Journal, group_key, split_key
from mrs import protocol as wire
from mrs.core.refusals import RefusalLog
from mrs.group.drain import SEQ_HELD, DrainAnswer, refusal_reason
from mrs.group.peers import Result
from mrs.group.queue_lookup import local_counts
from mrs.group.shapes import TransferError
from mrs.group.transfer import LINK_LOST, status_name
from mrs.group.wiring import LinkRooms
from mrs.limits import (
    LINK_BACKOFF_S_MAX,
    LINK_DIRECT_BYTES_MAX,
    LINK_DIRECT_MESSAGES_MAX,
    PENDING_QUEUES_MAX,
    RECEIPTS_PER_FRAME_MAX,
    REFUSAL_LOG_INTERVAL_S,
)
from mrs.limits import LINK_FRAME_OVERHEAD_BYTES as FRAME_OVERHEAD_BYTES  # noqa: F401 (re-exported)
from mrs.limits import LINK_NOTICES_PER_FRAME_MAX as NOTICES_PER_FRAME_MAX
from mrs.limits import LINK_RETRY_S_MAX as RETRY_S_MAX
from mrs.limits import LINK_RETRY_S_MIN as RETRY_S_MIN
from mrs.limits import LINK_TRANSFER_BYTES_MAX as TRANSFER_BYTES_MAX
from mrs.limits import LINK_TRANSFER_MESSAGES_MAX as TRANSFER_MESSAGES_MAX
from mrs.limits import LINK_WINDOW_BYTES_MAX as WINDOW_BYTES_MAX
from mrs.limits import LINK_WINDOW_MESSAGES_MAX as WINDOW_MESSAGES_MAX
from mrs.model import DeliveryMode, Status

log = logging.getLogger("mrs.links")

_DIGITS: Final = re.compile(r"\d+")
"""What varies between two lines of one kind (seqs, sizes, ports): `PeerLink.down`."""

_NOT_REFUSED_HERE = frozenset({Status.STORED, Status.DLQ_SUCCESS, Status.LINK_DOWN, LINK_LOST})
"""Answers that name no refusal in their own transfer."""


def _no_clock() -> float:
    raise RuntimeError("PeerLink.now_s not set: run it under mrs.group.link_driver")


def _nothing() -> None:
    pass


class Channel(Protocol):
    closed: bool

    def send(self, event: object) -> None: ...


_Asked = wire.LinkTransfer | wire.LinkNotice | wire.LinkPendingQuery
"""What this side sends and the peer answers (by request id)."""


@dataclass(eq=False, slots=True)
class _AckTransfer:
    """Answers one transfer once every message in it has its result, unless the
    connection it came on has closed meanwhile (the peer resends on the next)."""

    channel: Channel
    request_id: int

    def __call__(self, results: list[wire.LinkResult]) -> None:
        if not self.channel.closed:
            self.channel.send(wire.LinkAck(self.request_id, results))


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
    WAIT = "wait"
    """A WaitNotice; its answer says how many DQF slots the peer holds for the drain."""


@dataclass(eq=False)
class _Outstanding:
    sent: Sent
    items: list
    count: int
    drain_pass: int = 0
    """For SAF transfers: the drain pass (restart count) it was sent in."""
    frame_bytes: int = 0
    """Its frame's size (counted against WINDOW_BYTES_MAX until answered)."""
    sent_s: float = 0.0
    """When it was sent (`unanswered_s`)."""
    saf_keys: list[bytes] = field(default_factory=list)
    """For DIRECT transfers: the SAF keys its recoverable messages take if the link
    drops before the answer (their drain is then a resend: `PeerLink.messages_resent`)."""


@dataclass(eq=False)
class PeerLink:
    """This group's side of the link to one peer group."""

    rooms: LinkRooms
    peer_id: int
    channel: Channel | None = None
    generation: int = 0
    messages_received: int = 0
    _request_ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _direct: deque = field(default_factory=deque)
    _direct_bytes: int = 0
    """Bytes of the bodies in `_direct` (LINK_DIRECT_BYTES_MAX)."""
    _outstanding: dict[int, _Outstanding] = field(default_factory=dict)
    _in_flight: int = 0
    _in_flight_bytes: int = 0
    """Bytes of the frames the peer has not answered: the window is bounded in bytes
    too (a peer that stops reading left up to 2048 messages of 1 MiB in this outbox),
    and the link's reader does not count them as answers it waits to write
    (mrs.group.link_driver)."""
    _saf_cursor: bytes | None = None
    _saf_unwritten: set[bytes] = field(default_factory=set)
    """SAF keys submitted to the writer and not yet seen committed: one may land
    behind the cursor (see `saf_submitted`)."""
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
    """Why the SAF drain waits (RETRY, or room in the peer's DQF): the message the
    peer refused, its status and reason."""
    _drain_pass: int = 0
    """Counts drain restarts: a refusal answered to an earlier pass was handled."""
    _room_credit: int | None = None
    """While the drain waits for room in the peer's DQF: messages it may still send
    (slots the peer holds for it); None while it sends its whole window."""
    _room_asked: bool = False
    """A WaitNotice is unanswered: its answer counts the RoomNotices sent before it."""
    _ask_due: bool = False
    _probe_left: int | None = None
    """After a RETRY backoff: messages the drain may send until one transfer is
    stored (the stuck one alone); None when not retrying."""
    _resync_due: bool = False
    _unexplained_restart: bool = False
    """The drain's last restart was for LINK_DOWN answers behind no failure the peer
    named (`_refused_unexplained`); cleared once a transfer is settled."""
    _room_warned_s: float = float("-inf")
    """When the last wait for room was logged as a WARNING (`_wait_for_room`)."""
    retry_until: float = 0.0
    """While now_s() < this, the SAF drain is in RETRY (channel rules)."""
    _ending: tuple[object, str] | None = None
    """(connection, the line saying why it ends), told by the driver (`ending`) before
    it calls `down`: the one line the drop logs."""
    _down_since_s: float | None = None
    """When the link went down (None before its first connection): the line saying it
    is up again tells how long it was down."""
    _saf_sent_max: bytes | None = None
    """The highest SAF key this link ever sent (over every connection): the drain reads
    in key order, so a key at or below it was sent before (a resend), unless it is in
    `_saf_never_sent`. How `messages_sent` tells first sends from resends."""
    _saf_never_sent: set[bytes] = field(default_factory=set)
    """SAF keys at or below `_saf_sent_max` never sent yet: a record committed behind
    the cursor (`_rewind_to_unwritten`), a direct message still queued when the link
    dropped. Dropped once sent, or once below the SAF's oldest record."""
    _saf_sent_before: set[bytes] = field(default_factory=set)
    """SAF keys of messages sent directly and in flight when the link dropped: kept in
    the SAF, their drain is a resend. Dropped like `_saf_never_sent`."""
    _retry_s: float = RETRY_S_MIN
    _up_since_s: float = float("-inf")
    """When the current (or last) connection came up."""
    _breaks_at_once: int = 0
    """Connections running that broke at once (`down`); from two on, the next one's
    "up" line waits until it has served LINK_BACKOFF_S_MAX (`_UpLine`)."""
    _up_said: bool = False
    """The current (or last) connection's "up" line was logged."""
    _flap_lines: RefusalLog | None = None
    now_s: Callable[[], float] = _no_clock
    """The time in seconds (the driver's clock; a test gives its own)."""
    wake: Callable[[], None] = _nothing
    """Ask the driver to call flush() soon (set by mrs.group.link_driver)."""

    # ------------------------------------------------------------------ LinkPort
    @property
    def direct_full(self) -> bool:
        return (
            len(self._direct) >= LINK_DIRECT_MESSAGES_MAX
            or self._direct_bytes >= LINK_DIRECT_BYTES_MAX
        )

    def send_message(self, message: wire.TransferredMessage, on_result: Result) -> None:
        self._direct.append((message, on_result))
        self._direct_bytes += len(message.body)
        self.wake()

    def poke(self) -> None:
        self.wake()

    def saf_submitted(self, key: bytes) -> None:
        """A SAF record is on its way to the journal. The drain reads the SAF in key
        (seq) order from a cursor, and a record can be committed after later keys were
        drained: an AK_CONF put to another group writes its record only once its owed
        MRS_ACK is answered, which in a replicated group waits for a replica while
        other producers' records are committed (and readable) here. The next flush
        that finds it committed behind the cursor moves the cursor back to it."""
        self._saf_unwritten.add(key)

    def saf_written(self, key: bytes, committed: bool) -> None:
        """Its commit is answered: drain it. One that failed, or that is still ahead
        of the cursor (the drain reads it in order), needs no check at the next
        flush."""
        cursor = self._saf_cursor
        if not committed or cursor is None or key > cursor:
            self._saf_unwritten.discard(key)
        self.wake()

    def resend_saf(self, after_s: float = 0.0) -> None:
        """Drained records could not be deleted: drain again from the oldest record
        (the peer answers its copies STORED again), so they are deleted in the end,
        once `after_s` has passed (the drain's backoff while deletions fail)."""
        self.restart_drain()
        if after_s > 0:
            self.retry_until = max(self.retry_until, self.now_s() + after_s)
            self.rooms.timers.call_later(after_s, self.poke)
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

    def room(self, slots: int) -> None:
        """The peer holds `slots` more DQF slots for this drain: send that many more."""
        if self._room_credit is None or self._room_asked:
            return  # not waiting, or the answer to the WaitNotice counts them
        self._room_credit += slots
        self.wake()

    def unanswered_s(self) -> float:
        """How long the oldest frame the peer has not answered has waited (0 if none):
        a peer that answers pings but nothing else looks alive to the heartbeat, and
        would hold the window, the drain and every put it was sent for ever."""
        oldest = next(iter(self._outstanding.values()), None)
        return 0.0 if oldest is None else self.now_s() - oldest.sent_s

    @property
    def waits_for_room(self) -> bool:
        """The drain has messages to send and no DQF slot of the peer to send them to."""
        return self._room_credit == 0 or self._room_asked

    def status_info(self) -> dict:
        wait = None
        if self.drain_wait is not None:
            backlog = self.rooms.peers[self.peer_id].saf_backlog
            wait = {
                **self.drain_wait,
                "waiting_behind": max(backlog - 1, 0),
                "retry_in_s": round(max(self.retry_until - self.now_s(), 0.0), 3),
            }
        waiting = self.waits_for_room and self.rooms.peers[self.peer_id].saf_backlog > 0
        return {
            "drain": "retry" if self.now_s() < self.retry_until or waiting else "running",
            "drain_wait": wait,
            "room_credit": self._room_credit,
            "in_flight": self._in_flight,
            "queued": len(self._direct),
            "connections": self.generation,
            "messages_sent": self.messages_sent,
            "messages_resent": self.messages_resent,
            "messages_received": self.messages_received,
        }

    # ------------------------------------------------------------------ up / down
    def up(self, channel: Channel) -> None:
        """A connection to the peer is ready. One INFO line: up, after how long down,
        and what waits to be sent (a replaced connection says so instead)."""
        old = self.channel
        if old is not None:
            self._drop()
            # Told it is over, the old connection's peer closes it and dials again. Left
            # open, it looked alive to the dialer (its heartbeats were answered) while
            # this side counted the link down once the new connection ended: nothing
            # went from here to the peer until the link was cut by hand.
            if not old.closed:
                old.send(wire.Fatal(int(Status.LINK_DOWN), "replaced by a new connection"))
        self.channel = channel
        self.generation += 1
        self.inbound_failed_at = None
        self._saf_copies.clear()
        self._saf_gone.clear()
        self._resync_due = False
        self._saf_cursor = None
        self._notices_in_flight.clear()
        if self._room_credit is not None:  # the peer forgot the room it held for us
            self._room_credit, self._room_asked, self._ask_due = 0, False, True
        self.rooms.outbound.link_up(self.peer_id, self)
        self._up_since_s = now_s = self.now_s()
        if old is not None:
            queued = self._queued()
            log.info("link to group %d: a new connection replaced it (%s)", self.peer_id, queued)
            self._up_said = True
        elif self._breaks_at_once >= 2:
            # It keeps breaking at once: "up" once this one has served a while (its
            # end, if it breaks first, rate limited: `down`).
            self._up_said = False
            self.rooms.timers.call_later(LINK_BACKOFF_S_MAX, _UpLine(self, channel, now_s))
        else:
            self._say_up()
        self.wake()

    def _say_up(self) -> None:
        """The line saying the link is up: after how long down, what waits to be sent."""
        since_s, self._down_since_s = self._down_since_s, None
        self._up_said = True
        if since_s is None:
            log.info("link to group %d up (%s)", self.peer_id, self._queued())
        else:
            down_s = self._up_since_s - since_s
            log.info(
                "link to group %d up after %.1f s down (%s)", self.peer_id, down_s, self._queued()
            )

    def served_a_while(self, channel: Channel, up_s: float) -> None:
        """`channel`, up since `up_s`, has served LINK_BACKOFF_S_MAX (`_UpLine`): if it
        is still this link's connection, it no longer breaks at once: say "up"."""
        if self.channel is channel and self._up_since_s == up_s:
            self._breaks_at_once = 0
            self._say_up()

    def _queued(self) -> str:
        peer = self.rooms.peers[self.peer_id]
        return f"SAF backlog {peer.saf_backlog}" + (
            f", {peer.notices_pending} notices to send" if peer.notices_pending else ""
        )

    def ending(self, channel: Channel, line: str) -> None:
        """Why `channel` ends, said by the driver before it calls `down`: the first
        reason told for a connection is the one `down` logs (a watchdog's, a protocol
        error, the peer's Fatal, a socket's error), not the close that follows it."""
        if self._ending is None or self._ending[0] is not channel:
            self._ending = (channel, line)

    def down(self, why: str, channel: Channel | None = None) -> None:
        """The connection ended: answer everything in flight LINK_LOST. One WARNING:
        down, and why (what the driver told `ending`, or `why`). Why one: a drop
        wrote three lines on the dialing group (the link lost, the link down, the
        redial failing), none of them saying the cause when a watchdog ended it.
        After two connections running that broke at once (each served less than
        LINK_BACKOFF_S_MAX: a peer that lies, or closes after the handshake), the next
        says "up" only once it has served that long (`up`), and the end of one that
        did not is one line per kind per interval, with the count not shown: such a
        peer wrote a line down and a line up for each connection, every 2 s on the
        dialer, and on the group it dialed at whatever rate it dialed."""
        if self.channel is None or (channel is not None and channel is not self.channel):
            return
        ended = self._ending
        line = ended[1] if ended is not None and ended[0] is self.channel else ""
        line = line or f"link to group {self.peer_id} down: {why}"
        now_s = self.now_s()
        at_once = now_s - self._up_since_s < LINK_BACKOFF_S_MAX
        if at_once and not self._up_said:
            self._flaps().refused("link_flap", "", line, key=_DIGITS.sub("#", line))
        else:  # the outage of a link said to be up, or one that served a while
            log.warning("%s", line)
        self._breaks_at_once = self._breaks_at_once + 1 if at_once else 0
        if self._down_since_s is None:  # the outage began (still down since an "up" unsaid)
            self._down_since_s = now_s
        self._drop()

    def _flaps(self) -> RefusalLog:
        """The lines of connections that broke at once (`down`) and of answers to no
        frame in flight (`_answers_nothing`), rate limited."""
        if self._flap_lines is None:
            self._flap_lines = RefusalLog(log, clock_s=self.now_s, line_format="{message}")
        return self._flap_lines

    def _drop(self) -> None:
        """Forget the connection: answer everything in flight LINK_LOST."""
        self.channel = None
        self._ending = None
        self.rooms.outbound.link_down(self.peer_id)
        outstanding, self._outstanding = self._outstanding, {}
        self._in_flight = self._in_flight_bytes = 0
        for pending in outstanding.values():
            self._saf_sent_before.update(pending.saf_keys)
            if pending.sent is Sent.FORGET:
                self._forget.extend(pending.items)
            if pending.sent is Sent.DIRECT:
                for on_result in pending.items:
                    on_result(LINK_LOST, 0)
            if pending.sent is Sent.QUERY:
                pending.items[0](None)
        high = self._saf_sent_max
        self._direct_bytes = 0
        while self._direct:
            message, on_result = self._direct.popleft()
            key = _saf_key_of(self.peer_id, message)
            if key is not None and high is not None and key <= high:
                self._saf_never_sent.add(key)
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
        self._room_notices(peer.saf_backlog)
        if self._saf_unwritten:
            self._rewind_to_unwritten()
        if draining and peer.saf_backlog > 0:
            self._drain_saf()
        self._send_direct_queue()
        if peer.forgets_due:  # their journaled copies are gone (mrs.group.acks)
            self._forget.extend(peer.forgets_due)
            peer.forgets_due.clear()
        if self._forget:
            forget, self._forget = self._forget, []
            for start in range(0, len(forget), NOTICES_PER_FRAME_MAX):
                seqs = forget[start : start + NOTICES_PER_FRAME_MAX]
                notices: list[wire.AnyNotice] = [wire.ForgetNotice(seq, 0) for seq in seqs]
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

    def _drain_saf(self) -> None:
        """Send the SAF backlog from the cursor, in seq order, as the window allows."""
        while (room := self._drain_allowance()) > 0 and (bytes_room := self._bytes_room()) > 0:
            records, last_key = self.rooms.drain.saf_batch(
                self.peer_id, self._saf_cursor, room, min(TRANSFER_BYTES_MAX, bytes_room)
            )
            if last_key == self._saf_cursor:
                break  # nothing more committed yet; a commit will poke us
            if records and self._saf_cursor is None:
                self._forget_sent_below(records[0][0])
            self._saf_cursor = last_key
            if records:
                keys = [key for key, _ in records]
                self._saf_copies.update(keys)
                messages = [message for _, message in records]
                transfer = wire.LinkTransfer(self._next_id(), messages)
                self._send(transfer, Sent.SAF, keys, len(keys), self._resent_count(keys))
                self._spend(len(keys))

    def _resent_count(self, keys: list[bytes]) -> int:
        """How many of these SAF keys, about to be sent in key order, were sent before."""
        resent, high = 0, self._saf_sent_max
        for key in keys:
            if key in self._saf_sent_before:
                self._saf_sent_before.discard(key)
                resent += 1
            elif high is not None and key <= high:
                if key in self._saf_never_sent:
                    self._saf_never_sent.discard(key)
                else:
                    resent += 1
        if keys and (high is None or keys[-1] > high):
            self._saf_sent_max = keys[-1]
        return resent

    def _forget_sent_below(self, oldest: bytes) -> None:
        """The SAF's oldest record for the peer is `oldest`: keys below it are gone."""
        for keys in (self._saf_never_sent, self._saf_sent_before):
            keys.difference_update([key for key in keys if key < oldest])

    def _send_direct_queue(self) -> None:
        """Send the messages put for the peer while no SAF backlog held them back."""
        while self._direct and self._in_flight < WINDOW_MESSAGES_MAX:
            bytes_room = min(TRANSFER_BYTES_MAX, self._bytes_room())
            if bytes_room <= 0:
                break  # an answer makes room, and wakes us
            room = min(TRANSFER_MESSAGES_MAX, WINDOW_MESSAGES_MAX - self._in_flight)
            chunk = [self._direct.popleft()]
            size = len(chunk[0][0].body)
            while self._direct and len(chunk) < room:
                if size + len(self._direct[0][0].body) > bytes_room:
                    break
                size += len(self._direct[0][0].body)
                chunk.append(self._direct.popleft())
            self._direct_bytes -= size
            transfer = wire.LinkTransfer(self._next_id(), [message for message, _ in chunk])
            on_results = [on_result for _, on_result in chunk]
            self._send(transfer, Sent.DIRECT, on_results, len(chunk))
            saf_keys = [_saf_key_of(self.peer_id, message) for message, _ in chunk]
            self._outstanding[transfer.request_id].saf_keys = [k for k in saf_keys if k]

    def _bytes_room(self) -> int:
        """Bytes the window may still send; at least one message when none is in flight
        (one message may be bigger than the bound)."""
        if self._in_flight == 0:
            return WINDOW_BYTES_MAX
        return WINDOW_BYTES_MAX - self._in_flight_bytes

    def _rewind_to_unwritten(self) -> None:
        """Forget the submitted keys now committed; the cursor goes back to just before
        the first of them it had passed (records after it still in flight are sent
        again: the peer's (origin, seq) dedupe stores each once)."""
        journals = self.rooms.drain.ctx.store
        committed = sorted(k for k in self._saf_unwritten if journals.get_raw(Journal.SAF, k))
        self._saf_unwritten.difference_update(committed)
        high = self._saf_sent_max  # one read before its callback may be in flight
        behind = [k for k in committed if high is not None and k <= high]
        self._saf_never_sent.update(k for k in behind if k not in self._saf_copies)
        cursor = self._saf_cursor
        if committed and cursor is not None and committed[0] <= cursor:
            _, seq = split_key(committed[0])
            self._saf_cursor = group_key(self.peer_id, seq - 1) if seq else None

    def _drain_allowance(self) -> int:
        """How many SAF messages the drain may send now: its window, the DQF slots the
        peer holds for it while it waits for room, one stuck message after a RETRY."""
        room = min(TRANSFER_MESSAGES_MAX, WINDOW_MESSAGES_MAX - self._in_flight)
        if self._room_credit is not None:
            room = min(room, 0 if self._room_asked else self._room_credit)
        if self._probe_left is not None:
            room = min(room, self._probe_left)
        return room

    def _spend(self, count: int) -> None:
        if self._room_credit is not None:
            self._room_credit -= count
        if self._probe_left is not None:
            self._probe_left -= count

    def _room_notices(self, backlog: int) -> None:
        """Ask the peer to hold DQF room for the drain, or give its room back once the
        backlog is empty (new puts then go directly: a backlog of 0 is the end)."""
        if self._room_credit is None:
            return
        if self._ask_due:
            self._ask_due, self._room_asked = False, True
            ask = wire.LinkNotice(self._next_id(), [wire.WaitNotice(0, 0)])
            self._send(ask, Sent.WAIT, [], 0)
        elif backlog == 0 and not self._room_asked:
            self._leave_room()
            self.drain_wait = None
            log.info("link to group %d: SAF drain done, no longer waits for room", self.peer_id)

    def _send(self, event: _Asked, sent: Sent, items: list, count: int, resent: int = 0) -> None:
        channel = self.channel
        assert channel is not None, "flush() and the notices send only while the link is up"
        before = getattr(channel, "unsent_bytes", 0)
        channel.send(event)
        frame_bytes = getattr(channel, "unsent_bytes", 0) - before
        pending = _Outstanding(sent, items, count, self._drain_pass, frame_bytes, self.now_s())
        self._outstanding[event.request_id] = pending
        self._in_flight += count
        self._in_flight_bytes += frame_bytes
        peer = self.rooms.peers[self.peer_id]
        peer.messages_sent += count - resent
        peer.messages_resent += resent

    @property
    def messages_sent(self) -> int:
        """Messages this link sent since the server started, each once: at its first
        send (kept with the peer's state; `rate()` is the drain rate)."""
        return self.rooms.peers[self.peer_id].messages_sent

    @property
    def messages_resent(self) -> int:
        """Messages this link sent again since the server started (`_resent_count`)."""
        return self.rooms.peers[self.peer_id].messages_resent

    @property
    def in_flight_bytes(self) -> int:
        """Bytes of the frames sent to the peer and not answered yet (`_in_flight_bytes`)."""
        return self._in_flight_bytes

    def _forgettable(self, seqs: list[int]) -> None:
        """SAF records the peer stored are deleted here for good: no resend possible."""
        self._forget.extend(seqs)
        self.wake()

    def restart_drain(self) -> None:
        """The peer refuses the rest of the drain until told we start over: resend
        from the oldest record, after a resync notice."""
        self._resync_due = True
        self._saf_cursor = None
        self._drain_pass += 1

    def _set_drain_wait(self, answer: DrainAnswer) -> bool:
        """Note why the drain waits; True if that is news (one log line per wait)."""
        wait = {
            "stuck_seq": answer.stuck_seq,
            "status": status_name(answer.stuck_status),
            "reason": answer.reason,
        }
        last = self.drain_wait
        news = last is None or (last["status"], last["reason"]) != (wait["status"], wait["reason"])
        self.drain_wait = wait
        return news

    def _wait_for_room(self, answer: DrainAnswer) -> None:
        """The peer's DQF is full: ask it to hold room for the drain and send only into
        that room from now on (also when already waiting: the counts disagreed)."""
        news = self._set_drain_wait(answer) or self._room_credit is None
        self.restart_drain()
        self._room_credit, self._room_asked, self._ask_due = 0, False, True
        if news:
            # A WARNING once an interval: at the edge of full (the backlog empties,
            # the next put is refused) the wait begins again every few milliseconds
            now_s = self.now_s()
            warn = now_s - self._room_warned_s >= REFUSAL_LOG_INTERVAL_S
            if warn:
                self._room_warned_s = now_s
            (log.warning if warn else log.info)(
                "link to group %d: SAF drain waits for room in the peer's DQF "
                "(message %d refused %s); it sends as slots free there",
                self.peer_id,
                answer.stuck_seq,
                status_name(answer.stuck_status),
            )

    def _wait_for_seq(self, answer: DrainAnswer) -> None:
        """The peer holds the refused message's seq under another message (it was reset
        after this group's journals were replaced): room there does not help, so the
        drain gives back what the peer holds for it and backs off (RETRY: the stuck
        message alone, 0.2 s doubling to 5 s) until that message is confirmed. Asking
        for room made the peer grant its free slots at once, and the drain resent the
        message into them as fast as the link answered."""
        answer.reason = refusal_reason(self.peer_id, answer.stuck_status, seq_held=True)
        if self._room_credit is not None:
            self._leave_room()
        self._enter_retry(answer)

    def _leave_room(self) -> None:
        """Stop waiting for room in the peer's DQF: it gives back the slots it holds."""
        self._room_credit, self._room_asked, self._ask_due = None, False, False
        leave = wire.LinkNotice(self._next_id(), [wire.LeaveNotice(0, 0)])
        self._send(leave, Sent.VOLATILE, [], 0)

    def _enter_retry(self, answer: DrainAnswer) -> None:
        """Channel rules: a message the peer refused and the DLQ could not take stays
        in the SAF; the drain backs off, then sends the stuck message alone (again
        from the oldest record) until a transfer is stored."""
        news = self._set_drain_wait(answer)
        self.restart_drain()
        if self._room_credit is not None:  # the refused message used no slot held for us
            self._room_credit, self._room_asked, self._ask_due = 0, False, True
        if self.now_s() < self.retry_until:
            return
        self._probe_left = 1
        (log.warning if news else log.debug)(
            "link to group %d: SAF drain in RETRY for %.1f s: message %d %s: %s",
            self.peer_id,
            self._retry_s,
            answer.stuck_seq,
            status_name(answer.stuck_status),
            answer.reason,
        )
        self.retry_until = self.now_s() + self._retry_s
        self.rooms.timers.call_later(self._retry_s, self.poke)
        self._retry_s = min(self._retry_s * 2, RETRY_S_MAX)

    def _stuck_one_stored(self, answers: list[tuple[bytes, int]]) -> None:
        """The wait's refused message stored at last (room came): the wait names no
        message any more. Why: while the drain waited for room it went on naming the
        first message refused, long delivered, and an operator looked for it in the
        SAF in vain (`mrs status`, the web view)."""
        assert self.drain_wait is not None
        stuck = self.drain_wait["stuck_seq"]
        for key, status in answers:
            if status == Status.STORED and split_key(key)[1] == stuck:
                self.drain_wait["stuck_seq"] = None
                return

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

    def _saf_acknowledged(self, ack: wire.LinkAck, pending: _Outstanding) -> None:
        answers = self._first_answers(
            [(key, result.status) for key, result in zip(pending.items, ack.results, strict=True)]
        )
        answer = self.rooms.drain.saf_answered(self.peer_id, answers, self._forgettable)
        if self.drain_wait is not None and self.drain_wait["stuck_seq"] is not None:
            self._stuck_one_stored(answers)
        if answer.retry and answer.stuck_status == Status.DQF_FULL:
            if _seq_held(ack, answer.stuck_seq):
                self._wait_for_seq(answer)
            else:
                self._wait_for_room(answer)
            return
        if answer.retry:
            self._enter_retry(answer)
            return
        behind = any(status == Status.LINK_DOWN for _, status in answers)
        if answers and not behind and pending.drain_pass == self._drain_pass:
            self._settled()  # stored, or dead-lettered here: nothing is stuck
        refused_here = any(status not in _NOT_REFUSED_HERE for _, status in answers)
        if answer.restart and (
            refused_here or not self._refused_behind(ack.request_id, pending.drain_pass)
        ):
            if not refused_here and self._unexplained_restart:
                self._refused_unexplained(answers)
                return
            self._unexplained_restart = not refused_here
            self.restart_drain()

    def _refused_unexplained(self, answers: list[tuple[bytes, int]]) -> None:
        """The peer answered a transfer of a restarted drain LINK_DOWN ("refused behind
        an earlier failure") with no failure of that pass to be behind, twice running:
        RETRY, like a refusal. Once may be a race (a commit of the pass before failed
        after the resync); again, the peer is broken or lying. Why: the drain restarted
        at once each time, and such a peer had the whole window read, sent and refused
        again at the link's round-trip rate (1,400 transfers a second), without a line."""
        stuck = next(split_key(key)[1] for key, status in answers if status == Status.LINK_DOWN)
        reason = (
            f"group {self.peer_id} refused it behind an earlier failure (LINK_DOWN) that "
            "it never named"
        )
        self._enter_retry(DrainAnswer(True, True, stuck, int(Status.LINK_DOWN), reason))

    def _settled(self) -> None:
        """A transfer of this pass was settled: a RETRY is over."""
        self._retry_s = RETRY_S_MIN
        self._unexplained_restart = False
        if self._probe_left is not None:
            self._probe_left = None
            log.info("link to group %d: SAF drain out of RETRY", self.peer_id)
        if self._room_credit is None:
            self.drain_wait = None

    def _refused_behind(self, request_id: int, drain_pass: int) -> bool:
        """Whether messages answered LINK_DOWN (refused behind an earlier failure) need
        no restart of their own: they were sent in an earlier pass, or an earlier
        transfer of this pass, whose answer names the failure, is still unanswered
        (answers may come back out of order: a refused-behind one needs no commit)."""
        if drain_pass != self._drain_pass:
            return True
        return any(
            other.sent is Sent.SAF and other.drain_pass == drain_pass and rid < request_id
            for rid, other in self._outstanding.items()
        )

    def _next_id(self) -> int:
        return next(self._request_ids)

    # ------------------------------------------------------------------ receiving
    def handle(self, event: object, channel: Channel) -> None:
        """A link event from the peer. Raises wire.RemoteProtocolError on nonsense."""
        rooms = self.rooms
        replaced = self.channel is not None and channel is not self.channel
        if replaced and isinstance(event, (wire.LinkTransfer, wire.LinkNotice)):
            # From a connection a newer one replaced: its peer sends it again on its own
            # connection if it is still the peer's. Taken, an old active of a replicated
            # peer (mrs.group.incarnation `admit_term`) whose connection came before its
            # successor's stored here what the successor had drained and had this group
            # forget.
            return
        try:
            _check_frame_size(event)
            match event:
                case wire.LinkTransfer():
                    self.messages_received += len(event.messages)
                    answer = _AckTransfer(channel, event.request_id)
                    rooms.inbound.accept_transfer(self.peer_id, event.messages, answer, self)
                case wire.LinkNotice():
                    results = rooms.notices.accept_notices(self.peer_id, event.notices, self)
                    channel.send(wire.LinkAck(event.request_id, results))
                case wire.LinkAck():
                    self._acknowledged(event, channel)
                case wire.LinkPendingQuery():
                    counts = local_counts(rooms.peers.ctx, event.queues)
                    channel.send(wire.LinkPendingCounts(event.request_id, counts))
                case wire.LinkPendingCounts():
                    self._counted(event, channel)
                case wire.Ping():
                    channel.send(wire.Pong(event.nonce))
                case wire.Pong():
                    pass  # heard: the watchdog has noted it
                case _:
                    raise TransferError(f"unexpected {type(event).__name__} on a link")
        except TransferError as error:
            raise wire.RemoteProtocolError(str(error)) from None

    def _counted(self, answer: wire.LinkPendingCounts, channel: Channel) -> None:
        pending = self._outstanding.get(answer.request_id)
        if pending is None or pending.sent is not Sent.QUERY:
            self._answers_nothing(answer, channel)
            return
        del self._outstanding[answer.request_id]
        pending.items[0](list(answer.counts))

    def _answers_nothing(
        self, answer: wire.LinkAck | wire.LinkPendingCounts, channel: Channel
    ) -> None:
        """An answer to no frame in flight: one from a connection already given up is
        dropped unsaid; on the current one, the peer answered a frame never sent, or
        one answered already (it changes nothing: the first answer settled it), said
        in one WARNING per interval. Why: it was dropped unsaid, and a peer that
        answered twice, or made answers up, went unseen."""
        if channel is not self.channel:
            return
        kind = type(answer).__name__
        line = (
            f"link to group {self.peer_id}: {kind} {answer.request_id} answers no frame in"
            " flight (never sent, or answered already): ignored"
        )
        self._flaps().refused("link_answer", "", line, key=("link_answer", kind))

    def _acknowledged(self, ack: wire.LinkAck, channel: Channel) -> None:
        pending = self._outstanding.get(ack.request_id)
        if pending is None:
            self._answers_nothing(ack, channel)
            return
        sent = pending.sent
        if sent in (Sent.DIRECT, Sent.SAF):
            # Checked before anything is settled: a lying answer leaves the transfer
            # outstanding, so the drop it causes answers its messages LINK_LOST (a
            # recoverable one goes to the SAF) instead of leaving their puts unanswered.
            _check_results(ack, len(pending.items))
        elif sent is Sent.QUERY:
            raise TransferError(f"LinkAck answers LinkPendingQuery {ack.request_id}")
        else:
            # The same for notices: a confirm notice is deleted from the journal once
            # answered, so an answer that does not take it would lose it for good.
            _check_notices_taken(ack)
        del self._outstanding[ack.request_id]
        self._in_flight -= pending.count
        self._in_flight_bytes -= pending.frame_bytes
        if sent is Sent.DIRECT:
            held = self.rooms.peers[self.peer_id].forgets_held
            for on_result, result in zip(pending.items, ack.results, strict=True):
                if result.status == Status.STORED and result.seq not in held:
                    self._forget.append(result.seq)
                on_result(result.status, result.stored_seq)
        elif sent is Sent.SAF:
            self._saf_acknowledged(ack, pending)
        elif sent is Sent.WAIT:
            self._room_asked = False
            if self._room_credit is not None and ack.results:
                self._room_credit = ack.results[0].stored_seq
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


@dataclass(eq=False, slots=True)
class _UpLine:
    """The "up" line of a connection that came after connections that broke at once
    (`PeerLink.down`): logged once it has served LINK_BACKOFF_S_MAX, if it still
    serves."""

    link: PeerLink
    channel: Channel
    up_s: float

    def __call__(self) -> None:
        self.link.served_a_while(self.channel, self.up_s)


def _saf_key_of(peer_id: int, message: wire.TransferredMessage) -> bytes | None:
    """The SAF key a direct message takes if its link drops first (a recoverable one
    goes to the SAF: mrs.group.outbound), or None."""
    if not DeliveryMode(message.delivery).recoverable:
        return None
    return group_key(peer_id, message.seq)


def _seq_held(ack: wire.LinkAck, seq: int) -> bool:
    """Whether the peer refused `seq` because it holds that seq under another message
    (mrs.group.drain.SEQ_HELD), not for want of room."""
    return any(
        result.seq == seq and result.stored_seq == SEQ_HELD and result.status == Status.DQF_FULL
        for result in ack.results
    )


_ANSWER_STATUSES: Final = frozenset(int(status) for status in Status)
"""What a peer may answer for a transferred message: a Status (LINK_LOST is this
side's own word for a drop, never the peer's)."""


def _check_results(ack: wire.LinkAck, sent_count: int) -> None:
    """A LinkAck for messages answers each of them with a Status: anything else is a
    lying or broken peer (TransferError: a protocol error, the link drops)."""
    if len(ack.results) != sent_count:
        raise TransferError(f"LinkAck answers {len(ack.results)} messages, {sent_count} were sent")
    for index, result in enumerate(ack.results):
        if result.status not in _ANSWER_STATUSES:
            raise TransferError(f"LinkAck.results[{index}].status {result.status} is not a status")


def _check_notices_taken(ack: wire.LinkAck) -> None:
    """A LinkAck for notices takes each of them: SUCCESS (what every release answers)
    for each, the result that names it (its one result per notice, in order, naming
    its seq, was checked as the answer arrived: mrs.protocol.connection). Anything
    else is a lying or broken peer (TransferError: a protocol error, the link drops
    and the notices are sent again on the next connection). Why: unchecked, an answer
    refusing a notice had the sender delete durable confirm notices the peer never
    took, and the origin's WF_CONF put or AK_CONF MRS_ACK never came."""
    for index, result in enumerate(ack.results):
        if result.status != Status.SUCCESS:
            raise TransferError(
                f"LinkAck.results[{index}].status {status_name(result.status)} does not take"
                f" notice {index} of LinkNotice {ack.request_id} (seq {result.seq}): it must"
                " be SUCCESS"
            )


_ITEMS_PER_FRAME_MAX: Final[dict[type, tuple[str, int]]] = {
    wire.LinkTransfer: ("messages", TRANSFER_MESSAGES_MAX),
    wire.LinkNotice: ("notices", max(NOTICES_PER_FRAME_MAX, RECEIPTS_PER_FRAME_MAX)),
    wire.LinkPendingQuery: ("queues", PENDING_QUEUES_MAX),
}
"""What a group sends in one link frame at most (`LinkSession.pump`, receipts, a
client's ShowPending): a peer that sends more is lying or broken. Bounded here, not
only by the frame's bytes: 64 MiB of tiny messages would be one commit of a million."""


def _check_frame_size(event: object) -> None:
    bound = _ITEMS_PER_FRAME_MAX.get(type(event))
    if bound is not None:
        field, count_max = bound
        count = len(getattr(event, field))
        if count > count_max:
            kind = type(event).__name__
            raise TransferError(f"{kind} of {count} {field} (a group sends {count_max} at most)")
