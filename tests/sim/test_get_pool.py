"""Gets waiting at the same time share GetBatch requests (clients.get_pool), and each
caller still sees what a Get would give it: messages oldest caller first, its own
timeout, a refusal that concerns it, the single-Get path where the server refuses
batches, ConnectionLost when the connection goes. A scripted server over a real TCP
socket decides when each answer comes (tests/unit/test_client_held.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

import clients
from mrs.limits import GET_POOL_BATCH_MAX
from mrs.model import Status
from tests.unit.test_client_held import ScriptedServer, _start


@asynccontextmanager
async def _scripted() -> AsyncIterator[tuple[ScriptedServer, clients.Client]]:
    """A client attached to 1.10 of a scripted server (tests/unit/test_client_held.py)."""
    server = ScriptedServer()
    async with trio.open_nursery() as nursery:
        port = await _start(nursery, server)
        async with clients.connect(f"127.0.0.1:{port}", queue="1.10", heartbeat_s=None) as client:
            yield server, client
        nursery.cancel_scope.cancel()


class _Got(list):
    """What the gets of a test returned (a Message or the MrsError raised), in the
    order they returned; `until(n)` waits for the n-th."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = trio.Event()

    def append(self, item: object) -> None:
        super().append(item)
        self._changed.set()
        self._changed = trio.Event()

    async def until(self, count: int) -> None:
        with trio.fail_after(10):
            while len(self) < count:
                await self._changed.wait()


async def _get_into(client, results: _Got, *, timeout: float | None = None) -> None:
    try:
        results.append(await client.get(timeout=timeout))
    except clients.MrsError as error:
        results.append(error)


def _start_gets(nursery, client, got: _Got, count: int) -> None:
    """`count` gets waiting at once, each answer (message or error) into `got`."""
    for _ in range(count):
        nursery.start_soon(_get_into, client, got)


async def test_waiting_gets_share_one_batch_and_the_oldest_caller_is_served_first() -> None:
    async with _scripted() as (server, client):
        together: _Got = _Got()
        async with trio.open_nursery() as waiting:
            _start_gets(waiting, client, together, 5)
            await server.until(lambda: len(server.batches) == 1)
            first = server.batches[0]
            assert (first.count_max, first.timeout_ms, first.wait_at_cap) == (5, -1, False)
            assert server.singles == []
            await server.deliver(first.request_id, b"m", count=2)
            # Two served; the three still waiting are asked for again, as gets the
            # server had parked (they wait at the unconfirmed cap).
            await server.until(lambda: len(server.batches) == 2)
            again = server.batches[1]
            assert (again.count_max, again.wait_at_cap) == (3, True)
            await server.deliver(again.request_id, b"m", count=3)
        seqs = sorted(message.seq for message in together)
        assert seqs == [first.request_id * 100 + i for i in range(2)] + [
            again.request_id * 100 + i for i in range(3)
        ]

        # One caller after another: the first batch's message goes to the oldest.
        order: _Got = _Got()
        async with trio.open_nursery() as waiting:
            waiting.start_soon(_get_into, client, order)
            await server.until(lambda: len(server.batches) == 3)
            await trio.testing.wait_all_tasks_blocked()
            older = server.batches[2]
            waiting.start_soon(_get_into, client, order)
            await server.until(lambda: len(server.batches) == 4)
            newer = server.batches[3]
            await server.deliver(newer.request_id, b"to the oldest", count=1)
            await order.until(1)
            # The newer caller is still covered by the older batch: nothing asked.
            assert len(server.batches) == 4
            await server.deliver(older.request_id, b"to the next", count=1)
        assert [message.body for message in order] == [b"to the oldest", b"to the next"]


async def test_many_waiting_gets_are_asked_for_in_batches_of_a_bounded_size() -> None:
    async with _scripted() as (server, client):
        got: _Got = _Got()
        async with trio.open_nursery() as waiting:
            _start_gets(waiting, client, got, GET_POOL_BATCH_MAX + 2)
            await server.until(lambda: len(server.batches) == 2)
            assert server.batch_counts == [GET_POOL_BATCH_MAX, 2]
            for batch in server.batches:
                await server.deliver(batch.request_id, b"m", count=batch.count_max)
        assert len(got) == GET_POOL_BATCH_MAX + 2
        assert all(isinstance(message, clients.Message) for message in got)


async def test_each_caller_keeps_its_own_timeout(mock_clock) -> None:
    """Under a MockClock that moves only when told (pytest-trio's `mock_clock`)."""
    async with _scripted() as (server, client):
        short: _Got = _Got()
        patient: _Got = _Got()
        async with trio.open_nursery() as waiting:
            waiting.start_soon(lambda: _get_into(client, short, timeout=0.05))
            waiting.start_soon(_get_into, client, patient)
            await server.until(lambda: len(server.batches) == 1)
            batch = server.batches[0]
            assert batch.count_max == 2
            assert 0 < batch.timeout_ms <= 50  # as long as the earliest caller may wait
            mock_clock.jump(0.06)  # the short caller's time passes on the server
            await server.fail(batch.request_id, Status.TIMEOUT, "no message in 0.05 s")
            await server.until(lambda: len(server.batches) == 2)
            again = server.batches[1]
            assert (again.count_max, again.timeout_ms, again.wait_at_cap) == (1, -1, True)
            await server.deliver(again.request_id, b"late", count=1)
        assert isinstance(short[0], clients.MrsTimeout)
        assert short[0].status is Status.TIMEOUT
        assert [message.body for message in patient] == [b"late"]


