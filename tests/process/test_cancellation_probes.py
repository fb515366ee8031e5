"""Probes of the client library under cancellation and concurrent use, against real
server processes (or, for a server that stops reading, a real TCP peer that does):
what a cancelled or interrupted call leaves behind must be neither a lost message,
nor a second delivery without the POSSDUPL mark, nor memory that grows without bound.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
from collections.abc import Iterator

import pytest
import trio

from clients import (
    DeliveryMode,
    MrsError,
    PutItem,
    QueueBusy,
    Status,
    Uma,
    connect,
    connect_sync,
    put_once,
)
from clients.saf_drain import IDEMPOTENCY_HEADER
from mrs import protocol as wire
from mrs.limits import HELD_MESSAGES_MAX, OUTBOX_BYTES_HIGH, PUT_BATCH_BYTES_MAX
from tests.client_helpers import (
    FAST_RECONNECT,
    FixedPortServer,
    answer_handshake,
    scripted_server,
    take_all,
)
from tests.process.test_confirm_order_probes import RawClient

BODY_BYTES = 32 * 1024
PUTS_BEYOND_THE_BOUND = 4 * OUTBOX_BYTES_HIGH // BODY_BYTES
"""Enough cancelled puts to queue four times the outbox bound if nothing held them."""


@pytest.fixture
def server(tmp_path) -> Iterator[FixedPortServer]:
    """A group on a port that survives a SIGKILL and restart."""
    server = FixedPortServer(tmp_path / "bus")
    server.start()
    yield server
    server.stop()


async def stalled_server(task_status=trio.TASK_STATUS_IGNORED) -> None:
    """A peer that answers the handshake and the attach, then never reads again (a
    stopped process, a host gone until the heartbeats notice): what the client
    writes piles up on its side."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")

    async def serve(stream: trio.SocketStream) -> None:
        connection = wire.Connection("server")
        attached = False
        while not attached and (data := await stream.receive_some(65536)):
            connection.receive_data(data)
            for event in connection.events():
                await answer_handshake(stream, connection, event)
                attached = attached or isinstance(event, wire.Attach)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, serve, listeners)
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.sleep_forever()


def unwritten_bytes(client) -> int:
    """What the client holds for the server and has not written (its outbox and the
    write under way): the memory a server that does not read makes it keep."""
    return client._requests.link.unsent_bytes


# ------------------------------------------------------------ a server that stops reading
async def test_cancelled_puts_to_a_server_that_stops_reading_stay_bounded() -> None:
    """A put given up (its cancel scope) stays queued to be written, as it may take
    effect; before, nothing bounded those: 5,000 cancelled 64 KiB puts held 320 MB in
    the client's outbox. Now a request waits (cancellable, within its own timeout)
    while OUTBOX_BYTES_HIGH are unwritten, and one cancelled there was never sent."""
    async with trio.open_nursery() as nursery:
        port = await nursery.start(stalled_server)
        async with connect(f"127.0.0.1:{port}", "1.10", reconnect=None, heartbeat_s=None) as q:
            for number in range(PUTS_BEYOND_THE_BOUND):
                with trio.move_on_after(0):  # given up at its first wait
                    await q.put(b"%08d" % number + bytes(BODY_BYTES), "1.10")
            assert unwritten_bytes(q) <= OUTBOX_BYTES_HIGH + 2 * BODY_BYTES
            with trio.move_on_after(0):
                items = [PutItem(bytes(BODY_BYTES), "1.10") for _ in range(PUTS_BEYOND_THE_BOUND)]
                await q.put_many(items)
            assert unwritten_bytes(q) <= OUTBOX_BYTES_HIGH + 2 * PUT_BATCH_BYTES_MAX
        nursery.cancel_scope.cancel()


# ------------------------------------------------------------ a server that lies
WRONG_ANSWER = {
    wire.Put: lambda rid: wire.Confirmed(rid, 1, 0),
    wire.Confirm: lambda rid: wire.StatusReply(rid, {}),
    wire.ShowPending: lambda rid: wire.StatusReply(rid, {}),
}
"""The lying server's answer to each request (anything else: a PutDone)."""


def lies(event: object) -> list:
    """A lying server's answers: every request answered with an answer of the wrong
    kind (a get with a PutDone, a put with a Confirmed)."""
    requests = event.puts if isinstance(event, wire.PutBatch) else [event]
    return [
        WRONG_ANSWER.get(type(request), lambda rid: wire.PutDone(rid, 0, 0, 1, 0))(request_id)
        for request in requests
        if (request_id := getattr(request, "request_id", None)) is not None  # not a Pong
    ]


