"""Every queue and buffer has a bound, and hitting it gives a clear status."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import clients
import clients.pending
import mrs.group.link_session
import mrs.group.outbound
from mrs.model import DeliveryMode, Status, Uma
from tests.client_helpers import silent_server
from tests.process.test_conformance import WAIT_S, start_mem_bus


async def test_the_client_refuses_a_request_beyond_its_in_flight_bound(monkeypatch) -> None:
    """Requests awaiting an answer are bounded: one more is QuotaExceeded (EXCEEDQUOTA)
    at once, and nothing of the earlier ones is disturbed."""
    monkeypatch.setattr(clients.pending, "CLIENT_REQUESTS_IN_FLIGHT_MAX", 3)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(silent_server)
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


async def _puts_at_once(sender, count: int, mode: DeliveryMode) -> list:
    """`count` puts sent together (one frame burst), their PSBs by index."""
    psbs: list = [None] * count

    async def put(index: int) -> None:
        psbs[index] = await sender.put(b"%02d" % index, target="2.10", delivery=mode, uma=Uma.DISC)

    async with trio.open_nursery() as nursery:
        for index in range(count):
            nursery.start_soon(put, index)
    return psbs


@pytest.mark.parametrize("mode", [DeliveryMode.WF_MEM, DeliveryMode.WF_DQF], ids=str)
async def test_a_link_holds_a_bounded_queue_of_direct_messages(
    make_mem_linked, monkeypatch, mode
) -> None:
    """Messages for a link beyond LINK_DIRECT_MESSAGES_MAX do not wait in memory: a
    nonrecoverable one takes its UMA (MRS_RES_EXH), a recoverable one goes to the SAF
    (SAF_FORCED) and still arrives, in order."""
    monkeypatch.setattr(mrs.group.outbound, "LINK_DIRECT_MESSAGES_MAX", 1)
    monkeypatch.setattr(mrs.group.link_session, "LINK_DIRECT_MESSAGES_MAX", 1)
    count = 20
    bus = await start_mem_bus(make_mem_linked)
    try:
        async with bus.connect(1, "OUT") as sender:
            psbs = await _puts_at_once(sender, count, mode)
        statuses = {psb.delivery_status for psb in psbs}
        if mode.recoverable:
            assert statuses <= {Status.STORED, Status.SAF_FORCED}
            assert Status.SAF_FORCED in statuses, statuses
            expected = count
        else:
            assert statuses <= {Status.ENQUEUED, Status.UNATTACHEDQ, Status.MRS_RES_EXH}
            assert Status.MRS_RES_EXH in statuses, statuses
            refused = [psb for psb in psbs if psb.delivery_status == Status.MRS_RES_EXH]
            assert {psb.uma_status for psb in refused} == {Status.DISC_SUCCESS}
            expected = count - len(refused)
        bodies = []
        async with bus.connect(2, "IN") as receiver:
            for _ in range(expected):
                message = await receiver.get(timeout=WAIT_S)
                bodies.append(message.body)
                if message.needs_confirm:
                    await receiver.confirm(message.seq)
        if mode.recoverable:  # all of them, in the order they were stored (seq order)
            seq_of = {b"%02d" % index: psb.seq for index, psb in enumerate(psbs)}
            assert sorted(bodies) == sorted(seq_of)
            assert [seq_of[body] for body in bodies] == sorted(seq_of.values())
        else:
            assert len(bodies) == expected
    finally:
        bus.stop()
