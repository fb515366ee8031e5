"""clients.resend: the keys a replicated group's client gives its recoverable puts, and
the re-send of a put (or of a put_many's puts) a lost connection left unanswered,
within its bounds. (The real failover is tests/process/test_replication.py.)"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from clients.errors import ConnectionLost, PutOutcomeUnknown
from clients.requests import put_request
from clients.resend import Resender
from clients.saf_drain import IDEMPOTENCY_HEADER
from mrs import limits
from mrs import protocol as wire
from mrs.model import DeliveryMode, Status


async def _connected() -> None:
    await trio.lowlevel.checkpoint()


async def _put(resender: Resender, attempt, body_bytes: int) -> object:
    """What Client.put does: the first send inline, the re-sends by the Resender."""
    try:
        return await attempt()
    except ConnectionLost as lost:
        return await resender.resend(lost, attempt, body_bytes)


def test_keys_are_the_callers_or_new_and_unique_per_client() -> None:
    one, other = Resender(_connected), Resender(_connected)
    mine = {IDEMPOTENCY_HEADER: "k", "x": 1}
    assert one.keyed(mine) is mine
    keys = [one.keyed(None)[IDEMPOTENCY_HEADER] for _ in range(3)]
    keys.append(other.keyed(None)[IDEMPOTENCY_HEADER])
    assert len(set(keys)) == 4
    merged = one.keyed({"x": 1})
    assert merged["x"] == 1 and merged[IDEMPOTENCY_HEADER].startswith("auto:")


def test_a_lost_answer_is_resent_once_connected_and_other_errors_are_raised() -> None:
    async def scenario() -> None:
        resender = Resender(_connected)
        answers: list[object] = [PutOutcomeUnknown(Status.LINK_DOWN, "lost"), "psb"]

        async def attempt() -> str:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

        assert await _put(resender, attempt, 10) == "psb"
        assert resender.resent == 1 and resender.waiting_messages == 0

        async def revoked() -> str:
            raise ConnectionLost(Status.NOTAUTHORIZED, "credentials revoked")

        with pytest.raises(ConnectionLost, match="revoked"):
            await _put(resender, revoked, 10)
        assert resender.resent == 1

    trio.run(scenario)


def test_beyond_its_bounds_a_put_raises_what_the_lost_connection_said(monkeypatch) -> None:
    monkeypatch.setattr("clients.resend.CLIENT_RESEND_MESSAGES_MAX", 1)

    async def scenario() -> None:
        never = trio.Event()
        resender = Resender(never.wait)  # no new connection comes

        async def lost() -> str:
            raise PutOutcomeUnknown(Status.LINK_DOWN, "lost")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_put, resender, lost, 10)  # waits: the one kept
            await trio.testing.wait_all_tasks_blocked()
            assert resender.waiting_messages == 1
            with pytest.raises(PutOutcomeUnknown):  # one more: over the bound
                await _put(resender, lost, 10)
            nursery.cancel_scope.cancel()
        with pytest.raises(ConnectionLost):  # waited CLIENT_RESEND_WAIT_S for nothing
            await _put(resender, lost, 10)
        assert resender.waiting_messages == 0 and resender.waiting_bytes == 0

    trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))
    assert limits.CLIENT_RESEND_BYTES_MAX >= limits.PUT_BATCH_BYTES_MAX


def _built(count: int, body: bytes = b"b") -> list[tuple[int, wire.Put]]:
    """(index, put) pairs as put_many builds them; the body is all a re-send counts."""
    return [
        (
            index,
            put_request(index + 1, "1.10", body, DeliveryMode.WF_DQF, 0, 0, 0, 0, 0, b"", "", None),
        )
        for index in range(count)
    ]


def _unknown() -> PutOutcomeUnknown:
    return PutOutcomeUnknown(Status.LINK_DOWN, "lost before the put was answered")


def test_a_batchs_lost_puts_are_resent_in_order_and_the_answered_ones_kept() -> None:
    async def scenario() -> None:
        resender = Resender(_connected)
        puts = _built(5)
        refused = ConnectionLost(Status.NOTAUTHORIZED, "revoked")  # not a lost answer
        results: list[object] = ["psb0", _unknown(), refused, _unknown(), None]
        results[4] = ConnectionLost(Status.LINK_DOWN, "not sent")
        sends: list[list[int]] = []

        async def send(some):
            sends.append([index for index, _ in some])
            if len(sends) == 1:  # the first re-send is lost again after its first put
                return ["psb1", _unknown(), _unknown()]
            return [f"psb{index}" for index, _ in some]

        await resender.resend_lost(puts, results, send)
        assert sends == [[1, 3, 4], [3, 4]]  # in order, never a later one first
        assert results == ["psb0", "psb1", refused, "psb3", "psb4"]
        assert resender.resent == 5 and resender.waiting_messages == 0

    trio.run(scenario)


def test_a_batch_beyond_the_bounds_keeps_what_the_lost_connection_said(monkeypatch) -> None:
    monkeypatch.setattr("clients.resend.CLIENT_RESEND_MESSAGES_MAX", 2)

    async def scenario() -> None:
        resender = Resender(_connected)
        results: list[object] = [_unknown() for _ in range(3)]
        tail = results[2]

        async def send(some):
            return [f"psb{index}" for index, _ in some]

        await resender.resend_lost(_built(3), results, send)
        assert results == ["psb0", "psb1", tail]  # the third did not fit: as on one server
        monkeypatch.setattr("clients.resend.CLIENT_RESEND_MESSAGES_MAX", 10)
        monkeypatch.setattr("clients.resend.CLIENT_RESEND_BYTES_MAX", 5)
        results = [_unknown() for _ in range(3)]
        await resender.resend_lost(_built(3, b"xx"), results, send)
        assert results[:2] == ["psb0", "psb1"] and isinstance(results[2], PutOutcomeUnknown)

    trio.run(scenario)


def test_a_batch_that_finds_no_connection_in_time_keeps_its_errors() -> None:
    async def scenario() -> None:
        never = trio.Event()
        resender = Resender(never.wait)
        results: list[object] = [_unknown(), _unknown()]
        before = list(results)

        async def send(some):
            raise AssertionError("nothing is sent without a connection")

        started = trio.current_time()
        await resender.resend_lost(_built(2), results, send)
        assert trio.current_time() - started == pytest.approx(limits.CLIENT_RESEND_WAIT_S)
        assert results == before and resender.resent == 0
        assert resender.waiting_messages == 0 and resender.waiting_bytes == 0

    trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_batch_waiting_counts_against_the_bounds_single_puts_share() -> None:
    async def scenario() -> None:
        connected = trio.Event()
        resender = Resender(connected.wait)
        results: list[object] = [_unknown(), _unknown()]

        async def send(some):
            return [f"psb{index}" for index, _ in some]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(resender.resend_lost, _built(2, b"abc"), results, send)
            await trio.testing.wait_all_tasks_blocked()
            assert (resender.waiting_messages, resender.waiting_bytes) == (2, 6)
            connected.set()
        assert results == ["psb0", "psb1"] and resender.waiting_messages == 0

    trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))