async def test_answers_of_the_wrong_kind_raise_protocol_error_not_attribute_error() -> None:
    """A server that answers a request with another request's answer: before, the
    caller met a Python AttributeError (`'PutDone' object has no attribute 'body'`)
    and a waiting get was asked for again for ever; now each call raises PROTOCOL_ERROR
    naming the request and the answer, and the client goes on serving its caller."""
    async with trio.open_nursery() as nursery:
        port = await nursery.start(scripted_server, lies)
        async with connect(f"127.0.0.1:{port}", "1.10", reconnect=None) as q:
            calls = {
                "Put": lambda: q.put(b"x", "1.10"),
                "Get": lambda: q.get(timeout=0),
                "GetBatch": lambda: q.get(timeout=30),  # a waiting get: the pool's batch
                "Confirm": lambda: q.confirm(5),
                "ShowPending": lambda: q.pending(["1.10"]),
            }
            for request, call in calls.items():
                with pytest.raises(MrsError) as refused, trio.fail_after(10):
                    await call()
                assert refused.value.status == Status.PROTOCOL_ERROR
                assert f"answered {request} with" in refused.value.message
        nursery.cancel_scope.cancel()


# ------------------------------------------------------------ many tasks, one client
CANCEL_AFTER_S = (0, 1e-5, 1e-4, 1e-3, 0.01)


async def put_cancelled_at_random(q, keys: list[str], seed: int) -> set[str]:
    """WF puts under idempotency keys, each given up at a random moment; the keys
    whose put did not return SUCCESS (given up, or refused)."""
    rng = random.Random(seed)
    unsure = set()
    for key in keys:
        with trio.move_on_after(rng.choice(CANCEL_AFTER_S)) as scope:
            psb = await q.put(key.encode(), "ANYORDER", headers={IDEMPOTENCY_HEADER: key})
            if psb.status != Status.SUCCESS:
                unsure.add(key)
        if scope.cancelled_caught:
            unsure.add(key)
    return unsure


async def get_cancelled_at_random(q, seed: int, rounds: int) -> list[bytes]:
    """Gets, get_manys and confirms given up at random moments: the bodies handed to
    the caller (each confirmed, or its confirm given up: then confirmed again)."""
    rng = random.Random(seed)
    got: list[bytes] = []
    for _round in range(rounds):
        messages = []
        with trio.move_on_after(rng.choice(CANCEL_AFTER_S)):
            if rng.random() < 0.5:
                messages = [await q.get(timeout=0.05)]
            else:
                messages = await q.get_many(3, timeout=0.05)
        for message in messages:
            got.append(message.body)
            with trio.move_on_after(rng.choice(CANCEL_AFTER_S)) as scope:
                await q.confirm(message.seq)
            if scope.cancelled_caught:  # it may have been recorded: BADSEQ if it was
                with contextlib.suppress(MrsError):
                    await q.confirm(message.seq)
    return got


async def test_a_shared_client_under_random_cancellation_loses_and_repeats_nothing(
    server,
) -> None:
    """Eight tasks share one client, putting, getting and confirming, every call given
    up at a random moment; then each put given up is re-sent with `put_once` under its
    key. An independent consumer and the gets together see every message once, and
    the shared client still works: nothing cancelled kept a request slot or room."""
    keys = [f"k{number}" for number in range(400)]
    got: list[bytes] = []
    async with connect(server.address, "ANYORDER") as q:
        unsure: set[str] = set()

        async def putter(lane: int) -> None:
            unsure.update(await put_cancelled_at_random(q, keys[lane::4], lane))

        async def getter(lane: int) -> None:
            got.extend(await get_cancelled_at_random(q, 100 + lane, 150))

        async with trio.open_nursery() as nursery:
            for lane in range(4):
                nursery.start_soon(putter, lane)
                nursery.start_soon(getter, lane)
        for key in sorted(unsure):
            await put_once(q, key.encode(), "ANYORDER", key)
        # No request left, no room kept by one: only messages a last get given up
        # brought may be held (the next get's; at close they come back, POSSDUPL).
        requests = q._requests
        assert len(requests.pending) == 0
        assert requests.get_room() == HELD_MESSAGES_MAX - len(requests.held)
    async with connect(server.address, "ANYORDER") as consumer:
        got.extend(message.body for message in await take_all(consumer))
    assert sorted(got) == sorted(key.encode() for key in keys)


# ------------------------------------------------------------ the blocking client
class Interrupt(KeyboardInterrupt):
    """Ctrl-C, raised by this test's own signal handler."""


def _raise_interrupt(*_: object) -> None:
    raise Interrupt


