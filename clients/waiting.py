"""One request's wait for its answer, and the wake-up that ends it (compiled).

`Pending` is what the client's table of requests holds for a request in flight
(clients.pending) and, as `_Caller`, for a get waiting in the pool
(clients.get_pool). The waiting task parks itself directly (trio.lowlevel) instead
of on a trio.Event: one request, one waiter, so the Event's parking lot is pure cost
on the per-request path (benchmarks/README.md). It lives in its own module so that it and the
get pool can be compiled together (mrs.native.loader): a class compiled by mypyc
cannot be subclassed by interpreted code that defines `__call__`, and `_Caller`
does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, cast

import trio
from mypy_extensions import mypyc_attr


class _Resumed:
    """What a woken request's task resumes with: `wait_task_rescheduled` returns
    `unwrap()` of what `reschedule` was given, and a request's wait returns nothing.

    Why one shared object: `reschedule(task)` builds an `outcome.Value(None)` per
    wake-up, an attrs class whose `__init__` was 6.8% of a consumer's CPU in the e2e
    shape (benchmarks/README.md). A Value may be unwrapped only once; this one holds nothing, so
    it can be resumed with any number of times. A cancelled wait never sees it (trio
    resumes that one with the Cancelled error)."""

    def unwrap(self) -> None:
        return None


RESUMED: Final[Any] = _Resumed()
"""The one `_Resumed`, typed Any: trio's signature asks for an `outcome.Outcome`."""


_RESCHEDULE: Final = trio.lowlevel.reschedule
"""Per answer: a C static, not two attribute lookups on `trio` (benchmarks/README.md)."""


def resume(task: trio.lowlevel.Task) -> None:
    """Wake a task parked in `wait_task_rescheduled`, its wait returning None."""
    _RESCHEDULE(task, RESUMED)


@mypyc_attr(allow_interpreted_subclasses=True)  # clients.saf_drain._DrainedPut
class Pending:
    """One request awaiting its answer (see the module doc)."""

    def __init__(self, kind: str, callback: Callable[[object], None] | None = None) -> None:
        self.kind = kind
        """"put", "get", "confirm", "drain" or "other": decides what a lost connection answers."""
        self.callback = callback
        self.result: object = None
        self.answered = False
        self.waiter: trio.lowlevel.Task | None = None
        """The parked caller; None once it was woken (answer, expiry) or cancelled."""
        self.timed_out = False
        """Its reply deadline passed before the answer came (clients.deadlines)."""
        self.done = False
        """Nobody waits any more (answered, timed out or cancelled): its deadline is moot."""

    def __repr__(self) -> str:
        return f"Pending(kind={self.kind!r}, answered={self.answered}, done={self.done})"

    def answer(self, result: object) -> None:
        self.result = result
        self.answered = self.done = True
        waiter, self.waiter = self.waiter, None
        if waiter is not None:
            resume(waiter)
        if self.callback is not None:
            self.callback(result)

    def expire(self) -> None:
        """The reply deadline passed: the wait ends with `timed_out` (no-op once done)."""
        if self.done:
            return
        self.timed_out = self.done = True
        waiter, self.waiter = self.waiter, None
        if waiter is not None:
            resume(waiter)

    async def wait(self) -> None:
        """Until answered or expired; a checkpoint even when that already happened."""
        await self.waited()

    def waited(self) -> Awaitable[object]:
        """What `wait` awaits, for the caller's own task to await: `Requests.request` awaits it
        directly, so a request in flight holds no coroutine of `wait` for the collector
        to walk (benchmarks/README.md)."""
        if self.done:
            return trio.lowlevel.checkpoint()
        self.waiter = trio.lowlevel.current_task()
        return trio.lowlevel.wait_task_rescheduled(self)

    def __call__(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        """The wait's abort function (the caller was cancelled): itself, not a closure
        made per wait, so a request in flight holds one object fewer for the collector
        to walk (benchmarks/README.md)."""
        self.waiter = None  # a late answer must not wake a task that has moved on
        self.done = True
        return trio.lowlevel.Abort.SUCCEEDED


def answer_each(owner: Any, answers: list[Any], unclaimed: Callable[[object], None]) -> None:
    """Hand each answer of an AnswerBatch, in order, to the request it answers (what
    `owner.pending` holds for it: a `Pending`, or a put_many item's or a confirm's
    own); an answer no request waits for any more (its caller gave up) goes to
    `unclaimed`. The table is read again for every answer, as one dispatch per answer
    did: a callback may lose the connection, which replaces it.

    Compiled here: a client reads its answers in batches (one per server commit), and
    the interpreted loop over them cost each put a dispatch of its own, with two
    class tests and a `getattr` on the way (benchmarks/README.md)."""
    for answer in answers:
        table: dict[int, Any] = owner.pending
        waiter = table.pop(answer.request_id, None)
        if waiter is None:
            unclaimed(answer)
        elif type(waiter) is Pending:
            cast(Pending, waiter).answer(answer)  # a direct call
        else:
            waiter.answer(answer)
