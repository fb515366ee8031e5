"""A replicated group's client re-sends a put whose answer a failover lost.

Why: when the active instance dies, a put it was sent and did not answer may or may
not be stored on the instance that takes over (it is if the commit holding it reached
an in-sync replica). On a single server the caller is told so (PutOutcomeUnknown) and
must decide; with several instance addresses the client can do better by itself: it
gives every recoverable put an idempotency key (`Resender.keyed`, unless the caller
gave one), and when the connection is lost before the answer, or there is none yet,
the put waits for the client to reconnect (to whichever instance is active now) and
is sent again under the same key. The group stores the first copy only and answers a
re-sent one with the first copy's seq (mrs.group.idempotency), so `await put()`
returns the real answer, the message is stored once, and a task's puts keep their
order (each waits for its own answer before the next is made).

Bounded: at most CLIENT_RESEND_MESSAGES_MAX puts (CLIENT_RESEND_BYTES_MAX body bytes)
wait to be re-sent at once, each for CLIENT_RESEND_WAIT_S at most; beyond either, the
put raises what the lost connection said, as on a single server.

`put_many` does the same for its batches (clients.batch.send_batches_resent): each
recoverable item gets its own key, and the items a failover left unanswered (or that
found no connection) are re-sent together, in their order, once the client is
connected again (`Resender.resend_lost`), within the same bounds: the items beyond
them keep what the lost connection said, as on a single server. Items answered
before the failover keep their answers; a later item is never re-sent ahead of an
earlier one, so the group stores them once each, in order.

`Resender` is the part of `Client` (clients.connection) that does this; it uses only
the client's `wait_connected` (given as a callable).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import trio

from clients.errors import ConnectionLost
from clients.saf_drain import IDEMPOTENCY_HEADER
from mrs import protocol as wire
from mrs.limits import CLIENT_RESEND_BYTES_MAX, CLIENT_RESEND_MESSAGES_MAX, CLIENT_RESEND_WAIT_S
from mrs.model import Status

T = TypeVar("T")
SendPuts = Callable[[list[tuple[int, wire.Put]]], Awaitable[list[Any]]]
"""Sends built (index, put) pairs now; one result per pair (a Psb or an MrsError)."""


class Resender:
    """Keys for a replicated group's recoverable puts, and their re-send on failover."""

    def __init__(self, wait_connected: Callable[[], Awaitable[None]]) -> None:
        self._wait_connected = wait_connected
        self._key_prefix = f"auto:{secrets.token_hex(8)}:"
        """Unique to this client: its keys never meet another client's, even in the
        same sender queue (the server scopes keys by sender and target)."""
        self._numbers = itertools.count(1)
        self.waiting_messages = 0
        """Puts waiting now for a connection to be re-sent on."""
        self.waiting_bytes = 0
        self.resent = 0
        """Puts sent again after a lost connection (a figure for tests and operators)."""

    def keyed(self, headers: dict | None) -> dict:
        """`headers` with an idempotency key: the caller's if it gave one, else a new one."""
        if headers is not None and IDEMPOTENCY_HEADER in headers:
            return headers
        key = f"{self._key_prefix}{next(self._numbers)}"
        return {IDEMPOTENCY_HEADER: key} if not headers else {**headers, IDEMPOTENCY_HEADER: key}

    async def resend(
        self, lost: ConnectionLost, attempt: Callable[[], Awaitable[T]], body_bytes: int
    ) -> T:
        """A keyed put's first send ended with `lost`: after a lost connection
        (PutOutcomeUnknown, or LINK_DOWN: not sent, no connection) wait for the next
        connection and `attempt()` it again, until answered, within the bounds (module
        doc); past them, or for another status, raise the last loss."""
        deadline_s = trio.current_time() + CLIENT_RESEND_WAIT_S
        while True:
            if lost.status != Status.LINK_DOWN or not self._room(body_bytes):
                raise lost
            await self._reconnected(lost, deadline_s, body_bytes)
            self.resent += 1
            try:
                return await attempt()
            except ConnectionLost as again:
                lost = again

    async def resend_lost(
        self, puts: Sequence[tuple[int, wire.Put]], results: list[Any], send: SendPuts
    ) -> None:
        """A put_many's keyed puts (index, built put) were sent once and `results`
        holds their answers: those a lost connection left unanswered or unsent
        (ConnectionLost, LINK_DOWN) are re-sent by `send`, in their order, once the
        client is connected again, until answered or past the bounds (module doc);
        each result is replaced by its re-send's. Those past the bounds at the
        loss keep theirs, as a single put past them raises."""
        deadline_s = trio.current_time() + CLIENT_RESEND_WAIT_S
        kept = self._fitting([pair for pair in puts if _lost(results[pair[0]])])
        while True:  # those beyond the bounds when the connection was lost are not kept
            fitting = self._fitting([pair for pair in kept if _lost(results[pair[0]])])
            if not fitting:
                return
            body_bytes = sum(len(put.body) for _, put in fitting)
            try:
                await self._reconnected(
                    results[fitting[0][0]], deadline_s, body_bytes, len(fitting)
                )
            except ConnectionLost:
                return
            self.resent += len(fitting)
            for (index, _put), result in zip(fitting, await send(fitting), strict=True):
                results[index] = result

    def _fitting(self, lost: list[tuple[int, wire.Put]]) -> list[tuple[int, wire.Put]]:
        """The first of `lost` that fit the bounds beside the puts already waiting."""
        room_messages = CLIENT_RESEND_MESSAGES_MAX - self.waiting_messages
        room_bytes = CLIENT_RESEND_BYTES_MAX - self.waiting_bytes
        for count, (_index, put) in enumerate(lost):
            room_bytes -= len(put.body)
            if count >= room_messages or room_bytes < 0:
                return lost[:count]
        return lost

    def _room(self, body_bytes: int) -> bool:
        return (
            self.waiting_messages < CLIENT_RESEND_MESSAGES_MAX
            and self.waiting_bytes + body_bytes <= CLIENT_RESEND_BYTES_MAX
        )

    async def _reconnected(
        self, lost: ConnectionLost, deadline_s: float, body_bytes: int, messages: int = 1
    ) -> None:
        """Wait, counted against the bounds, for a connection to re-send on; raise
        `lost` if none came by `deadline_s`."""
        if trio.current_time() >= deadline_s:
            raise lost
        self.waiting_messages += messages
        self.waiting_bytes += body_bytes
        try:
            with trio.move_on_at(deadline_s):
                await self._wait_connected()
                return
        finally:
            self.waiting_messages -= messages
            self.waiting_bytes -= body_bytes
        raise lost


def _lost(result: object) -> bool:
    """A put's result says its connection was lost before its answer (PutOutcomeUnknown)
    or before it was sent: it may be re-sent under its key."""
    return isinstance(result, ConnectionLost) and result.status == Status.LINK_DOWN
