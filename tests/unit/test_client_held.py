"""The client's held messages are bounded: a message that came for a get its caller
gave up is held for the next get, and a get is refused EXCEEDQUOTA at once (nothing
sent) while held messages, gets waiting and gets given up reach HELD_MESSAGES_MAX.
A scripted server over a real TCP socket decides when each answer comes."""

from __future__ import annotations

import pytest
import trio

import clients
import clients.pending
from mrs import protocol as wire
from mrs.model import DeliveryMode, Status

HELD_MAX = 3


class ScriptedServer:
    """Answers the handshake and the attach; records Gets and CancelGets and answers
    them only when the test says so."""

    def __init__(self) -> None:
        self.gets: list[int] = []
        self.cancels: list[int] = []
        self.batch_counts: list[int] = []
        self.batches: list[wire.GetBatch] = []
        self.singles: list[wire.Get] = []
        self.heard = trio.Event()
        self.stream: trio.SocketStream | None = None
        self.connection = wire.Connection("server")

    async def serve(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        while data := await stream.receive_some(65536):
            self.connection.receive_data(data)
            for event in self.connection.events():
                if isinstance(event, wire.Hello):
                    await self.send(wire.Welcome(wire.PROTOCOL_VERSION, 1, "one", 0))
                elif isinstance(event, wire.Attach):
                    await self.send(wire.Attached(event.request_id, 1, 10))
                elif isinstance(event, wire.Get):
                    self.gets.append(event.request_id)
                    self.singles.append(event)
                elif isinstance(event, wire.GetBatch):
                    self.gets.append(event.request_id)
                    self.batch_counts.append(event.count_max)
                    self.batches.append(event)
                elif isinstance(event, wire.CancelGet):
                    self.cancels.append(event.request_id)
                self.heard.set()

    async def send(self, event: object) -> None:
        await self.stream.send_all(self.connection.send(event))

    async def fail(self, request_id: int, status: Status, message: str) -> None:
        await self.send(wire.Failure(request_id, int(status), message))

    async def deliver(self, request_id: int, body: bytes, count: int = 0) -> None:
        """A Delivery, or (count > 0) a DeliveryBatch of `count` messages."""
        deliveries = [
            wire.Delivery(
                request_id,
                request_id * 100 + index,
                body,
                "1.11",
                "1.10",
                0,
                0,
                0,
                int(DeliveryMode.WF_MEM),
                int(Status.ENQUEUED),
                b"",
                1,
                None,
            )  # fmt: skip
            for index in range(max(count, 1))
        ]
        if count:
            await self.send(wire.DeliveryBatch(request_id, deliveries))
        else:
            await self.send(deliveries[0])

    async def until(self, done) -> None:
        with trio.fail_after(10):
            while not done():
                self.heard = trio.Event()
                await self.heard.wait()


async def _start(nursery: trio.Nursery, server: ScriptedServer) -> int:
    listeners = await nursery.start(trio.serve_tcp, server.serve, 0)
    return listeners[0].socket.getsockname()[1]


async def test_gets_beyond_the_bound_are_refused_and_held_ones_served(monkeypatch) -> None:
    monkeypatch.setattr(clients.pending, "HELD_MESSAGES_MAX", HELD_MAX)
    server = ScriptedServer()
    async with trio.open_nursery() as nursery:
        port = await _start(nursery, server)
        async with clients.connect(f"127.0.0.1:{port}", queue="1.10", heartbeat_s=None) as client:
            # Gets given up: the server has not answered the batch asked for them.
            with trio.CancelScope() as giving_up:
                async with trio.open_nursery() as waiting:
                    for _ in range(HELD_MAX):
                        waiting.start_soon(client.get)
                    await server.until(lambda: len(server.batches) == 1)
                    giving_up.cancel()
            await server.until(lambda: len(server.cancels) == 1)
            assert server.batch_counts == [HELD_MAX]  # the three shared one GetBatch
            with pytest.raises(clients.QuotaExceeded) as refused:
                await client.get(timeout=0)
            assert refused.value.status is Status.EXCEEDQUOTA
            assert f"at most {HELD_MAX}" in refused.value.message
            with pytest.raises(clients.QuotaExceeded):
                await client.get()  # a waiting get counts against the same bound
            assert len(server.gets) == 1  # the refused gets sent nothing

            # The messages were already on their way: each comes to the next get.
            await server.deliver(server.cancels[0], b"held", count=HELD_MAX)
            with trio.fail_after(10):  # the client reads them in its own task
                while len(client._requests.held) < HELD_MAX:
                    await trio.sleep(0.005)
            seqs = [(await client.get(timeout=0)).seq for _ in range(HELD_MAX)]
            assert seqs == [server.gets[0] * 100 + index for index in range(HELD_MAX)]
            assert len(server.gets) == 1  # served from what was held

            # Below the bound again: a get goes to the server.
            got: list[bytes] = []

            async def get_one() -> None:
                got.append((await client.get()).body)

            async with trio.open_nursery() as waiting:
                waiting.start_soon(get_one)
                await server.until(lambda: len(server.gets) == 2)
                await server.deliver(server.gets[-1], b"fresh", count=1)
            assert got == [b"fresh"]
        nursery.cancel_scope.cancel()


async def test_a_batch_get_reserves_what_it_may_bring(monkeypatch) -> None:
    """A get_many waiting or given up may bring all it asked for: it counts that many,
    and another asks for fewer when the room left for held messages is short."""
    monkeypatch.setattr(clients.pending, "HELD_MESSAGES_MAX", 10)
    server = ScriptedServer()
    async with trio.open_nursery() as nursery:
        port = await _start(nursery, server)
        async with clients.connect(f"127.0.0.1:{port}", queue="1.10", heartbeat_s=None) as client:
            async with trio.open_nursery() as asking:
                asking.start_soon(client.get_many, 7)  # up to 7 may come
                await server.until(lambda: len(server.batches) == 1)
                asking.start_soon(client.get_many, 7)  # only 3 left: it asks for 3
                await server.until(lambda: len(server.batches) == 2)
                asking.cancel_scope.cancel()  # both given up: up to 10 may still come
            await server.until(lambda: len(server.cancels) == 2)
            assert server.batch_counts == [7, 3]
            with pytest.raises(clients.QuotaExceeded):
                await client.get_many(1, timeout=0)
            for request_id, count in zip(server.cancels, server.batch_counts, strict=True):
                await server.deliver(request_id, b"late", count=count)
            with trio.fail_after(10):
                while len(client._requests.held) < 10:
                    await trio.sleep(0.005)
            assert len(await client.get_many(100, timeout=0)) == 10  # all held, served
        nursery.cancel_scope.cancel()
