"""`Client.locate` and `Client.pending`: MessageQ's pams_locate_q and
putil_show_pending, asked of the group (which asks other groups over its links).

Why the arguments are checked here: the server closes a connection on a frame whose
queue text is empty or too long (a protocol error), so a caller's slip is refused
here first, BADPARAM with one line, and nothing is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

import trio

from clients.errors import FieldRefused, error_for
from clients.requests import built
from clients.selective import TIME_LEFT_S_MIN
from mrs import protocol as wire
from mrs.limits import (
    GROUP_ID_MAX,
    GROUP_ID_MIN,
    PENDING_QUERY_WAIT_S,
    PENDING_QUEUES_MAX,
    QUEUE_ID_MAX,
    QUEUE_ID_MIN,
    QUEUE_NAME_CHARS_MAX,
    REPLY_GRACE_S,
)
from mrs.model import Address, Status


class Requester(Protocol):
    """What locate and pending use of the client's request table
    (clients.pending.Requests)."""

    def require_link(self, status: Status, what: str) -> object: ...
    async def linked(self, status: Status, what: str) -> object: ...
    def next_id(self) -> int: ...
    async def request(self, request: object, wait_s: float | None, kind: str = ...) -> object: ...


def queue_text(queue: Any, what: str) -> str:
    """A queue as the wire carries it (`G.Q` or a name), or FieldRefused (BADPARAM)
    with one line: the server would close the connection on a frame with an empty or
    oversized name, so the caller hears of it here instead."""
    if isinstance(queue, Address):
        return str(queue)
    if not isinstance(queue, str):
        raise FieldRefused(
            Status.BADPARAM,
            f"{what}: a queue is a str or an Address, got {type(queue).__name__}"
            + _how_to_name(queue),
        )
    text = queue.strip()
    if not text or len(text) > QUEUE_NAME_CHARS_MAX:
        raise FieldRefused(
            Status.BADPARAM,
            f"{what}: a queue name must be 1..{QUEUE_NAME_CHARS_MAX} characters, got {len(text)}",
        )
    return text


def _how_to_name(queue: Any) -> str:
    """For an int given as a queue, how to name that queue number. Why: `connect`
    takes a queue number (MessageQ's pams_attach_q), so `put(target=10)` was tried,
    and "a queue is a str or an Address" did not say how to write queue 10. An int
    stays refused (sessions 21 and 28 chose it): `str()` of whatever came was sent,
    and a put's target may be of another group, which a bare number cannot say."""
    if type(queue) is not int:
        return ""
    return (
        f" {queue}: write queue {queue} of the group connected to as '{queue}', "
        f"of group G as 'G.{queue}' or Address(G, {queue})"
    )


def pending_texts(queues: Any) -> list[str]:
    """The queues of a `pending` call, checked: a list (not one queue, which would be
    read as its characters) of 1..PENDING_QUEUES_MAX queues."""
    if isinstance(queues, str | Address | bytes) or not hasattr(queues, "__iter__"):
        raise FieldRefused(
            Status.BADPARAM, f"pending: give a list of queues, got {type(queues).__name__}"
        )
    texts = [queue_text(queue, "pending") for queue in queues]
    if not 1 <= len(texts) <= PENDING_QUEUES_MAX:
        raise FieldRefused(
            Status.BADPARAM,
            f"pending: give 1..{PENDING_QUEUES_MAX} queues, got {len(texts)}",
        )
    return texts


async def locate(client: Requester, name: str | Address, wait_s: float = REPLY_GRACE_S) -> Address:
    """The address `name` names, its answer awaited at most `wait_s`."""
    await client.linked(Status.NOTACTIVE, "locate")
    request = built(wire.Locate, client.next_id(), queue_text(name, "locate"))
    reply = cast(wire.Located, await client.request(request, wait_s, "other"))
    return located_address(reply, name)


def located_address(reply: wire.Located, name: object) -> Address:
    """The Address a Located names; PROTOCOL_ERROR (`ProtocolFailure`) for numbers no
    queue of a bus can have (mrs.limits: groups GROUP_ID_MIN..GROUP_ID_MAX, queues
    QUEUE_ID_MIN..QUEUE_ID_MAX). Why: a broken or hostile server's Located(-1, 10**18)
    was taken as an address, and the application put to "-1.1000000000000000000"
    (refused, or worse, read as a name). Only this call fails: the connection and
    the other calls on it go on."""
    if GROUP_ID_MIN <= reply.group <= GROUP_ID_MAX and QUEUE_ID_MIN <= reply.queue <= QUEUE_ID_MAX:
        return Address(reply.group, reply.queue)
    raise error_for(
        Status.PROTOCOL_ERROR,
        f"the server answered locate {str(name)[:60]!r} with {reply.group}.{reply.queue}, "
        f"no queue address (groups {GROUP_ID_MIN}..{GROUP_ID_MAX}, queues "
        f"{QUEUE_ID_MIN}..{QUEUE_ID_MAX})",
    )


async def pending(
    client: Requester,
    queues: Sequence[str | Address],
    own: Address | None = None,
    held: int = 0,
    wait_s: float = PENDING_QUERY_WAIT_S + REPLY_GRACE_S,  # the group's wait for other groups
) -> list[int]:
    """The group's counts, plus the `held` messages this client already has for its own
    queue `own` (read ahead, not yet got): the group handed them out, but for the
    application they are still waiting, and a `get` returns them next. Every answer
    (the counts, and a locate of each name) within `wait_s` together."""
    await client.linked(Status.NOTACTIVE, "pending")
    texts = pending_texts(queues)
    request = built(wire.ShowPending, client.next_id(), texts)
    deadline_s = trio.current_time() + wait_s
    reply = cast(wire.PendingCounts, await client.request(request, wait_s, "other"))
    counts = list(reply.counts)
    if len(counts) != len(texts):  # a broken server: before, a short list was returned
        raise error_for(  # as it came, and with held messages an IndexError was raised
            Status.PROTOCOL_ERROR,
            f"the server answered pending for {len(texts)} queues with {len(counts)} counts",
        )
    if any(count < 0 for count in counts):  # a broken server: returned as they came
        raise error_for(
            Status.PROTOCOL_ERROR,
            f"the server answered pending with a negative count: {counts[:PENDING_SHOWN_MAX]}",
        )
    if held and own is not None:
        for index, text in enumerate(texts):
            if await _names_queue(client, text, own, deadline_s):
                counts[index] += held
    return counts


PENDING_SHOWN_MAX = 10
"""Counts a protocol error quotes at most (a call asks for up to PENDING_QUEUES_MAX)."""


async def _names_queue(client: Requester, text: str, queue: Address, deadline_s: float) -> bool:
    """Whether a queue text is `queue`: a `G.Q` is read here, a name asked of the group
    (within what is left until `deadline_s`, trio time)."""
    try:
        return Address.parse(text) == queue
    except ValueError:
        left_s = max(TIME_LEFT_S_MIN, deadline_s - trio.current_time())  # still asked
        return await locate(client, text, left_s) == queue
