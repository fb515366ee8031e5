"""Request tracking for the client: request ids, the bounded map of requests awaiting
an answer, answers matched to their callers, abandoned requests, and what a lost
connection answers each request still in flight.

`_Requests` is the part of `Client` (clients.connection) that does this; it works on
the client's state (`_pending`, `_link`, `_held`, `_cancelled_gets`, ...), set up in
`Client.__init__`.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from typing import TYPE_CHECKING

import trio

from clients.errors import (
    ConnectionLost,
    MrsError,
    PutOutcomeUnknown,
    QuotaExceeded,
    ReplyTimeout,
    error_for,
)
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
)
from mrs.model import Address, Message, Status, delivery_mode_of, status_of

if TYPE_CHECKING:
    from clients.link import _Link

log = logging.getLogger("clients")

_ANSWERS = frozenset(
    {wire.PutDone, wire.Delivery, wire.DeliveryBatch, wire.Confirmed, wire.StatusReply}
)
"""Answers that are the request's result as they are (no error to raise)."""


class _Requests:
    """Client's request plumbing: send, wait for the answer, abandon, lose."""

    def _message(self, reply: wire.Delivery) -> Message:
        """The Message of a delivery. Positional, in Message's field order: its
        dataclass `__init__` took 0.9 µs with keywords against 0.4 µs without, once
        per message a consumer gets (benchmarks/README.md)."""
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

    def _next_id(self) -> int:
        return next(self._request_ids)

    def _send(self, link: _Link, request: object) -> None:
        self._send_frame(link, request)
        link.unsent.add(request.request_id)

    def _send_frame(self, link: _Link, event: object) -> None:
        link.send(event)

    async def _request(self, request: object, wait_s: float | None, kind: str = "other") -> object:
        if len(self._pending) >= CLIENT_REQUESTS_IN_FLIGHT_MAX:
            raise QuotaExceeded(
                Status.EXCEEDQUOTA,
                f"{len(self._pending)} requests already await an answer on this connection "
                f"(at most {CLIENT_REQUESTS_IN_FLIGHT_MAX})",
            )
        link = self._link
        pending = _Pending(kind)
        request_id = request.request_id
        if kind == "put":  # puts queued together travel in one PutBatch frame
            link.send_put(request, wire_bytes(request))
        else:
            link.send(request)  # what _send does, inline: this is the per-request path
        link.unsent.add(request_id)
        self._pending[request_id] = pending
        try:
            if wait_s is not None:  # one sweeper for every deadline, no scope per request
                self._deadlines.add_after(wait_s, request_id, pending)
            await pending.waited()
        except BaseException:
            self._abandon(link, request_id, pending)
            raise
        finally:
            self._pending.pop(request_id, None)
        if pending.timed_out:
            self._abandon(link, request_id, pending)
            raise ReplyTimeout(Status.TIMEOUT, "no answer from the server in time")
        result = pending.result
        if type(result) in _ANSWERS:
            return result
        if isinstance(result, MrsError):
            raise result
        if isinstance(result, wire.Failure):
            raise error_for(result.status, result.message)
        return result

    def _abandon(self, link: _Link, request_id: int, pending: _Pending) -> None:
        """The caller stopped waiting (cancelled, timed out, interrupted)."""
        if pending.kind != "get":
            return
        if isinstance(pending.result, wire.Delivery | wire.DeliveryBatch):
            self._hold(pending.result)  # it arrived as the caller gave up
        elif pending.result is None and self._link is link and link.lost is None:
            self._cancelled_gets.add(request_id)
            self._send(link, wire.CancelGet(request_id))

    def _hold(self, delivery: wire.Delivery | wire.DeliveryBatch) -> None:
        """Keep the messages that came for a get its caller gave up (served to the
        next gets). Bounded by `_reserve_get`: only a get that reserved room brings any."""
        batch = delivery.deliveries if type(delivery) is wire.DeliveryBatch else (delivery,)
        self._held.extend(self._message(one) for one in batch)
        self._gets.serve_held()  # gets already waiting in the pool come first

    async def _give_back_held(self) -> None:
        """Closing: the read-ahead messages no get took go back to the queue, so a
        clean close loses none of them. First the pool's batches in flight are
        withdrawn and answered (what they bring is held too); then one GiveBack
        names every held message that needs no confirm (the server takes back those
        it lent and ignores the rest; held recoverable ones are unconfirmed and come
        again by themselves, marked POSSDUPL). Bounded by GIVE_BACK_WAIT_S: a server
        that does not answer in time loses only what it lent (not recoverable)."""
        link = self._link
        if link is None or link.lost is not None:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(GIVE_BACK_WAIT_S):
            await self._gets.settle(link)
            seqs = [message.seq for message in self._held if not message.needs_confirm]
            if not seqs:
                return
            self._held = deque(message for message in self._held if message.needs_confirm)
            for first in range(0, len(seqs), LENT_REMEMBERED_MAX):  # one frame in practice
                self._send_frame(link, wire.GiveBack(seqs[first : first + LENT_REMEMBERED_MAX]))
            await link.flushed()

    def _get_room(self) -> int:
        """How many more messages gets may ask for now (see `_reserve_get`)."""
        return HELD_MESSAGES_MAX - len(self._held) - self._get_room_reserved

    def _reserve_get(self, request_id: int, count_max: int) -> int:
        """Room for what a get may bring if its caller gives up (held messages): held
        messages plus what gets waiting or given up may still bring stay within
        HELD_MESSAGES_MAX. Returns how many this get may ask for (a get_many asks for
        fewer when room is short); EXCEEDQUOTA at once, nothing sent, when none is left."""
        room = self._get_room()
        if room <= 0:
            raise self._no_get_room(room)
        count = min(count_max, room)
        self._get_rooms[request_id] = count
        self._get_room_reserved += count
        return count

    def _no_get_room(self, room: int) -> QuotaExceeded:
        """The refusal of a get when held messages and what gets may bring fill the
        bound (`room` is what is left of it, at most 0)."""
        return QuotaExceeded(
            Status.EXCEEDQUOTA,
            f"{HELD_MESSAGES_MAX - room} messages are held or may still come for gets "
            f"that wait or were given up (at most {HELD_MESSAGES_MAX}): take the held "
            "ones, or let those gets be answered, before asking for more",
        )

    def _release_get(self, request_id: int) -> None:
        """A get's answer came (to its caller, or held): its room is free again."""
        self._get_room_reserved -= self._get_rooms.pop(request_id, 0)

    def _dispatch(self, link: _Link, event: object) -> None:
        if type(event) is wire.AnswerBatch:  # each item answers its own request
            answer_each(self, event.answers, functools.partial(self._dispatch, link))
            return
        if type(event) is wire.Ping:  # the server pings a quiet connection: we are alive
            self._send_frame(link, wire.Pong(event.nonce))
            return
        request_id = getattr(event, "request_id", None)
        pending = self._pending.pop(request_id, None)
        if pending is not None:
            pending.answer(event)
        elif request_id in self._cancelled_gets:
            self._cancelled_gets.discard(request_id)
            self._release_get(request_id)
            if isinstance(event, wire.Delivery | wire.DeliveryBatch):
                self._hold(event)

    def _lose(self, link: _Link, error: MrsError, closing: bool = False) -> None:
        """The connection is gone: answer everything in flight honestly."""
        if link.lost is not None:
            return
        link.lost = error
        if self._link is link:
            self._link = None
        revoked = error.status == Status.NOTAUTHORIZED
        if revoked:  # the server ended the session (credentials revoked): no reconnect
            self._broken = error
        link.wake()
        pending, self._pending = self._pending, {}
        self._deadlines.clear()  # each request gets its answer below
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
            else:
                waiter.answer(error if revoked else ConnectionLost(Status.LINK_DOWN, error.message))
        self._gets.lose(error if revoked else ConnectionLost(Status.LINK_DOWN, error.message))
        for request_id in self._cancelled_gets:
            self._release_get(request_id)
        self._cancelled_gets.clear()
        # Held messages that need a confirm come back from the server (POSSDUPL).
        self._held = deque(message for message in self._held if not message.needs_confirm)
        if not closing:
            self._set_journal_status(Status.JOURNAL_ON)
        self._wake()


_address = functools.lru_cache(maxsize=ADDRESSES_CACHED_MAX)(Address.parse)
"""Address.parse(text), remembered (an Address is immutable): a consumer sees the same
few queues again and again, parsing them was a visible share of a get's CPU (issue
17), and the cache is bounded. A text that does not parse raises and is not kept."""
