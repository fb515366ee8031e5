"""clients.resend: the keys a replicated group's client gives its recoverable puts, and
the re-send of a put a lost connection left unanswered, within its bounds. (The real
failover is tests/process/test_replication.py.)"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from clients.errors import ConnectionLost, PutOutcomeUnknown
from clients.resend import Resender
from clients.saf_drain import IDEMPOTENCY_HEADER
from mrs import limits
from mrs.model import Status


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