async def test_a_refused_batch_refuses_only_the_callers_it_was_asked_for() -> None:
    async with _scripted() as (server, client):
        parked: _Got = _Got()
        fresh: _Got = _Got()
        async with trio.open_nursery() as waiting:
            waiting.start_soon(_get_into, client, parked)
            waiting.start_soon(_get_into, client, parked)
            await server.until(lambda: len(server.batches) == 1)
            await server.deliver(server.batches[0].request_id, b"one", count=1)
            await server.until(lambda: len(server.batches) == 2)  # the other, again
            await trio.testing.wait_all_tasks_blocked()
            waiting.start_soon(_get_into, client, fresh)
            await server.until(lambda: len(server.batches) == 3)
            assert [b.wait_at_cap for b in server.batches[1:]] == [True, False]
            await server.fail(
                server.batches[2].request_id, Status.EXCMAXUNCONF, "1 messages unconfirmed"
            )
            await fresh.until(1)
            await server.deliver(server.batches[1].request_id, b"two", count=1)
        assert isinstance(fresh[0], clients.TooManyUnconfirmed)
        assert [message.body for message in parked] == [b"one", b"two"]


async def test_a_queue_served_one_get_at_a_time_takes_single_gets() -> None:
    async with _scripted() as (server, client):
        got: _Got = _Got()
        async with trio.open_nursery() as waiting:
            waiting.start_soon(_get_into, client, got)
            await server.until(lambda: len(server.batches) == 1)
            await server.fail(
                server.batches[0].request_id, Status.BADPARAM, "queue 1.10 confirms implicitly"
            )
            await server.until(lambda: len(server.singles) == 1)
            await server.deliver(server.singles[0].request_id, b"single")
        assert [message.body for message in got] == [b"single"]
        async with trio.open_nursery() as waiting:  # and from then on
            waiting.start_soon(_get_into, client, got)
            await server.until(lambda: len(server.singles) == 2)
            await server.deliver(server.singles[1].request_id, b"single again")
        assert len(server.batches) == 1


async def test_waiting_callers_raise_connection_lost_when_the_server_goes() -> None:
    async with _scripted() as (server, client):
        got: _Got = _Got()
        async with trio.open_nursery() as waiting:
            _start_gets(waiting, client, got, 3)
            await server.until(lambda: len(server.batches) == 1)
            await server.stream.send_eof()  # the server goes away
        assert len(got) == 3
        assert all(isinstance(error, clients.ConnectionLost) for error in got)
        with pytest.raises(clients.ConnectionLost):
            await client.get()


CAPPED = """
[[group.queue]]
id = 10
name = "ORDERS"
confirm = "explicit-out-of-order"
unconfirmed_max = 5
[[group.queue]]
id = 13
name = "SENDER"
"""


async def test_fifty_lanes_at_a_cap_of_five_take_every_message_once(make_mem_bus) -> None:
    """The pool against the server's own code: 50 tasks looping get -> confirm on a
    queue that lets 5 messages wait for their confirm. A get that arrives at the cap
    is refused (TooManyUnconfirmed, as a lone Get would be) and the lane asks again;
    every message is delivered exactly once, none marked POSSDUPL."""
    bus = await make_mem_bus(queues=CAPPED)
    messages_count = 120
    async with bus.connect(queue="SENDER") as sender, bus.connect(queue="ORDERS") as receiver:
        for number in range(messages_count):
            psb = await sender.put(
                number.to_bytes(4, "big"),
                target="ORDERS",
                delivery=clients.DeliveryMode.WF_DQF,
                uma=clients.Uma.DISC,
            )
            assert psb.delivery_status == Status.STORED
        bodies: list[bytes] = []
        refusals: list[Status] = []

        async def lane() -> None:
            while len(bodies) < messages_count:
                try:
                    message = await receiver.get(timeout=5)
                except clients.TooManyUnconfirmed as refused:
                    refusals.append(refused.status)
                    await trio.sleep(0.001)  # an application backs off (autojump clock)
                    continue
                except clients.MrsTimeout:
                    continue
                assert message.delivery_status == Status.CONFIRMREQ
                bodies.append(message.body)
                await receiver.confirm(message.seq)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for _ in range(50):
                    nursery.start_soon(lane)
        assert sorted(bodies) == [number.to_bytes(4, "big") for number in range(messages_count)]
        assert set(refusals) <= {Status.EXCMAXUNCONF}
        status = await receiver.status()
        assert status["dqf_messages"] == 0


async def test_a_message_held_for_a_get_given_up_goes_to_a_get_already_waiting() -> None:
    async with _scripted() as (server, client):
        waiting_got: _Got = _Got()
        with trio.fail_after(10):
            async with trio.open_nursery() as waiting:
                waiting.start_soon(_get_into, client, waiting_got)
                await server.until(lambda: len(server.batches) == 1)
                poll = trio.CancelScope()

                async def give_up_a_poll() -> None:
                    with poll:
                        await client.get(timeout=0)

                waiting.start_soon(give_up_a_poll)
                await server.until(lambda: len(server.singles) == 1)
                poll.cancel()  # given up before its answer came
                await server.until(lambda: len(server.cancels) == 1)
                # Its message was already on its way: the waiting get takes it.
                await server.deliver(server.singles[0].request_id, b"crossed")
        assert [message.body for message in waiting_got] == [b"crossed"]
        assert len(client._requests.held) == 0
