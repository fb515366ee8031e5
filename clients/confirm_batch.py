"""`Client.confirm_many`: confirm many messages with one wait, as a pipeline does.

Why: a consumer that takes a batch (`get_many`, Redis's `XREADGROUP COUNT`, RabbitMQ's
prefetch) and then confirms each message with its own `await confirm()` pays a
request object, a task switch and a wake-up per message, one after the other. Here
every Confirm of the batch is queued at once (the send loop writes them together,
the server commits them together) and one task waits for all the answers, as a
pipelined `XACK` or RabbitMQ's `basic.ack(multiple=True)` does.

Each confirm is still its own request with its own answer: one refused confirm (a
seq not delivered on this connection, already confirmed) never fails the others.
`confirm_many` returns one result per seq, in order: None when confirmed, else the
MrsError that `confirm` alone would have raised (returned in its place, not raised).
It raises only when nothing could be tried (not connected) or when cancelled; a
connection lost meanwhile answers each unanswered confirm `ConnectionLost`: one not
sent yet says so (the message comes again marked POSSDUPL), one sent may still be
recorded (confirming it again answers BADSEQ once the group has it). The
batch waits at most `wait_s` (clients.answer_waits): a confirm sent and not answered
by then is a `ReplyTimeout` (it may still be recorded), one not sent yet an
`MrsTimeout` (it was not sent).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import trio

from clients.answer_waits import CONFIRM_OUTCOME, not_answered
from clients.batch import (
    Answers,
    ItemPending,
    build_each,
    error_of,
    expect,
    items_of,
    mark_not_sent,
    room_for,
)
from clients.requests import confirm_request
from mrs import protocol as wire
from mrs.errors import BadSequence, FieldRefused, MrsError, MrsTimeout, error_for
from mrs.model import ForceJrn, Message, Status

CONFIRM_CHUNK = 256
"""Confirms queued before the caller checks the client's cap on requests in flight."""


class _ConfirmPending(ItemPending):
    """What the client's table of requests holds for one confirm of a batch: on a
    lost connection a confirm sent is ConnectionLost saying it may still be recorded
    (clients.pending), not a put's PutOutcomeUnknown."""

    __slots__ = ()
    kind = "confirm"


async def confirm_many(
    requests: Any,
    seqs: Sequence[int],
    force_j: ForceJrn = ForceJrn.DEFAULT_JRN,
    confirm_values: Sequence[int] | None = None,
    wait_s: float = math.inf,
) -> list[MrsError | None]:
    """Confirm every seq (see the module doc) through `requests`, the client's
    request table (clients.pending.Requests); one result per seq, in order; each
    with its `confirm_values` entry (all 0 without them: `confirm_values_of`),
    within `wait_s`."""
    await requests.linked(Status.NOTACTIVE, "confirm_many")
    link = requests.link
    values = confirm_values_of(seqs, confirm_values)
    results, confirms = build_each(
        list(zip(seqs, values, strict=True)),
        lambda pair: confirm_request(requests.next_id(), pair[0], pair[1], force_j),
    )
    answers = Answers(results)
    pending = requests.pending
    sent: list[int] = []
    start = 0
    try:
        with trio.move_on_after(wait_s) as waited:
            for start in range(0, len(confirms), CONFIRM_CHUNK):
                chunk = confirms[start : start + CONFIRM_CHUNK]
                if not await room_for(requests, answers, len(chunk)) or requests.link is not link:
                    mark_not_sent(requests, link, results, chunk, "confirm")
                    continue
                for index, request in chunk:
                    link.send(request)
                    expect(pending, link, sent, request.request_id, _ConfirmPending(answers, index))
            start = len(confirms)
            await answers.wait_until(0)
        if waited.cancelled_caught:
            _timed_out(requests, seqs, results, sent, confirms[start:], wait_s)
    finally:
        for request_id in sent:  # abandoned (cancelled, timed out): nobody waits for these
            pending.pop(request_id, None)
    held = requests.held
    return [
        None if (error := _result(result, seq)) is None else held_first(error, held)
        for result, seq in zip(results, seqs, strict=True)
    ]


def held_first(error: MrsError, held: Iterable[Message]) -> MrsError:
    """`error`, saying so when the message an in-order queue wants confirmed first is
    one this client holds, unseen by the application (it came for a get given up,
    and a selective get passed over it). Why: the group's refusal alone ("queue
    confirms in order: confirm A before B") named a seq the application was never
    handed, and nothing said that a plain get returns it."""
    if type(error) is not BadSequence:
        return error
    text = error.message
    for message in held:
        if message.needs_confirm and f"confirm {message.seq} before" in text:
            return BadSequence(
                Status.BADSEQ,
                f"{text}: message {message.seq} came for a get given up and is held by "
                "this client, unseen; take it with a plain get first, then confirm both",
            )
    return error


def _timed_out(
    requests: Any,
    seqs: Sequence[int],
    results: list[Any],
    sent: list[int],
    unsent: list[tuple[int, Any]],
    wait_s: float,
) -> None:
    """After the batch's wait: each confirm sent and still unanswered is a
    ReplyTimeout (it may still be recorded), each not sent yet an MrsTimeout. Before
    there was no wait, and a confirm left unanswered here would read as recorded."""
    for request_id in sent:
        item = requests.pending.get(request_id)
        if isinstance(item, _ConfirmPending) and results[item.index] is None:
            what = f"confirm_many's confirm of message {seqs[item.index]}"
            results[item.index] = not_answered(what, requests.address, wait_s, CONFIRM_OUTCOME)
    for index, _request in unsent:
        if results[index] is None:
            results[index] = MrsTimeout(
                Status.TIMEOUT,
                f"confirm of message {seqs[index]}: not sent in time; it was not sent",
            )


def confirm_values_of(seqs: Sequence[int], values: Sequence[int] | None) -> Sequence[int]:
    """One confirm value per seq (MessageQ's pams_confirm_msg status, kept in the PCJ):
    `values` as given, or 0 for each; BADPARAM unless one per seq. Why: a ported
    program confirming in batches could not record the value it confirms with."""
    if values is None:
        return [0] * len(seqs)
    values = items_of(values, "confirm_many confirm_values")
    if len(values) != len(seqs):
        raise FieldRefused(
            Status.BADPARAM,
            f"confirm_many: {len(values)} confirm_values for {len(seqs)} seqs: give one each",
        )
    return values


def _result(result: object, seq: int) -> MrsError | None:
    """None for a confirm answered Confirmed; every item is answered or given an error
    before `confirm_many` returns, so None left in place is never a missing answer."""
    if result is None:
        return None
    if type(result) is wire.Confirmed:
        return confirmed_problem(result, seq)
    return error_of(result, "confirm")


def confirmed_problem(reply: wire.Confirmed, seq: int) -> MrsError | None:
    """None when `reply` says the confirm of `seq` was recorded; else the error to raise.

    Why: a Confirmed carries the seq and a status, and the client read neither, so a
    broken server's Confirmed of another message, or one with a failure status, was
    reported to the caller as its confirm recorded (the message then came again, or
    never went). A group answers a refused confirm with a Failure and a recorded one
    with Confirmed(seq, SUCCESS) (mrs.group.handover)."""
    if reply.seq != seq:
        return error_for(
            Status.PROTOCOL_ERROR,
            f"the server answered the confirm of message {seq} with the Confirmed of "
            f"message {reply.seq}: it may not be recorded",
        )
    if reply.status != _SUCCESS:
        return error_for(
            reply.status, f"the server answered the confirm of message {seq} with a failure"
        )
    return None


_SUCCESS = int(Status.SUCCESS)
