"""Request tracking for the client: request ids, the bounded map of requests awaiting
an answer, answers matched to their callers, abandoned requests, and what a lost
connection answers each request still in flight.

`Requests` is the part of `Client` (clients.connection) that does this, and holds
the state every other part reads: the live link (None while down), the request
table, the held messages and the get pool. It tells the client's `JournalStatus`
when a connection is lost; the messages it builds confirm through `confirm`.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from clients.answer_waits import CONFIRM_OUTCOME
from clients.deadlines import ReplyDeadlines
from clients.errors import (
    ConnectionLost,
    MrsError,
    MrsTimeout,
    PutOutcomeUnknown,
    QuotaExceeded,
    ReplyTimeout,
    error_for,
)
from clients.get_pool import GetPool, keep_asked
from clients.journal_status import JournalStatus
from clients.requests import wire_bytes
from clients.waiting import RESUMED as RESUMED  # re-exported (benchmarks/resume_cost.py)
from clients.waiting import Pending as _Pending
from clients.waiting import answer_each
from clients.waiting import resume as resume  # re-exported (clients.batch)
from mrs import protocol as wire
from mrs.limits import (
    ADDRESSES_CACHED_MAX,
    CLIENT_REQUESTS_IN_FLIGHT_MAX,
    GIVE_BACK_WAIT_S,
    HELD_MESSAGES_MAX,
    LENT_REMEMBERED_MAX,
    OUTBOX_BYTES_HIGH,
)
from mrs.model import Address, ForceJrn, Message, Status, delivery_mode_of, status_of

if TYPE_CHECKING:
    from clients.link import _Link

log = logging.getLogger("clients")

_NOT_LINKED_STATUS = {"put": Status.LINK_DOWN}
"""What a request finding no connection raises (clients.connection): a put LINK_DOWN,
the others NOTACTIVE."""

_ANSWER_OF: dict[type, type] = {
    wire.Put: wire.PutDone,
    wire.Get: wire.Delivery,
    wire.GetBatch: wire.DeliveryBatch,
    wire.Confirm: wire.Confirmed,
    wire.StatusRequest: wire.StatusReply,
    wire.AdminRequest: wire.AdminReply,
    wire.Locate: wire.Located,
    wire.ShowPending: wire.PendingCounts,
    wire.SetPcj: wire.PcjState,
    wire.ReadJournal: wire.JournalPage,
}
"""The answer each request sent through `Requests.request` is the result of, as it
is (no error to raise). Any other answer (besides a Failure) is a server breaking
the protocol: before, it was returned as the result, and the caller met an
AttributeError (`'Confirmed' object has no attribute 'delivery_status'`) in place of
a clear error; now PROTOCOL_ERROR names the request and the answer."""


class Requests:
    """A client's request plumbing: send, wait for the answer, abandon, lose; and the
    connection state the client's other parts share."""

    def __init__(
        self,
        address: str,
        status: JournalStatus,
        confirm: Callable[[int, int, ForceJrn], Awaitable[None]],
    ) -> None:
        self.address = address
        self.status = status
        self.link: _Link | None = None
        """The live connection; None while down."""
        self.broken: MrsError | None = None
        """Why the client gave up (no reconnect, refused, revoked); None while it may go on."""
        self.pending: dict[int, _Pending] = {}
        """Request id -> what awaits its answer (waiting.answer_each reads it by name)."""
        self.deadlines = ReplyDeadlines()
        self.held: deque[Message] = deque()
        """Messages that came for gets their callers gave up, and read-ahead: the next
        gets take them first."""
        self._request_ids = itertools.count(1)
        self._confirm_message = confirm
        """Every Message delivered holds it (bound once by the client: a bound method
        made per message is one more object per message for the collector)."""
        self._cancelled_gets: set[int] = set()
        """Request ids of Gets and GetBatches withdrawn (CancelGet) whose answer has
        not come yet (the pool's own batches: `gets.withdrawn`)."""
        self._cancels_answered = trio.lowlevel.ParkingLot()
        """Gets waiting in `cancelled_gets_answered` for the given-up gets' answers."""
        self._get_rooms: dict[int, int] = {}
        """Request id of a get waiting or given up -> messages it may bring (held if
        its caller gave up): see `reserve_get`."""
        self._get_room_reserved = 0
        self.gets = GetPool(self)
        """Gets that wait share GetBatch requests (clients.get_pool)."""

    def message(self, reply: wire.Delivery) -> Message:
        """The Message of a delivery. Positional, in Message's field order: its
        dataclass `__init__` took 0.9 µs with keywords against 0.4 µs without, once
        per message a consumer gets (benchmarks/README.md).

        A delivery whose source or target is no `G.Q` or whose delivery mode is no
        mode (a broken or hostile server: the frame's types are right, its values
        not) raises ProtocolFailure (PROTOCOL_ERROR) naming the field. Before, a
        Python ValueError reached the caller of a poll, and from a waiting get (the
        pool's batch, read in the receive loop) it ended the whole `connect` block
        with an ExceptionGroup; now the receive loop drops the connection as for any
        other frame that breaks the protocol, and the gets raise ConnectionLost."""
        try:
            return Message(
                reply.body,
                reply.seq,
                _address(reply.source),
                _address(reply.target),
                reply.msg_class,
                reply.msg_type,
                reply.priority,
                delivery_mode_of(reply.delivery),
                status_of(reply.delivery_status),
                reply.correlation_id,
                reply.put_time_ns,
                reply.dead_letter_header,
                reply.headers,
                self._confirm_message,
            )
        except ValueError as error:  # a `try` costs nothing until it catches
            raise error_for(
                Status.PROTOCOL_ERROR,
                f"the server delivered message {reply.seq} that does not decode: {error}",
            ) from None

    def next_id(self) -> int:
        return next(self._request_ids)

    def send(self, link: _Link, request: object) -> None:
        self.send_frame(link, request)
        link.unsent.add(request.request_id)

    def send_frame(self, link: _Link, event: object) -> None:
        link.send(event)

    async def request(self, request: object, wait_s: float | None, kind: str = "other") -> object:
        link = self.link
        if link is None or link.unsent_bytes > OUTBOX_BYTES_HIGH:  # one test on the fast path
            # lost while the caller waited (e.g. in the get pool), or not reading
            link = await self.linked(_NOT_LINKED_STATUS.get(kind, Status.NOTACTIVE), kind)
            await self.outbox_room(link, wait_s)
        if len(self.pending) >= CLIENT_REQUESTS_IN_FLIGHT_MAX:
            raise QuotaExceeded(
                Status.EXCEEDQUOTA,
                f"{len(self.pending)} requests already await an answer on this connection "
                f"(at most {CLIENT_REQUESTS_IN_FLIGHT_MAX})",
            )
        pending = _Pending(kind)
        request_id = request.request_id
        if kind == "put":  # puts queued together travel in one PutBatch frame
            link.send_put(request, wire_bytes(request))
        else:
            link.send(request)  # what `send` does, inline: this is the per-request path
        link.unsent.add(request_id)
        if not self.pending and link.write_now():
            # Nothing else awaits an answer, so no frame is coming to share this one's:
            # it goes now, not at the send loop's turn (a scheduler pass later). Once
            # any of the outbox went, none of it is safe to send again.
            link.unsent.clear()
        self.pending[request_id] = pending
        try:
            if wait_s is not None:  # one sweeper for every deadline, no scope per request
                self.deadlines.add_after(wait_s, request_id, pending)
            await pending.waited()
        except BaseException:
            self.abandon(link, request_id, pending)
            raise
        finally:
            self.pending.pop(request_id, None)
        if pending.timed_out:
            self.abandon(link, request_id, pending)
            raise self.not_answered(request, wait_s, kind)
        result = pending.result
        if type(result) is _ANSWER_OF.get(type(request)):
            return result
        if isinstance(result, MrsError):
            raise result
        if isinstance(result, wire.Failure):
            raise error_for(result.status, result.message)
        raise error_for(
            Status.PROTOCOL_ERROR,
            f"the server answered {type(request).__name__} with {type(result).__name__}",
        )

    def not_answered(self, request: object, wait_s: float | None, kind: str) -> ReplyTimeout:
        """The ReplyTimeout of a request whose answer did not come within `wait_s`: one
        line naming the request, the server and the wait, and for a put what it may
        still have done. Before, every one said "no answer from the server in time",
        and a put's did not say that its message may be stored."""
        name = type(request).__name__
        waited = "in time" if wait_s is None else f"within {wait_s:g} s"
        line = f"{name}: no answer from {self.address} {waited}"
        if kind == "put":
            line += "; the message may or may not be stored: re-send under an idempotency key"
        return ReplyTimeout(Status.TIMEOUT, line)

    async def outbox_room(self, link: _Link, wait_s: float | None = None) -> None:
        """Wait until the bytes queued on `link` and not yet written are back under
        OUTBOX_BYTES_HIGH, so a server that stops reading (stalled, its host gone
        until the heartbeats notice) cannot make the client's memory grow without
        bound: a request cancelled or timed out stays queued, and before this every
        cancelled put added its body to the outbox (5,000 cancelled 64 KiB puts held
        320 MB). Nothing is queued while it waits: a request that gives up here, or
        raises, was not sent. Raises ConnectionLost if `link` is lost meanwhile and
        MrsTimeout when `wait_s` (None: no bound) passes first."""
        with trio.move_on_after(math.inf if wait_s is None else wait_s):
            while link.lost is None and link.unsent_bytes > OUTBOX_BYTES_HIGH:
                await link.writable.park()
        if link.lost is not None or self.link is not link:
            lost = link.lost.message if link.lost is not None else "connection lost"
            raise ConnectionLost(Status.LINK_DOWN, f"{lost}; the request was not sent")
        if link.unsent_bytes > OUTBOX_BYTES_HIGH:
            raise MrsTimeout(
                Status.TIMEOUT,
                f"{link.unsent_bytes} bytes wait to be written to {self.address} (the server "
                f"is not reading; at most {OUTBOX_BYTES_HIGH}): not sent in time, it was not sent",
            )

    def abandon(self, link: _Link, request_id: int, pending: _Pending) -> None:
        """The caller stopped waiting (cancelled, timed out, interrupted)."""
        if pending.kind != "get":
            return
        if isinstance(pending.result, wire.Delivery | wire.DeliveryBatch):
            self.hold(pending.result)  # it arrived as the caller gave up
        elif pending.result is None and self.link is link and link.lost is None:
            self._cancelled_gets.add(request_id)
            self.send(link, wire.CancelGet(request_id))

    def hold(self, delivery: wire.Delivery | wire.DeliveryBatch) -> None:
        """Keep the messages that came for a get its caller gave up (served to the
        next gets). Bounded by `reserve_get`: only a get that reserved room brings any,
        and no more than it reserved (a broken server's surplus: `keep_asked`)."""
        batch = delivery.deliveries if type(delivery) is wire.DeliveryBatch else (delivery,)
        messages = [self.message(one) for one in batch]
        asked = self._get_rooms.get(delivery.request_id)
        if asked is not None and len(messages) > asked:
            messages = keep_asked(self.link, messages, asked, self.held, hold_surplus=True)
        self.held.extend(messages)
        self.gets.serve_held()  # gets already waiting in the pool come first

    def older_first(self, messages: list[Message]) -> list[Message]:
        """What a get hands its caller when its answer brought `messages`: messages
        held meanwhile (they crossed a get given up) were delivered before these, so
        they come first and these wait behind them; the same count either way. Before,
        the answer went to its caller and the older message to the get after, so an
        in-order queue's receiver that confirmed in the order its gets returned
        messages was answered BADSEQ."""
        held = self.held
        if not held:
            return messages
        held.extend(messages)
        return [held.popleft() for _ in messages]

    async def give_back_held(self) -> None:
        """Closing: the read-ahead messages no get took go back to the queue, so a
        clean close loses none of them. First the pool's batches in flight are
        withdrawn and answered (what they bring is held too); then one GiveBack
        names every held message that needs no confirm (the server takes back those
        it lent and ignores the rest; held recoverable ones are unconfirmed and come
        again by themselves, marked POSSDUPL). Bounded by GIVE_BACK_WAIT_S: a server
        that does not answer in time loses only what it lent (not recoverable). A
        close while the connection is down (reconnecting) waits for the reconnect
        within the same bound when it holds messages to give back."""
        with trio.CancelScope(shield=True), trio.move_on_after(GIVE_BACK_WAIT_S):
            link = await self._link_to_give_back()
            if link is None:
                return
            await self.gets.settle(link)
            # Gets given up on their own (a get_many, a poll, a selective get) may
            # still bring messages: answered before the GiveBack, so it names them.
            # Before, a get_many given up just before the close left its batch on
            # the wire and its memory messages were lost.
            while self._cancelled_gets and link.lost is None:
                await self._cancels_answered.park()
            seqs = [message.seq for message in self.held if not message.needs_confirm]
            self.held = deque(message for message in self.held if message.needs_confirm)
            # Sent even when empty: it tells the server this close is clean, so it
            # forgets what it lent; after a lost connection it keeps that for the
            # GiveBack of the client's next connection (mrs.group.queues.detach).
            for first in range(0, max(len(seqs), 1), LENT_REMEMBERED_MAX):  # one frame
                self.send_frame(link, wire.GiveBack(seqs[first : first + LENT_REMEMBERED_MAX]))
            await link.flushed()

    async def _link_to_give_back(self) -> _Link | None:
        """The live connection; while there is none, with messages held to give back,
        the next one (the server keeps what it lent across a lost connection), unless
        the client gave up. None: nothing to give back, or no connection to do it."""
        while True:
            link = self.link
            if link is not None and link.lost is None:
                return link
            if self.broken is not None or all(m.needs_confirm for m in self.held):
                return None
            await self.status.changed.wait()

    @property
    def cancelled_gets_outstanding(self) -> bool:
        """Some get withdrawn on this connection (a Get, a GetBatch, a batch of the
        get pool) may still bring a message."""
        return bool(self._cancelled_gets) or self.gets.withdrawn

    async def cancelled_gets_answered(self, wait_s: float | None) -> None:
        """Return once every get withdrawn on this connection is answered, so what one
        of them brought is held before the caller's get decides whether to send a
        request, and takes it first. Why: on a queue that confirms implicitly each Get
        confirms the messages handed out before it; a Get sent while a withdrawn get's
        Delivery was still on the wire confirmed that message before the application
        saw it (the client then handed it out: a crash before handling it lost it).
        And a get_many or a poll sent then was answered without it (nothing waiting,
        or EXCMAXUNCONF at the cap), or waited its whole timeout while the message sat
        in the client. The server answers every get in the order it reads them,
        withdrawn or not, so this is a round trip. MrsTimeout (nothing sent) if the
        answers have not come within `wait_s`; EXCEEDQUOTA at once when what they may
        bring leaves no room for another get (`reserve_get`)."""
        if not self.cancelled_gets_outstanding:
            return
        if (room := self.get_room()) <= 0:  # no get could be sent anyway: refused now
            raise self.no_get_room(room)
        given_up = set(self._cancelled_gets)  # not those other tasks give up meanwhile
        with trio.move_on_after(math.inf if wait_s is None else wait_s) as waited:
            while not given_up.isdisjoint(self._cancelled_gets):
                await self._cancels_answered.park()
            await self.gets.withdrawn_answered(None)
        if waited.cancelled_caught:
            raise MrsTimeout(
                Status.TIMEOUT,
                f"gets given up before are not answered by {self.address} yet: this get "
                "was not sent",
            )

    def _cancel_answered(self, request_id: int) -> None:
        """A withdrawn Get's answer came: its room is free, and gets waiting for the
        withdrawn ones to be answered go on when none is left."""
        self._cancelled_gets.discard(request_id)
        self.release_get(request_id)
        self._cancels_answered.unpark_all()  # each waits for its own given-up ones

    def get_room(self) -> int:
        """How many more messages gets may ask for now (see `reserve_get`)."""
        return HELD_MESSAGES_MAX - len(self.held) - self._get_room_reserved

    def reserve_get(self, request_id: int, count_max: int) -> int:
        """Room for what a get may bring if its caller gives up (held messages): held
        messages plus what gets waiting or given up may still bring stay within
        HELD_MESSAGES_MAX. Returns how many this get may ask for (a get_many asks for
        fewer when room is short); EXCEEDQUOTA at once, nothing sent, when none is left."""
        room = self.get_room()
        if room <= 0:
            raise self.no_get_room(room)
        count = min(count_max, room)
        self._get_rooms[request_id] = count
        self._get_room_reserved += count
        return count

    def no_get_room(self, room: int) -> QuotaExceeded:
        """The refusal of a get when held messages and what gets may bring fill the
        bound (`room` is what is left of it, at most 0)."""
        return QuotaExceeded(
            Status.EXCEEDQUOTA,
            f"{HELD_MESSAGES_MAX - room} messages are held or may still come for gets "
            f"that wait or were given up (at most {HELD_MESSAGES_MAX}): take the held "
            "ones, or let those gets be answered, before asking for more",
        )

    def get_answered(self, request_id: int) -> None:
        """A get's wait ended: its room is free again, unless it was withdrawn
        (CancelGet) and what it may still bring keeps the room until it comes."""
        if request_id not in self._cancelled_gets:
            self.release_get(request_id)

    def release_get(self, request_id: int) -> None:
        """A get's answer came (to its caller, or held): its room is free again."""
        self._get_room_reserved -= self._get_rooms.pop(request_id, 0)

    def dispatch(self, link: _Link, event: object) -> None:
        if type(event) is wire.AnswerBatch:  # each item answers its own request
            answer_each(self, event.answers, functools.partial(self.dispatch, link))
            return
        if type(event) is wire.Ping:  # the server pings a quiet connection: we are alive
            self.send_frame(link, wire.Pong(event.nonce))
            return
        request_id = getattr(event, "request_id", None)
        pending = self.pending.pop(request_id, None)
        if pending is not None:
            pending.answer(event)
        elif request_id in self._cancelled_gets:
            if isinstance(event, wire.Delivery | wire.DeliveryBatch):
                self.hold(event)  # before the gets waiting for it go on
            self._cancel_answered(request_id)

    def lose(self, link: _Link, error: MrsError, closing: bool = False) -> None:
        """The connection is gone: answer everything in flight honestly."""
        if link.lost is not None:
            return
        link.lost = error
        if self.link is link:
            self.link = None
        revoked = error.status == Status.NOTAUTHORIZED
        if revoked:  # the server ended the session (credentials revoked): no reconnect
            self.broken = error
        link.wake()
        pending, self.pending = self.pending, {}
        self.deadlines.clear()  # each request gets its answer below
        for request_id, waiter in pending.items():
            if request_id in link.unsent:
                waiter.answer(
                    ConnectionLost(Status.LINK_DOWN, f"{error.message}; the request was not sent")
                )
            elif waiter.kind == "put":
                waiter.answer(
                    PutOutcomeUnknown(
                        Status.LINK_DOWN,
                        f"{error.message} before the put was answered: the message may or "
                        "may not be stored",
                    )
                )
            elif waiter.kind == "confirm" and not revoked:
                waiter.answer(_confirm_unanswered(error))
            else:
                waiter.answer(error if revoked else ConnectionLost(Status.LINK_DOWN, error.message))
        self.gets.lose(error if revoked else ConnectionLost(Status.LINK_DOWN, error.message))
        for request_id in self._cancelled_gets:
            self.release_get(request_id)
        self._cancelled_gets.clear()
        self._cancels_answered.unpark_all()
        # Held messages that need a confirm come back from the server (POSSDUPL).
        self.held = deque(message for message in self.held if not message.needs_confirm)
        link.writable.unpark_all()  # requests waiting for the outbox: it is gone
        self.status.lost(closing)

    def raise_if_broken(self) -> None:
        if self.broken is not None:
            raise self.broken

    async def linked(self, status: Status, what: str) -> _Link:
        """`require_link`, with a checkpoint first when it is going to raise. Why: an
        application that retries a refused call in a loop (`except MrsError:
        continue`) never yielded to trio, so the client's own reconnect never ran
        and neither did anything else of the program (a cancel scope never fired)."""
        if self.link is None or self.broken is not None:
            await trio.lowlevel.checkpoint()
        return self.require_link(status, what)

    def require_link(self, status: Status, what: str) -> _Link:
        """The connection; raise unless one is up: `status` (LINK_DOWN for puts,
        NOTACTIVE for the rest) while reconnecting, or why the client gave up."""
        self.raise_if_broken()
        link = self.link
        if link is None:
            raise ConnectionLost(
                status, f"{what}: not connected to {self.address} (reconnecting in the background)"
            )
        return link


def _confirm_unanswered(error: MrsError) -> ConnectionLost:
    """What a confirm sent and left unanswered by a lost connection raises: the
    confirm may have been recorded (the group read and committed it, and only its
    answer was lost), so it says so, as a put's PutOutcomeUnknown does. Why: it read
    "client closed" or "server closed the connection", and the docs said the message
    was still unconfirmed and would come again POSSDUPL; an application that undid
    its work on that word waited for a message the group had already forgotten."""
    return ConnectionLost(
        Status.LINK_DOWN, f"{error.message} before the confirm was answered; {CONFIRM_OUTCOME}"
    )


_address = functools.lru_cache(maxsize=ADDRESSES_CACHED_MAX)(Address.parse)
"""Address.parse(text), remembered (an Address is immutable): a consumer sees the same
few queues again and again, parsing them was a visible share of a get's CPU (issue
17), and the cache is bounded. A text that does not parse raises and is not kept."""
