"""`Client.put_many`: many puts in few PutBatch frames, each answered on its own.

Why: a put costs the client a request object, a task switch and a frame, and the
server a frame and a trip through its receive loop. A batch of up to
PUT_BATCH_ITEMS_MAX puts (PUT_BATCH_BYTES_MAX bytes) travels as one frame and is
stored by one commit, while every put keeps its own request id and its own answer:
one refused put never fails the others.

`put_many` returns one result per item, in order: the put's `Psb`, or the `MrsError`
that put alone would have raised (`KeyReused`, `NoSuchQueue`, `FieldRefused`,
`PutOutcomeUnknown` if the connection dropped after it was sent, ...), in its place
and not raised (as `asyncio.gather(return_exceptions=True)` does). It raises only
when nothing could be tried (not connected, the client broken) or when cancelled.

On a client with a SAF journal, put_many simply puts one item after the other, so
each is journaled or sent exactly as `put` would (JOURNAL_ON and the drain keep
their order); batching is for the connected path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import trio

from clients.lookup import queue_text
from clients.pending import resume
from clients.requests import (
    body_bytes,
    headers_problem,
    put_reply_wait_s,
    put_request,
    put_timeout_ms,
    wire_bytes,
)
from clients.resend import Resender
from clients.saf_journal import IDEMPOTENCY_HEADER
from mrs import protocol as wire
from mrs.errors import (
    ConnectionLost,
    FieldRefused,
    MrsError,
    MrsTimeout,
    QuotaExceeded,
    ReplyTimeout,
    error_for,
)
from mrs.limits import (
    CLIENT_REQUESTS_IN_FLIGHT_MAX,
    OUTBOX_BYTES_HIGH,
    PUT_BATCH_BYTES_MAX,
    PUT_BATCH_ITEMS_MAX,
    REPLY_GRACE_S,
)
from mrs.model import Address, DeliveryMode, Psb, Status, Uma, status_of

_RECOVERABLE = frozenset(mode for mode in DeliveryMode if mode.recoverable)
Result = Psb | MrsError


class PutItem(msgspec.Struct, frozen=True, gc=False):
    """One message for `Client.put_many`: the arguments `Client.put` takes. (A msgspec
    struct: built in C, about a tenth of a frozen dataclass's cost per item.)"""

    body: bytes
    target: str | Address
    delivery: DeliveryMode = DeliveryMode.WF_DQF
    uma: Uma | None = None
    msg_class: int = 0
    msg_type: int = 0
    priority: int = 0
    timeout: float | None = None
    correlation_id: bytes = b""
    resp_q: str | Address | None = None
    headers: dict | None = None
    protect: bool = True

    def put_arguments(self) -> dict[str, Any]:
        """The keyword arguments of `Client.put` for this item."""
        return {name: getattr(self, name) for name in self.__struct_fields__ if name != "body"}


async def put_one_by_one(client: Any, items: Sequence[PutItem]) -> list[Result]:
    """The journaling client's put_many: `put` each item in turn (see the module doc)."""
    results: list[Result] = []
    for item in items:
        try:
            if type(item) is not PutItem:
                raise _not_an_item(item)
            results.append(await client.put(item.body, **item.put_arguments()))
        except MrsError as error:
            results.append(error)
    return results


def _not_an_item(item: object) -> FieldRefused:
    """The refusal of a put_many item that is no PutItem (a tuple, a dict), in its
    place: before, `item.body` raised a bare AttributeError out of the whole call."""
    return FieldRefused(Status.BADPARAM, f"put_many takes PutItems, got {type(item).__name__}")


def build_put(client: Any, next_id: Callable[[], int], item: PutItem) -> wire.Put:
    """The Put of one item, checked as `Client.put` checks it; MrsError if refused."""
    if type(item) is not PutItem:
        raise _not_an_item(item)
    body = item.body if type(item.body) is bytes else body_bytes(item.body)
    target, resp_q = _queues_of(item)
    if client.protection is not None and item.protect:
        body = client.protection.seal_for(target, body, client.group_id)
    body_bytes_max = client.message_bytes_max
    if body_bytes_max and len(body) > body_bytes_max:
        raise error_for(
            Status.MSGTOOBIG,
            f"body of {len(body)} bytes exceeds the group's message_bytes_max {body_bytes_max}",
        )
    if item.headers is not None and (too_big := headers_problem(item.headers)) is not None:
        raise error_for(Status.MSGTOOBIG, too_big)  # its frame would end the connection
    uma = item.uma
    if uma is None and item.delivery in _RECOVERABLE:
        uma = Uma.DLJ
    timeout_ms = put_timeout_ms(item.timeout)
    return put_request(
        next_id(),
        target,
        body,
        item.delivery,
        uma or 0,
        item.msg_class,
        item.msg_type,
        item.priority,
        timeout_ms,
        item.correlation_id,
        resp_q,
        item.headers,
    )


def _queues_of(item: PutItem) -> tuple[str, str]:
    """An item's target and response queue as the wire carries them ("" for no
    response queue), each a str or an Address, else BADPARAM in the item's place, as
    `Client.put` refuses them. Why: `str()` of anything was sent, so a target of None
    went out as the queue name "None", and an int (10) or bytes (b"1.10") reached a
    queue the caller never named (10 is ORDERS' number) where `put` refuses them."""
    target = item.target if type(item.target) is str else queue_text(item.target, "put_many")
    resp_q = item.resp_q
    if resp_q is None:
        return target, ""
    return target, resp_q if type(resp_q) is str else queue_text(resp_q, "put_many resp_q")


def frames(puts: list[tuple[int, wire.Put]]) -> list[list[tuple[int, wire.Put]]]:
    """Split (index, put) pairs into frames of at most PUT_BATCH_ITEMS_MAX puts and
    about PUT_BATCH_BYTES_MAX bytes; a put bigger than that travels alone."""
    out: list[list[tuple[int, wire.Put]]] = []
    frame: list[tuple[int, wire.Put]] = []
    frame_bytes = 0
    for pair in puts:
        size = wire_bytes(pair[1])
        if frame and (
            len(frame) >= PUT_BATCH_ITEMS_MAX or frame_bytes + size > PUT_BATCH_BYTES_MAX
        ):
            out.append(frame)
            frame, frame_bytes = [], 0
        frame.append(pair)
        frame_bytes += size
    if frame:
        out.append(frame)
    return out


class Answers:
    """The results of one batch call (put_many, confirm_many), and the one task
    waiting for enough of them."""

    __slots__ = ("missing", "results", "target", "waiter")

    def __init__(self, results: list[Any]) -> None:
        self.results = results
        self.missing = 0
        self.target = -1
        self.waiter: trio.lowlevel.Task | None = None

    def answer(self, index: int, result: object) -> None:
        self.results[index] = result
        self.missing -= 1
        if self.missing <= self.target and self.waiter is not None:
            waiter, self.waiter = self.waiter, None
            resume(waiter)

    async def wait_until(self, missing: int) -> None:
        """Until at most `missing` answers are still owed."""
        if self.missing <= missing:
            await trio.lowlevel.checkpoint()
            return
        self.target = missing
        self.waiter = trio.lowlevel.current_task()

        def abort(_raise_cancel: object) -> trio.lowlevel.Abort:
            self.waiter = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


class ItemPending:
    """What the client's table of requests holds for one put of a batch: the client
    answers it (a PutDone, a Failure, or an MrsError when the connection drops).
    `kind` says what a lost connection makes of it (clients.pending.Requests.lose)."""

    __slots__ = ("answers", "index")
    kind = "put"

    def __init__(self, answers: Answers, index: int) -> None:
        self.answers, self.index = answers, index

    def answer(self, result: object) -> None:
        self.answers.answer(self.index, result)


async def send_batches(client: Any, requests: Any, items: Sequence[PutItem]) -> list[Result]:
    """The connected put_many: build (checked as `client.put` checks), split into
    frames, send through `requests` (the client's request table,
    clients.pending.Requests) with at most CLIENT_REQUESTS_IN_FLIGHT_MAX requests in
    flight, and collect every answer."""
    await requests.linked(Status.LINK_DOWN, "put_many")
    results, puts = build_each(items, lambda item: build_put(client, requests.next_id, item))
    wait_s = batch_wait_s(items, puts)
    await send_built(requests, results, puts, wait_s)
    mark_unanswered(results, puts, items, requests.address, wait_s)
    return [_result(result) for result in results]


def batch_wait_s(items: Sequence[PutItem], puts: list[tuple[int, wire.Put]]) -> float:
    """How long a put_many waits for its answers: its longest put's wait."""
    return max((put_reply_wait_s(items[index].timeout) for index, _ in puts), default=REPLY_GRACE_S)


async def send_built(
    requests: Any, results: list[Any], puts: list[tuple[int, wire.Put]], wait_s: float
) -> None:
    """Send the built (index, put) pairs over the connection up now, in frames, and
    set `results[index]` to each put's answer (None: none came within `wait_s`)."""
    link = requests.link
    answers = Answers(results)
    pending = requests.pending
    sent: list[int] = []
    unsent = frames(puts)
    unsent.reverse()
    try:
        with trio.move_on_after(wait_s):
            while unsent:
                frame = unsent.pop()
                if not await room_for(requests, answers, len(frame)) or requests.link is not link:
                    mark_not_sent(requests, link, results, frame, "put")
                    continue
                for index, put in _send_frame(link, frame, results):
                    expect(pending, link, sent, put.request_id, ItemPending(answers, index))
            await answers.wait_until(0)
    finally:
        for request_id in sent:  # abandoned (timeout, cancelled): nobody waits for these
            pending.pop(request_id, None)
    for frame in unsent:  # the deadline passed while waiting for room
        for index, _put in frame:
            results[index] = MrsTimeout(Status.TIMEOUT, "not sent in time; it was not sent")


async def send_batches_resent(
    client: Any, requests: Any, resender: Resender, items: Sequence[PutItem]
) -> list[Result]:
    """A replicated group's put_many (several addresses): every recoverable item gets
    an idempotency key, and those a failover left unanswered (or that found no
    connection) are re-sent, the same built puts in their order, to the new active
    (clients.resend.Resender.resend_lost): the caller gets their real PSBs."""
    keyed = [
        item
        if item.delivery not in _RECOVERABLE
        else msgspec.structs.replace(item, headers=resender.keyed(item.headers))
        for item in items
    ]
    results, puts = build_each(keyed, lambda item: build_put(client, requests.next_id, item))
    wait_s = batch_wait_s(keyed, puts)

    async def send(some: list[tuple[int, wire.Put]]) -> list[Result]:
        try:
            await requests.linked(Status.LINK_DOWN, "put_many")
        except ConnectionLost as lost:
            if lost.status != Status.LINK_DOWN:
                raise
            return [lost] * len(some)
        answered: list[Any] = [None] * len(keyed)
        await send_built(requests, answered, some, wait_s)
        mark_unanswered(answered, some, keyed, requests.address, wait_s)
        return [_result(answered[index]) for index, _ in some]

    for (index, _put), result in zip(puts, await send(puts), strict=True):
        results[index] = result
    recoverable = [(index, put) for index, put in puts if keyed[index].delivery in _RECOVERABLE]
    await resender.resend_lost(recoverable, results, send)
    return results  # each a Psb or an MrsError already


def _send_frame(link: Any, frame: list, results: list[Any]) -> list[tuple[int, wire.Put]]:
    """Queue one frame; if it cannot be encoded, each put alone, so one put the wire
    cannot carry is refused (FieldRefused) and the others still go. What was sent."""
    try:
        link.send(frame[0][1] if len(frame) == 1 else wire.PutBatch([put for _, put in frame]))
        return frame
    except wire.LocalProtocolError as error:
        if len(frame) == 1:
            results[frame[0][0]] = FieldRefused(Status.BADPARAM, error.message)
            return []
    sent: list[tuple[int, wire.Put]] = []
    for pair in frame:
        sent.extend(_send_frame(link, [pair], results))
    return sent


async def room_for(requests: Any, answers: Answers, count: int) -> bool:
    """Wait for our own answers until `count` more requests fit the client's cap,
    and for the connection's unwritten bytes to fall under OUTBOX_BYTES_HIGH
    (`Requests.outbox_room`: a server that does not read bounds the client's memory);
    False if other tasks hold so many that they never would."""
    excess = len(requests.pending) + count - CLIENT_REQUESTS_IN_FLIGHT_MAX
    if excess > 0:
        await answers.wait_until(max(0, answers.missing - excess))
    link = requests.link
    if link is not None and link.unsent_bytes > OUTBOX_BYTES_HIGH:
        with contextlib.suppress(ConnectionLost):  # the caller sees the link is gone
            await requests.outbox_room(link)
    return len(requests.pending) + count <= CLIENT_REQUESTS_IN_FLIGHT_MAX


def items_of(items: Any, what: str) -> Sequence[Any]:
    """The items of a batch call (put_many's PutItems, confirm_many's seqs) as a
    sequence: a list or tuple as it is, another iterable (a generator) read into a
    list; BADPARAM (`FieldRefused`) for what is none (None, an int, one str or bytes).
    Why: `len(None)` reached the caller as a bare TypeError, and a generator, which a
    caller may well pass, was refused the same way."""
    if type(items) is list or type(items) is tuple:
        return items
    if isinstance(items, str | bytes | bytearray | dict) or not hasattr(items, "__iter__"):
        raise FieldRefused(Status.BADPARAM, f"{what}: give a list, got {type(items).__name__}")
    return list(items)


def build_each(items: Sequence[Any], build: Callable[[Any], Any]) -> tuple[list[Any], list]:
    """(results, built) for a batch call: `build(item)` for every item, as (index,
    request); an item whose build raises an MrsError has that error as its result
    (None for the others, to be answered) and is not sent."""
    results: list[Any] = [None] * len(items)
    requests: list[tuple[int, Any]] = []
    for index, item in enumerate(items):
        try:
            requests.append((index, build(item)))
        except MrsError as error:
            results[index] = error
    return results, requests


def expect(pending: dict, link: Any, sent: list[int], request_id: int, item: ItemPending) -> None:
    """A request of a batch was queued on `link`: its answer goes to `item` (the
    client's table), it counts as unsent until written, and its batch waits for it."""
    pending[request_id] = item
    link.unsent.add(request_id)
    sent.append(request_id)
    item.answers.missing += 1


def mark_not_sent(requests: Any, link: Any, results: list[Any], indexed: list, what: str) -> None:
    """Give each (index, request) of `indexed` the error saying why it was not sent:
    the connection it was for is gone, or the client's cap on requests in flight
    left no room."""
    if requests.link is not link:
        error: MrsError = ConnectionLost(
            Status.LINK_DOWN, f"connection lost before this {what} was sent; it was not sent"
        )
    else:
        error = QuotaExceeded(
            Status.EXCEEDQUOTA,
            f"{len(requests.pending)} requests already await an answer on this connection "
            f"(at most {CLIENT_REQUESTS_IN_FLIGHT_MAX}); this {what} was not sent",
        )
    for index, _request in indexed:
        results[index] = error


def mark_unanswered(
    results: list[Any],
    puts: list[tuple[int, wire.Put]],
    items: Sequence[PutItem],
    address: str,
    wait_s: float,
) -> None:
    """Give each put of `puts` sent and left unanswered (its result still None) a
    ReplyTimeout naming it: its index in the list, its target, that the others have
    their own results, and whether a re-send is safe (`_resend_outcome`). Why: each
    read "no answer from the server in time", the same words for every item, with
    no word of which put it was or that its message may be stored, as a single
    put's timeout says (clients.pending `not_answered`)."""
    missing = [index for index, _put in puts if results[index] is None]
    others = ""
    if len(items) > 1:
        unanswered = "the only one" if len(missing) == 1 else str(len(missing))
        others = f" ({unanswered} of the {len(items)} items unanswered; the others have results)"
    for index in missing:
        item = items[index]
        outcome = _resend_outcome(item)
        results[index] = ReplyTimeout(
            Status.TIMEOUT,
            f"put_many items[{index}] (to {item.target}): no answer from {address} within "
            f"{wait_s:g} s{others}; the message may or may not be stored: {outcome}",
        )


def _resend_outcome(item: PutItem) -> str:
    """Whether re-sending an unanswered item is safe: only under the idempotency key
    it carried, and only for a recoverable put (the group keeps the keys of the
    messages it stores: intake `_put_recoverable`)."""
    key = (item.headers or {}).get(IDEMPOTENCY_HEADER)
    if key is None:
        return "it carries no idempotency key, so a re-send may store it twice"
    if item.delivery in _RECOVERABLE:
        return f"re-send it under its idempotency key {key!r}: the group stores it once"
    return "a memory put's idempotency key is not kept, so a re-send may repeat it"


def _result(result: object) -> Result:
    if type(result) is wire.PutDone:
        return Psb(
            status_of(result.status),
            status_of(result.delivery_status),
            result.seq,
            status_of(result.uma_status),
        )
    if result is None:
        return ReplyTimeout(Status.TIMEOUT, "no answer from the server in time")
    return error_of(result, "put")


def error_of(result: object, what: str) -> MrsError:
    """The error an answer other than the expected one stands for, for one request of
    a batch (put_many, confirm_many): the MrsError it already is (the connection
    dropped), the server's Failure, or an unexpected answer."""
    if isinstance(result, MrsError):
        return result
    if isinstance(result, wire.Failure):
        return error_for(result.status, result.message)
    return error_for(
        Status.PROTOCOL_ERROR, f"unexpected answer to a {what}: {type(result).__name__}"
    )
