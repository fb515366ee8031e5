"""Selective gets (MessageQ's `pams_get_msg` with a `sel_filter`; IBM MQ's MQGET by
CorrelId): `Client.get(select=...)` and `get_many(select=...)`.

Why apart from the plain get: a selective get is always one request of its own. It
never shares the pooled GetBatch requests of plain gets (clients.get_pool); the group
picks the message from its index (mrs.group.select_index).

Why it looks at the held messages first: a message held by this client (read ahead,
or one that crossed a get its caller gave up) is no longer on the group's queue, so
the group cannot select it: without this look a get selecting an MRS_ACK that was
read ahead answered NOMOREMSG (or waited out its timeout) while the client held it.
A plain get takes held messages first; a selective get takes the held ones it
matches first, in the order they came.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import cast

import trio

from clients.errors import BadParameter
from clients.get_pool import keep_asked
from clients.pending import Requests
from clients.requests import built, get_timeout_ms
from mrs import protocol as wire
from mrs.core.selection import Selection
from mrs.limits import REPLY_GRACE_S
from mrs.model import DEAD_LETTER_QUEUE, Address, Message, Status


async def get_selected(
    requests: Requests,
    select: Selection,
    timeout: float | None,
    count_max: int | None,
    own: Address | None = None,
    linked: Callable[[float | None], Awaitable[float | None]] | None = None,
) -> list[Message]:
    """The message(s) `select` matches: one Get, or one GetBatch of up to count_max.
    Raises as get does (MrsTimeout, NoMoreMessages), BadParameter for a bad select, or
    for a single get that would confirm implicitly held messages it passes over on the
    attached queue `own` (see `_ask`). `linked(timeout)`: what the client does for a
    call that finds no connection (`Client._linked`: a replicated group's client waits
    for the new active within the get's timeout), given what is left of the timeout;
    None: NOTACTIVE at once."""
    if not isinstance(select, Selection):
        raise BadParameter(
            Status.BADPARAM,
            f"select takes a Selection (mrs.core.selection), not {type(select).__name__}",
        )
    timeout_ms = get_wait_ms(timeout)
    keys = select.to_wire()
    # Built before anything is held or reserved: a bad count or timeout is BADPARAM
    # and leaves the client as it was (a room reserved and never freed once made
    # every later get of the client EXCEEDQUOTA).
    _selective_request(1, timeout_ms, keys, count_max)  # a check only: never sent
    held = take_held(requests.held, select, 1 if count_max is None else count_max)
    if held:
        return held
    if linked is not None and (requests.link is None or requests.broken is not None):
        # Before, a selective get made during a failover raised NOTACTIVE at once
        # where a plain get waited for the new active (docs/replication.md).
        timeout = await linked(timeout)
        timeout_ms = get_wait_ms(timeout)
    await requests.linked(Status.NOTACTIVE, "get")
    if requests.cancelled_gets_outstanding:
        # What a given-up get brings is held, and taken first if it matches: a Get
        # confirms implicitly what was handed out before, and a request sent before
        # it came was answered without it.
        await requests.cancelled_gets_answered(None if timeout is None else timeout + REPLY_GRACE_S)
        held = take_held(requests.held, select, 1 if count_max is None else count_max)
        if held:
            return held
    batch_of_one = count_max is None and any(kept.needs_confirm for kept in requests.held)
    try:
        deliveries = await _ask(requests, timeout, timeout_ms, keys, count_max, batch_of_one)
    except BadParameter as refused:
        if not batch_of_one:
            raise
        if own is None or own.queue == DEAD_LETTER_QUEUE:  # read under leases: no implicit
            deliveries = await _ask(requests, timeout, timeout_ms, keys, None, False)
        else:
            raise _passes_over_held(len(requests.held), own) from refused
    messages = [requests.message(delivery) for delivery in deliveries]
    asked = 1 if count_max is None else count_max
    surplus: list[Message] = []
    if len(messages) > asked:  # a broken server: the caller gets what it asked for
        kept = keep_asked(requests.link, messages, asked, requests.held, hold_surplus=True)
        messages, surplus = kept[:asked], kept[asked:]
    if requests.held or surplus:  # held while it waited: delivered before these
        requests.held.extend(messages)
        requests.held.extend(surplus)
        return take_held(requests.held, select, len(messages))
    return messages


def get_wait_ms(timeout_s: float | None) -> int:
    """A get's timeout on the wire (`clients.requests.get_timeout_ms`: -1 for None, 0
    for a poll, BADPARAM for what is no length of time), a positive one at least 1 ms.
    Why: a timeout under half a millisecond (a deadline's last moment, `deadline -
    now`) was rounded to 0 and sent as a poll, so `get_many`, a selective get and a
    get on an implicit queue raised NoMoreMessages where a caller catching MrsTimeout
    (what a get with a timeout raises when nothing came) expected it."""
    timeout_ms = get_timeout_ms(timeout_s)
    if timeout_ms == 0 and timeout_s:  # `timeout_s` > 0: refused above otherwise
        return 1
    return timeout_ms


def time_left_s(timeout_s: float | None, started_s: float) -> float | None:
    """What is left of a get's `timeout_s` since `started_s` (trio time): None stays
    None, a poll stays a poll, and a positive timeout that has run out stays positive
    (a millisecond), so the get it leaves for still answers TIMEOUT (MrsTimeout), not
    NOMOREMSG as a poll would."""
    if timeout_s is None or timeout_s == 0:
        return timeout_s
    return max(TIME_LEFT_S_MIN, timeout_s - (trio.current_time() - started_s))


TIME_LEFT_S_MIN = 0.001
"""The least a positive get timeout becomes after waits took its time: one wire ms."""


def _passes_over_held(held_count: int, own: Address) -> BadParameter:
    """The refusal of a selective get on a queue that confirms implicitly while the
    client holds messages it would confirm unseen."""
    return BadParameter(
        Status.BADPARAM,
        f"queue {own} confirms implicitly and this client holds {held_count} messages "
        "that came for gets given up, which this selection passes over: a selective get "
        "would confirm them before the application saw them; take them with a plain get "
        "first",
    )


async def _ask(
    requests: Requests,
    timeout: float | None,
    timeout_ms: int,
    keys: list[list],
    count_max: int | None,
    batch_of_one: bool,
) -> list[wire.Delivery]:
    """Send the selective Get (count_max None) or GetBatch and wait for its messages.
    batch_of_one: a single get sent as a GetBatch of one, which confirms nothing
    implicitly: the held messages it passes over are unseen by the application, and
    a Get on a queue that confirms implicitly confirmed them (a crash then lost them);
    such a queue refuses the GetBatch (BADPARAM) instead."""
    wait_s = None if timeout is None else timeout + REPLY_GRACE_S
    request_id = requests.next_id()
    count = requests.reserve_get(request_id, 1 if count_max is None else count_max)
    try:
        wanted = 1 if batch_of_one else (None if count_max is None else count)
        request = _selective_request(request_id, timeout_ms, keys, wanted)
        reply = await requests.request(request, wait_s, "get")
    finally:
        requests.get_answered(request_id)
    if type(reply) is wire.Delivery:
        return [reply]
    return cast(wire.DeliveryBatch, reply).deliveries


def _selective_request(
    request_id: int, timeout_ms: int, keys: list[list], count_max: int | None
) -> wire.Get | wire.GetBatch:
    """The Get (count_max None) or GetBatch carrying the selection; FieldRefused
    (BADPARAM, naming the field) for a count or timeout the wire does not take."""
    if count_max is None:
        return built(wire.Get, request_id, timeout_ms, keys)
    return built(wire.GetBatch, request_id, count_max, timeout_ms, False, 0, keys)


def take_held(held: deque[Message], select: Selection, count_max: int) -> list[Message]:
    """Up to count_max of the held messages `select` matches, taken out of `held` in
    the order they came; the others stay held, in their order, for the next gets."""
    if not held:
        return []
    taken: list[Message] = []
    kept: list[Message] = []
    for message in held:
        if len(taken) < count_max and select.matches(message):
            taken.append(message)
        else:
            kept.append(message)
    if taken:
        held.clear()
        held.extend(kept)
    return taken
