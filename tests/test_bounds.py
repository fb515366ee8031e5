"""Every queue and buffer has a bound, and hitting it gives a clear status."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import clients
import clients.connection
from mrs.model import Status
from tests.test_errors import _silent_server


async def test_the_client_refuses_a_request_beyond_its_in_flight_bound(monkeypatch) -> None:
    """Requests awaiting an answer are bounded: one more is QuotaExceeded (EXCEEDQUOTA)
    at once, and nothing of the earlier ones is disturbed."""
    monkeypatch.setattr(clients.connection, "CLIENT_REQUESTS_IN_FLIGHT_MAX", 3)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_silent_server)
        async with clients.connect(f"127.0.0.1:{port}", queue="1.10") as client:
            waiting = trio.Semaphore(0)

            async def wait_forever() -> None:
                with trio.CancelScope() as scope:
                    stops.append(scope)
                    waiting.release()
                    await client.status()  # the silent server never answers

            stops: list[trio.CancelScope] = []
            async with trio.open_nursery() as requests:
                for _ in range(3):
                    requests.start_soon(wait_forever)
                for _ in range(3):
                    await waiting.acquire()
                await trio.testing.wait_all_tasks_blocked()
                with pytest.raises(clients.QuotaExceeded) as refused:
                    await client.status()
                assert refused.value.status is Status.EXCEEDQUOTA
                assert "at most 3" in str(refused.value)
                for scope in stops:
                    scope.cancel()
            # the bound frees as the earlier requests end
            with trio.move_on_after(0.05):
                await client.status()
        nursery.cancel_scope.cancel()
