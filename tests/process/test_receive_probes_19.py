"""Probes of the client library's receive side against real `mrs serve` processes:
gets given up while their answer was on its way, implicit confirmation, pending
counts, batches, selective gets and the connect that follows the active. Each test
asserts what a receiving application depends on: nothing acknowledged is lost, and
nothing is delivered twice without POSSDUPL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio
import trio.testing

from clients import BadParameter, DeliveryMode, Status, Uma, connect
from mrs.core.selection import by_correlation_id
from sim.bus import LinkedBus
from tests.client_helpers import FAST_RECONNECT, take_all
from tests.conftest import STANDARD_QUEUES


class GatedStream(trio.abc.HalfCloseableStream):
    """A client's TCP stream whose received bytes are held back while `gate` is shut:
    what the server sent is read off the socket at once (`arrived` is set then) but
    handed to the client only when the gate opens -- an answer still on the wire."""

    def __init__(self, inner: trio.SocketStream) -> None:
        self.inner = inner
        self.gate: trio.Event | None = None
        self.arrived = trio.Event()

    def shut(self) -> None:
        """From now on, what comes is held until `open`."""
        self.gate = trio.Event()
        self.arrived = trio.Event()

    def open(self) -> None:
        if self.gate is not None:
            self.gate.set()
        self.gate = None

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = await self.inner.receive_some(max_bytes)
        gate = self.gate
        if gate is not None and data:
            self.arrived.set()
            await gate.wait()
        return data

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()


def gated_opener(streams: list[GatedStream]):
    """An `open_stream` for connect: every stream it opens is gated and listed."""

    async def open_stream(host: str, port: int) -> trio.abc.Stream:
        stream = GatedStream(await trio.open_tcp_stream(host, port))
        streams.append(stream)
        return stream

    return open_stream


async def test_an_implicit_get_after_a_given_up_one_does_not_confirm_its_crossed_message(
    make_bus,
) -> None:
    """On a queue that confirms implicitly, a get given up while its Delivery was on the
    wire leaves that message held by the client, for the next get. Before, the next
    get sent its Get at once: the server took it as the implicit confirm of the
    crossed message, which the application had not seen yet, then the client handed
    that message out; the application died before handling it and it was gone
    (acknowledged, lost). Now the next get waits for the given-up get's answer, so
    it is served from what the client holds and sends no confirming Get."""
    bus = make_bus()
    streams: list[GatedStream] = []
    async with connect(bus.address, "SENDER") as sender:
        await sender.put(b"m0", "IMPLICIT", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
        async with connect(
            bus.address, "IMPLICIT", open_stream=gated_opener(streams), heartbeat_s=None
        ) as receiver:
            assert (await receiver.get(timeout=10)).body == b"m0"
            [stream] = streams
            await give_up_a_get_as_its_answer_comes(stream, sender, receiver)
            got: list[bytes] = []
            async with trio.open_nursery() as nursery:

                async def next_get() -> None:  # the application's next get, in turn
                    got.append((await receiver.get(timeout=10)).body)

                nursery.start_soon(next_get)
                await trio.testing.wait_all_tasks_blocked()
                stream.open()
                await sender.put(b"later", "IMPLICIT", delivery=DeliveryMode.WF_DQF)
            assert got == [b"crossed"]
            # the application dies here, before it handled "crossed"
        async with connect(bus.address, "IMPLICIT", reconnect=None) as again:
            messages = await take_all(again)
    bodies = [(message.body, message.delivery_status) for message in messages]
    assert bodies[0] == (b"crossed", Status.POSSDUPL), bodies
    assert [body for body, _ in bodies] == [b"crossed", b"later"]


async def give_up_a_get_as_its_answer_comes(
    stream: GatedStream, sender, receiver, queue: str = "IMPLICIT", **put_options
) -> None:
    """A get of `receiver` (on `queue`) given up while its Delivery of the recoverable
    message "crossed" (put with `put_options`) is on the client's socket, not yet
    read; `stream` is left shut."""
    stream.shut()
    async with trio.open_nursery() as nursery:
        given_up = trio.CancelScope()

        async def get_given_up() -> None:
            with given_up:
                await receiver.get(timeout=30)

        nursery.start_soon(get_given_up)
        await sender.put(b"crossed", queue, delivery=DeliveryMode.WF_DQF, **put_options)
        await stream.arrived.wait()  # its Delivery is on the client's socket
        given_up.cancel()


async def crossed_and_held(streams: list[GatedStream], sender, receiver) -> None:
    """Leave `receiver` (on IMPLICIT, gated) holding the recoverable message "crossed",
    which came for a get given up while its Delivery was on the wire."""
    await sender.put(b"m0", "IMPLICIT", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
    assert (await receiver.get(timeout=10)).body == b"m0"
    [stream] = streams
    await give_up_a_get_as_its_answer_comes(stream, sender, receiver)
    stream.open()
    await receiver._requests.cancelled_gets_answered(None)  # the given-up get's answer
    assert [message.body for message in receiver.held] == [b"crossed"]


async def test_a_selective_implicit_get_does_not_confirm_a_held_message_it_passes_over(
    make_bus,
) -> None:
    """The same crossed message, held, and then a selective get that does not match it:
    before, its Get went to the server and confirmed the held message implicitly, so
    an application that died before its next plain get lost it. Now such a get is
    refused with one line (BADPARAM: take the held ones first) and nothing is
    confirmed; on a queue that confirms explicitly it is served as before."""
    bus = make_bus()
    streams: list[GatedStream] = []
    async with connect(bus.address, "SENDER") as sender:
        await sender.put(b"wanted", "ANYORDER", delivery=DeliveryMode.WF_DQF, correlation_id=b"w")
        async with connect(
            bus.address, "IMPLICIT", open_stream=gated_opener(streams), heartbeat_s=None
        ) as receiver:
            await crossed_and_held(streams, sender, receiver)
            await sender.put(
                b"wanted", "IMPLICIT", delivery=DeliveryMode.WF_DQF, correlation_id=b"w"
            )
            with pytest.raises(BadParameter, match="take them with a plain get first"):
                await receiver.get(timeout=10, select=by_correlation_id(b"w"))
            assert [message.body for message in receiver.held] == [b"crossed"]
            # the application dies here, before it took "crossed"
        async with connect(bus.address, "IMPLICIT", reconnect=None) as again:
            messages = await take_all(again)
        async with connect(bus.address, "ANYORDER", reconnect=None) as explicit:
            selected = await explicit.get(timeout=10, select=by_correlation_id(b"w"))
            assert selected.body == b"wanted"
    seen = [(message.body, message.delivery_status) for message in messages]
    assert seen == [(b"crossed", Status.POSSDUPL), (b"wanted", Status.CONFIRMREQ)]


@pytest.fixture
def two_groups(tmp_path) -> Iterator[LinkedBus]:
    """Groups 1 and 2 of one bus, each with the standard queues, linked directly."""
    bus = LinkedBus(tmp_path / "bus", queues=STANDARD_QUEUES, direct=True)
    bus.start()
    yield bus
    bus.stop()


async def test_a_client_given_instances_never_moves_to_another_group(two_groups) -> None:
    """A client given a replicated group's instance addresses, one of which is in fact
    another group's server (a wrong bus file, a reused port): when its group goes
    away it must not reconnect and attach to the same-named queue of the other
    group. Before, it did so silently: a consumer read another group's queue and
    a re-sent put was stored by a group that never had its idempotency key. Now
    that server is passed over, as an instance that is not up."""
    one, two = two_groups.address(1), two_groups.address(2)
    port_two = int(two.rpartition(":")[2])
    dials_to_two = 0
    decided = trio.Event()

    async def open_stream(host: str, port: int) -> trio.abc.Stream:
        nonlocal dials_to_two
        if port == port_two:
            dials_to_two += 1
            if dials_to_two == 2:  # tried and passed over, then tried again
                decided.set()
        return await trio.open_tcp_stream(host, port)

    async with connect(
        [one, two], "ORDERS", reconnect=FAST_RECONNECT, open_stream=open_stream
    ) as client:
        assert client.group_id == 1
        two_groups.processes[1].kill()
        async with trio.open_nursery() as nursery:

            async def reconnected() -> None:
                await client.wait_connected()
                decided.set()

            with trio.fail_after(10):
                while client.connected:  # the kill is noticed
                    await trio.sleep(0.01)
                nursery.start_soon(reconnected)
                await decided.wait()
            nursery.cancel_scope.cancel()
        assert (client.group_id, client.connected) == (1, False)


async def test_a_timeout_past_the_wire_bound_waits_as_long_as_the_bound(bus) -> None:
    """`put(timeout=1e16)` went out as 10**19 ms and was refused "timeout_ms must be
    >= 0": a positive value, told it was negative. Timeouts past int64 milliseconds
    (292 million years) are now that long: the put is stored, the get answers."""
    async with bus.connect(queue="SENDER") as sender, bus.connect(queue="ANYORDER") as receiver:
        psb = await sender.put(
            b"patient", target="ANYORDER", delivery=DeliveryMode.WF_DQF, timeout=1e16
        )
        assert psb.delivery_status == Status.STORED
        got = await receiver.get(timeout=1e16)
        assert got.body == b"patient"
        await receiver.confirm(got.seq)