def test_an_interrupted_sync_get_hands_out_no_stale_copy_after_a_reconnect(server) -> None:
    """A blocking get interrupted after its message came keeps the message for the next
    get. If the connection is lost before that get, a recoverable message comes again
    from the server, marked POSSDUPL; before, the client first handed out its old copy
    marked CONFIRMREQ (a second delivery without the mark) whose confirm failed
    BADSEQ, then the POSSDUPL one."""
    previous = signal.signal(signal.SIGUSR1, _raise_interrupt)
    try:
        with connect_sync(server.address, "ORDERS", reconnect=FAST_RECONNECT) as q:
            q.put(b"only", "ORDERS", delivery=DeliveryMode.WF_DQF)
            get = q._client.get

            async def get_then_interrupt(*args: object) -> object:
                message = await get(*args)
                os.kill(os.getpid(), signal.SIGUSR1)  # lands as the message is handed over
                return message

            q._client.get = get_then_interrupt
            with pytest.raises(Interrupt):
                q.get(timeout=10)
            q._client.get = get
            server.kill()
            server.start()
            q.wait_connected(timeout=30)
            again = q.get(timeout=10)
            assert (again.body, again.delivery_status) == (b"only", Status.POSSDUPL)
            again.confirm()
            with pytest.raises(MrsError) as nothing_more:
                q.get(timeout=0)
            assert nothing_more.value.status == Status.NOMOREMSG
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_connect_sync_interrupted_while_it_attaches_leaves_the_queue_free(server) -> None:
    """Ctrl-C while `connect_sync` dials and attaches: before, the background thread
    went on, attached and held the queue for the rest of the process, with no client
    object left to close it, so every later attach (a REPL's retry) met QUEUE_BUSY.
    Now the interrupted connect is given up in that thread and the queue is free."""
    previous = signal.signal(signal.SIGUSR1, _raise_interrupt)
    try:

        async def open_then_interrupt(host: str, port: int) -> trio.SocketStream:
            stream = await trio.open_tcp_stream(host, port)
            os.kill(os.getpid(), signal.SIGUSR1)  # Ctrl-C in the middle of the attach
            return stream

        with pytest.raises(Interrupt):
            connect_sync(server.address, "ORDERS", open_stream=open_then_interrupt)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    for thread in threading.enumerate():  # the interrupted client's, if it still runs
        if thread.name == "mrs-client":
            thread.join(timeout=5)  # before: it ran on, and had attached by then
    with connect_sync(server.address, "ORDERS", reconnect=None) as again:
        assert again.put(b"attached", "ORDERS").status == Status.SUCCESS


class _CancelledAfterAttach(trio.abc.HalfCloseableStream):
    """A TCP stream that cancels `scope` once the server answered the Attach (the
    second write of a handshake, after Hello), before the client reads the answer:
    the caller gives up while the server holds the queue for it."""

    def __init__(self, inner: trio.SocketStream, scope: trio.CancelScope) -> None:
        self.inner, self.scope, self.writes = inner, scope, 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)
        self.writes += 1

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = await self.inner.receive_some(max_bytes)
        if self.writes == 2 and not self.scope.cancel_called:  # the answer to Attach
            self.scope.cancel()
            await trio.lowlevel.checkpoint()  # raises Cancelled: the answer is not read
        return data

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_connect_cancelled_while_it_attaches_leaves_the_queue_free(server) -> None:
    """A `connect` given up with its Attach on the wire: the server may have attached
    the queue. Before, the client reset the connection and a program that tried again
    at once met QUEUE_BUSY (the server had not yet noticed the reset); now it closes
    as a clean close does, and the server detaches the queue before it answers."""
    for _attempt in range(5):
        with trio.CancelScope() as scope:

            async def open_cancelled(host: str, port: int) -> trio.abc.Stream:
                return _CancelledAfterAttach(await trio.open_tcp_stream(host, port), scope)

            async with connect(server.address, "ORDERS", open_stream=open_cancelled):
                pytest.fail("the connect was cancelled")
        assert scope.cancelled_caught
        async with connect(server.address, "ORDERS", reconnect=None) as again:
            assert (await again.put(b"attached", "ORDERS")).status == Status.SUCCESS


async def test_a_nonrecoverable_message_that_crossed_a_given_up_get_is_given_back_at_close(
    make_bus,
) -> None:
    """A get given up just as its answer brought a nonrecoverable message leaves that
    message held by the client, which names it in its GiveBack when it closes before
    another get takes it. The server took back only read-ahead messages: this one was
    lost at the clean close. Frames written by hand, so the answer always comes before
    the give-back (the race a cancelled get leaves to chance)."""
    bus = make_bus()
    async with connect(bus.address, queue="SENDER") as sender:
        await sender.put(b"memory", "ORDERS", delivery=DeliveryMode.NN_MEM, uma=Uma.DISC)
    raw = await RawClient.attached(bus.address, "ORDERS")
    await raw.send(wire.Get(2, 5000))
    [delivery] = await raw.events(1)
    assert isinstance(delivery, wire.Delivery) and delivery.body == b"memory"
    await raw.send(wire.GiveBack([delivery.seq]))
    await raw.stream.aclose()
    message = None
    with trio.fail_after(10):
        while message is None:  # until the server has seen the raw connection close
            try:
                async with connect(bus.address, queue="ORDERS", reconnect=None) as receiver:
                    message = await receiver.get(timeout=10)
            except* QueueBusy:
                await trio.sleep(0.01)
    assert (message.seq, message.body) == (delivery.seq, b"memory")
