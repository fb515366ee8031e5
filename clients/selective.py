"""Selective gets (MessageQ's `pams_get_msg` with a `sel_filter`; IBM MQ's MQGET by
CorrelId): `Client.get(select=...)` and `get_many(select=...)`.

Why apart from the plain get: a selective get is always one request of its own. It
never shares the pooled GetBatch requests of plain gets (clients.get_pool) and never
takes a held read-ahead message (those are the next messages in order, not the ones
it selects); the group picks the message from its index (mrs.group.select_index).
"""

from __future__ import annotations

from clients.errors import BadParameter
from clients.pending import Requests
from clients.requests import built, get_timeout_ms
from mrs import protocol as wire
from mrs.core.selection import Selection
from mrs.limits import REPLY_GRACE_S
from mrs.model import Message, Status


async def get_selected(
    requests: Requests, select: Selection, timeout: float | None, count_max: int | None
) -> list[Message]:
    """The message(s) `select` matches: one Get, or one GetBatch of up to count_max.
    Raises as get does (MrsTimeout, NoMoreMessages), BadParameter for a bad select."""
    if not isinstance(select, Selection):
        raise BadParameter(
            Status.BADPARAM,
            f"select takes a Selection (mrs.core.selection), not {type(select).__name__}",
        )
    requests.require_link(Status.NOTACTIVE, "get")
    timeout_ms = get_timeout_ms(timeout)
    wait_s = None if timeout is None else timeout + REPLY_GRACE_S
    request_id = requests.next_id()
    keys = select.to_wire()
    count = requests.reserve_get(request_id, count_max or 1)
    if count_max is None:
        request: wire.Get | wire.GetBatch = built(wire.Get, request_id, timeout_ms, keys)
    else:
        request = built(wire.GetBatch, request_id, count, timeout_ms, False, 0, keys)
    try:
        reply = await requests.request(request, wait_s, "get")
    finally:
        requests.get_answered(request_id)
    deliveries = [reply] if count_max is None else reply.deliveries
    return [requests.message(delivery) for delivery in deliveries]
