"""The client's per-request wait (clients.pending._Pending): it parks the caller
without a trio.Event (issue 17), so these check the cases an Event got right for free —
an answer wakes the waiter with its result, a cancelled waiter is not woken by a late
answer, and an answer that came first still returns at a checkpoint."""

from __future__ import annotations

import trio
import trio.testing

from clients.pending import _Pending


async def test_answer_wakes_the_waiter_with_its_result() -> None:
    pending = _Pending("put")
    got: list[object] = []

    async def waiter() -> None:
        await pending.wait()
        got.append(pending.result)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        pending.answer("stored")
    assert got == ["stored"]


async def test_a_late_answer_after_cancel_wakes_nobody() -> None:
    pending = _Pending("get")
    callbacks: list[object] = []
    pending.callback = callbacks.append
    with trio.move_on_after(0.01) as scope:
        await pending.wait()
    assert scope.cancelled_caught
    # The answer comes after the caller gave up: trio would raise if it rescheduled
    # a task that is no longer parked here; the result is still kept for _abandon.
    pending.answer("late delivery")
    assert pending.result == "late delivery"
    assert callbacks == ["late delivery"]
    await trio.sleep(0)  # and the cancelled task is not woken again


async def test_an_answer_before_the_wait_returns_at_a_checkpoint() -> None:
    pending = _Pending("other")
    pending.answer("status")
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await pending.wait()
        except trio.Cancelled:
            raised = True
        else:
            raised = False
    assert raised  # a checkpoint: honours cancellation like every trio wait
