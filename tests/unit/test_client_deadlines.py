"""The client's reply deadlines (clients.deadlines): one sweeper task instead of a
cancel scope per request, so these check what fail_after got right for free — the
earliest deadline fires first even when it was added last, an answered or cancelled
request is never expired, the heap of stale entries stays bounded — and, against a
server that never answers, that a put and a get still end in ReplyTimeout."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import clients
import clients.connection
import clients.get_pool
import clients.requests
from clients.deadlines import COMPACT_ENTRIES_MIN, ReplyDeadlines
from clients.pending import _Pending
from mrs.model import Status
from tests.client_helpers import silent_server


async def _wait_and_record(pending: _Pending, name: str, woken: list[tuple[str, float]]) -> None:
    await pending.wait()
    woken.append((name, trio.current_time()))


async def test_the_earliest_deadline_fires_first_even_when_added_last(autojump_clock) -> None:
    deadlines = ReplyDeadlines()
    woken: list[tuple[str, float]] = []
    late, early = _Pending("put"), _Pending("get")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(deadlines.run)
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        deadlines.add(start + 30, 1, late)
        nursery.start_soon(_wait_and_record, late, "late", woken)
        await trio.testing.wait_all_tasks_blocked()
        deadlines.add(start + 1, 2, early)  # wakes the sweeper sleeping until +30
        nursery.start_soon(_wait_and_record, early, "early", woken)
        while len(woken) < 2:
            await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert [name for name, _ in woken] == ["early", "late"]
    assert woken[0][1] - start == pytest.approx(1, abs=0.01)
    assert woken[1][1] - start == pytest.approx(30, abs=0.01)
    assert early.timed_out and late.timed_out


async def test_an_answered_or_cancelled_request_is_not_expired(autojump_clock) -> None:
    deadlines = ReplyDeadlines()
    answered, cancelled = _Pending("put"), _Pending("get")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(deadlines.run)

        async def waits_for_answer() -> None:
            deadlines.add(trio.current_time() + 5, 1, answered)
            await answered.wait()

        async def gives_up() -> None:
            with trio.move_on_after(1):
                deadlines.add(trio.current_time() + 5, 2, cancelled)
                await cancelled.wait()

        nursery.start_soon(waits_for_answer)
        nursery.start_soon(gives_up)
        await trio.testing.wait_all_tasks_blocked()
        answered.answer("stored")
        await trio.sleep(10)  # both deadlines pass
        nursery.cancel_scope.cancel()
    assert answered.result == "stored" and not answered.timed_out
    assert not cancelled.timed_out and cancelled.result is None


async def test_stale_entries_are_compacted_away() -> None:
    """Answered requests leave entries behind: the heap stays within a small multiple
    of the waiters, not the number of requests ever made."""
    deadlines = ReplyDeadlines()
    waiting = _Pending("put")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(deadlines.run)
        deadlines.add(trio.current_time() + 30, 0, waiting)
        nursery.start_soon(waiting.wait)
        await trio.testing.wait_all_tasks_blocked()
        for request_id in range(1, 50 * COMPACT_ENTRIES_MIN):
            done = _Pending("put")
            deadlines.add(trio.current_time() + 30, request_id, done)
            done.answer("stored")
            if request_id % 100 == 0:
                await trio.testing.wait_all_tasks_blocked()
        await trio.testing.wait_all_tasks_blocked()
        assert len(deadlines) <= COMPACT_ENTRIES_MIN + 100
        waiting.answer("stored")
        nursery.cancel_scope.cancel()
    assert not waiting.timed_out


async def test_unanswered_puts_and_gets_end_in_reply_timeout(monkeypatch) -> None:
    """Many puts and a get at once, none answered: each raises ReplyTimeout (not the
    server's TIMEOUT), and the client is still usable for the next request."""
    for module in (clients.connection, clients.requests, clients.get_pool):  # each reads it
        monkeypatch.setattr(module, "REPLY_GRACE_S", 0.05)
    outcomes: list[BaseException] = []

    async def one(call) -> None:
        try:
            await call()
        except clients.MrsError as error:
            outcomes.append(error)

    async with trio.open_nursery() as nursery:
        port = await nursery.start(silent_server)
        async with clients.connect(f"127.0.0.1:{port}", queue="1.10") as client:
            async with trio.open_nursery() as calls:
                for _ in range(20):
                    calls.start_soon(one, lambda: client.put(b"x", "1.10", timeout=0.1))
                calls.start_soon(one, lambda: client.get(timeout=0.05))
            assert len(outcomes) == 21
            for error in outcomes:
                assert type(error) is clients.ReplyTimeout
                assert error.status is Status.TIMEOUT
            assert client.connected
            with pytest.raises(clients.ReplyTimeout):
                await client.put(b"x", "1.10", timeout=0.05)
        nursery.cancel_scope.cancel()


async def test_many_distinct_waits_expire_in_deadline_order(autojump_clock) -> None:
    """Requests with 100 different timeouts, added latest first: each expires at its
    own time, and nothing is left behind."""
    deadlines = ReplyDeadlines()
    woken: list[tuple[str, float]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(deadlines.run)
        start = trio.current_time()
        for wait_s in range(100, 0, -1):
            pending = _Pending("get")
            deadlines.add(start + wait_s, wait_s, pending)
            nursery.start_soon(_wait_and_record, pending, str(wait_s), woken)
        await trio.sleep(101)
        nursery.cancel_scope.cancel()
    assert [name for name, _ in woken] == [str(wait_s) for wait_s in range(1, 101)]
    assert all(at - start == pytest.approx(int(name), abs=0.01) for name, at in woken)
    assert len(deadlines) == 0


async def test_interleaved_waits_expire_in_deadline_order(autojump_clock) -> None:
    """Puts with a long wait and gets with a short one, made alternately and over
    time (each wait's requests in order, the two mixed): every request expires at
    its own deadline, in deadline order, and nothing is left behind."""
    deadlines = ReplyDeadlines()
    woken: list[tuple[str, float]] = []
    expected: list[tuple[float, str]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(deadlines.run)
        start = trio.current_time()
        for step in range(20):
            for kind, wait_s in (("put", 30), ("get", 1 + 0.7 * (step % 3))):
                name = f"{kind}{step}"
                pending = _Pending(kind)
                deadlines.add(trio.current_time() + wait_s, step, pending)
                expected.append((trio.current_time() + wait_s - start, name))
                nursery.start_soon(_wait_and_record, pending, name, woken)
            await trio.sleep(0.5)
        await trio.sleep(40)
        nursery.cancel_scope.cancel()
    assert [name for name, _ in woken] == [name for _, name in sorted(expected)]
    at_by_name = {name: at - start for name, at in woken}
    assert all(at_by_name[name] == pytest.approx(due, abs=0.01) for due, name in expected)
    assert len(deadlines) == 0


async def test_reading_trios_own_clock_directly_gives_trios_time() -> None:
    """Under trio's SystemClock the deadlines read `perf_counter()` plus the clock's
    offset instead of asking trio (issue 17): what they read must be trio's time, so
    a request's wait ends when trio says it is up, not hours off."""
    deadlines = ReplyDeadlines()
    pending = _Pending("put")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(deadlines.run)
        await trio.testing.wait_all_tasks_blocked()
        assert deadlines._clock_offset_s is not None  # the direct reading is in use
        assert deadlines.now_s() == pytest.approx(trio.current_time(), abs=0.001)
        start = trio.current_time()
        deadlines.add_after(0.05, 1, pending)
        await pending.wait()
        waited_s = trio.current_time() - start
        nursery.cancel_scope.cancel()
    assert pending.timed_out
    assert 0.05 <= waited_s < 1.0
    assert deadlines._clock_offset_s is None  # the sweeper ended: trio is asked again


async def test_any_other_clock_is_asked_every_time(autojump_clock) -> None:
    """A test's MockClock has no fixed offset from `perf_counter()`: it is asked."""
    deadlines = ReplyDeadlines()
    pending = _Pending("get")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(deadlines.run)
        await trio.testing.wait_all_tasks_blocked()
        assert deadlines._clock_offset_s is None
        start = trio.current_time()
        deadlines.add_after(30, 1, pending)
        await pending.wait()
        assert trio.current_time() - start == pytest.approx(30, abs=0.01)
        assert deadlines.now_s() == trio.current_time()
        nursery.cancel_scope.cancel()
    assert pending.timed_out
