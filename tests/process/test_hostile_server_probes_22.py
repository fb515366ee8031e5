"""Probes of the client library against a server that is not a healthy MRS group: a
real TCP peer (tests.client_helpers.scripted_server) speaking the framing of
docs/protocol.md whose answers have the right types and the wrong values. Whatever it
sends, a caller must meet one `MrsError` line (never a Python ValueError or an
ExceptionGroup out of `connect`), no call may wait for ever, and nothing the server
did not say may be reported as done (a confirm recorded, a get of at most N)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import trio

from clients import (
    ConnectionLost,
    DeliveryMode,
    MrsError,
    ProtocolFailure,
    Status,
    connect,
    connect_sync,
)
from clients.saf_drain import CLIENT_SAF_SEQ_HEADER
from mrs import protocol as wire
from sim.ports import free_port
from tests.client_helpers import FAST_RECONNECT, answer_handshake, scripted_server

WAIT_S = 10.0
"""Every probe's bound: a call that has not ended by then hangs."""


def delivery(request_id: int, seq: int, source: str = "1.10", mode: int = 26) -> wire.Delivery:
    """A Delivery of the right types; `source` and `mode` may be values no group sends."""
    return wire.Delivery(
        request_id, seq, b"m%d" % seq, source, "1.10", 0, 0, 0, mode, 0, b"", 0, None
    )


def on(kind: type, answer: Callable[[object], list]) -> Callable[[object], list]:
    """A scripted server's answers: `answer(request)` for each request of `kind`."""
    return lambda event: answer(event) if isinstance(event, kind) else []


async def run_against(answers: Callable[[object], list], probe: Callable, **options) -> object:
    """Connect to a scripted server giving `answers` and run `probe(client)`, async."""
    async with trio.open_nursery() as nursery:
        port = await nursery.start(scripted_server, answers)
        with trio.fail_after(WAIT_S):
            async with connect(f"127.0.0.1:{port}", "1.10", reconnect=None, **options) as q:
                result = await probe(q)
        nursery.cancel_scope.cancel()
    return result


async def run_sync_against(answers: Callable[[object], list], probe: Callable) -> object:
    """The same with the blocking client, in a worker thread (its trio runs in its own)."""

    def blocking(address: str) -> object:
        with connect_sync(address, "1.10", reconnect=None) as q:
            return probe(q)

    async with trio.open_nursery() as nursery:
        port = await nursery.start(scripted_server, answers)
        with trio.fail_after(WAIT_S):
            result = await trio.to_thread.run_sync(blocking, f"127.0.0.1:{port}")
        nursery.cancel_scope.cancel()
    return result


async def raised(call: Callable) -> MrsError:
    """The MrsError `call()` raises (any other exception fails the test)."""
    with pytest.raises(MrsError) as error:
        await call()
    return error.value


# ------------------------------------------------------------ deliveries that do not decode
UNDECODABLE = {"source": {"source": "nonsense"}, "mode": {"mode": 99}}


@pytest.mark.parametrize("field", sorted(UNDECODABLE))
async def test_a_delivery_that_does_not_decode_is_a_protocol_error_not_a_value_error(
    field: str,
) -> None:
    """A Delivery whose source is no `G.Q`, or whose delivery mode is no mode. Before: a
    poll raised a bare ValueError, and a waiting get (the pool's batch, decoded in the
    receive loop) ended the whole `connect` block with an ExceptionGroup holding the
    ValueError, and the blocking client's get said "client closed". Now the poll raises
    PROTOCOL_ERROR naming the message, the waiting get ConnectionLost saying why, and
    the client closes cleanly."""
    bad = UNDECODABLE[field]

    def answers(event: object) -> list:
        if isinstance(event, wire.Get):
            return [delivery(event.request_id, 7, **bad)]
        if isinstance(event, wire.GetBatch):
            return [wire.DeliveryBatch(event.request_id, [delivery(event.request_id, 7, **bad)])]
        return []

    async def poll_then_wait(q) -> tuple[MrsError, MrsError]:
        polled = await raised(lambda: q.get(timeout=0))
        waited = await raised(lambda: q.get(timeout=5))
        return polled, waited

    polled, waited = await run_against(answers, poll_then_wait)
    assert isinstance(polled, ProtocolFailure)
    assert "message 7 that does not decode" in str(polled)
    assert isinstance(waited, ConnectionLost)
    assert "message 7 that does not decode" in str(waited)

    def blocking(q) -> tuple[str, str]:
        outcomes = []
        for timeout_s in (0, 5):
            with pytest.raises(MrsError) as error:
                q.get(timeout=timeout_s)
            outcomes.append(str(error.value))
        return outcomes[0], outcomes[1]

    for line in await run_sync_against(answers, blocking):
        assert "message 7 that does not decode" in line


# ------------------------------------------------------------ more than asked
async def test_get_many_never_returns_more_than_it_asked_for_and_loses_none() -> None:
    """A GetBatch for 2 answered with 5 messages. Before: get_many(2) returned all 5.
    Now it returns 2 (the call's promise) and the other 3 go to the next gets, in order,
    without another request."""
    asked: list[int] = []

    def five(event: wire.GetBatch) -> list:
        asked.append(event.count_max)
        return [
            wire.DeliveryBatch(
                event.request_id, [delivery(event.request_id, s) for s in range(1, 6)]
            )
        ]

    async def probe(q) -> tuple[list[int], list[int]]:
        first = [message.seq for message in await q.get_many(2, timeout=1)]
        rest = [message.seq for message in await q.get_many(10, timeout=0)]
        return first, rest

    first, rest = await run_against(on(wire.GetBatch, five), probe)
    assert first == [1, 2]
    assert rest == [3, 4, 5]
    assert asked == [2], "the held messages were asked for again"


# ------------------------------------------------------------ confirms the server did not record
CONFIRMED_WRONG = {
    "another message": lambda request: wire.Confirmed(request.request_id, request.seq + 1, 1),
    "a failure status": lambda request: wire.Confirmed(request.request_id, request.seq, -9999),
}


@pytest.mark.parametrize("answer", sorted(CONFIRMED_WRONG))
async def test_a_confirmed_that_does_not_say_recorded_is_not_a_recorded_confirm(
    answer: str,
) -> None:
    """A confirm answered with the Confirmed of another seq, or with a failure status.
    Before: confirm returned and confirm_many answered None, i.e. recorded, though the
    group never said so (the message then comes again, or the wrong one went). Now
    confirm raises, confirm_many returns the error in its place; async and blocking."""
    answers = on(wire.Confirm, lambda request: [CONFIRMED_WRONG[answer](request)])

    async def probe(q) -> tuple[MrsError, list]:
        return await raised(lambda: q.confirm(5)), await q.confirm_many([5, 6])

    error, results = await run_against(answers, probe)
    assert "confirm of message 5" in str(error)
    assert all(isinstance(result, MrsError) for result in results), results

    def blocking(q) -> str:
        with pytest.raises(MrsError) as refused:
            q.confirm(5)
        return str(refused.value)

    assert "confirm of message 5" in await run_sync_against(answers, blocking)


# ------------------------------------------------------------ answers of the wrong size
async def test_pending_answered_with_the_wrong_count_of_counts_is_a_protocol_error() -> None:
    """`pending` of two queues answered with one count. Before: the short list was
    returned as if it answered both (and with messages held, an IndexError)."""
    answers = on(wire.ShowPending, lambda request: [wire.PendingCounts(request.request_id, [4])])
    error = await run_against(answers, lambda q: raised(lambda: q.pending(["1.10", "1.11"])))
    assert error.status == Status.PROTOCOL_ERROR
    assert "pending for 2 queues with 1 counts" in str(error)


STUCK_PAGES = {
    "no progress": lambda request: wire.JournalPage(
        request.request_id, [], [], request.after_seq, False
    ),
    "going back": lambda request: wire.JournalPage(
        request.request_id, [], [], 10 if request.after_seq < 10 else 5, False
    ),
}
"""Pages that are not the last: one that stays at the seq asked after, and one that
goes from 10 back to 5 (its records would be read again)."""


@pytest.mark.parametrize("page", sorted(STUCK_PAGES))
async def test_a_journal_page_that_does_not_move_on_is_refused_not_asked_for_ever(
    page: str,
) -> None:
    """`open_journal` pages whose `last_seq` does not pass the seq asked after, and are
    not the last. Before: the reader asked again and again, `async for` never ended
    (and the blocking client's `for` held its caller for ever). Now PROTOCOL_ERROR."""
    answers = on(wire.ReadJournal, lambda request: [STUCK_PAGES[page](request)])

    async def read(q) -> MrsError:
        async def all_records() -> list:
            async with q.open_journal("pcj") as reader:
                return [record async for record in reader]

        return await raised(all_records)

    error = await run_against(answers, read)
    assert error.status == Status.PROTOCOL_ERROR
    assert "a page must move on" in str(error)

    def blocking(q) -> str:
        with pytest.raises(MrsError) as refused:
            list(q.open_journal("pcj"))
        return str(refused.value)

    assert "a page must move on" in await run_sync_against(answers, blocking)


# ------------------------------------------------------------ a Welcome with odd values
async def odd_welcome_server(task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Welcomes with message_bytes_max -5, then answers attach and every put STORED."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")

    async def serve(stream: trio.SocketStream) -> None:
        connection = wire.Connection("server")
        while data := await stream.receive_some(65536):
            connection.receive_data(data)
            for event in connection.events():
                puts = event.puts if isinstance(event, wire.PutBatch) else [event]
                for one in puts:
                    if isinstance(one, wire.Hello):
                        reply = wire.Welcome(wire.PROTOCOL_VERSION, 1, "one", -5)
                    elif isinstance(one, wire.Attach):
                        reply = wire.Attached(one.request_id, 1, 10)
                    elif isinstance(one, wire.Put):
                        reply = wire.PutDone(one.request_id, 1, int(Status.STORED), 3, 0)
                    else:
                        continue
                    await stream.send_all(connection.send(reply))

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, serve, listeners)
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.sleep_forever()


async def test_a_negative_message_bytes_max_in_the_welcome_refuses_no_put() -> None:
    """Before: every put raised MSGTOOBIG ("body of 1 bytes exceeds the group's
    message_bytes_max -5") without being sent. A limit below 1 states none."""
    async with trio.open_nursery() as nursery:
        port = await nursery.start(odd_welcome_server)
        with trio.fail_after(WAIT_S):
            async with connect(f"127.0.0.1:{port}", "1.10", reconnect=None) as q:
                assert q.message_bytes_max == 0
                psb = await q.put(b"x", "1.10")
        nursery.cancel_scope.cancel()
    assert psb.delivery_status == Status.STORED


# ------------------------------------------------------------ the client SAF journal's drain
class WrongKindOnce:
    """Answers the handshake and every Ping; on its first connection the drained put of
    the oldest record gets a Confirmed (an answer of another kind) and the others their
    PutDone; on later connections every put its PutDone."""

    def __init__(self) -> None:
        self.connections = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        first = self.connections == 1
        connection = wire.Connection("server")
        with contextlib.suppress(trio.BrokenResourceError):  # the client drops it
            while data := await stream.receive_some(65536):
                connection.receive_data(data)
                for event in connection.events():
                    if not await answer_handshake(stream, connection, event):
                        await stream.send_all(self._answers(connection, event, first))

    @staticmethod
    def _answers(connection: wire.Connection, event: object, first: bool) -> bytes:
        if isinstance(event, wire.Ping):
            return connection.send(wire.Pong(event.nonce))
        frames = b""
        for put in event.puts if isinstance(event, wire.PutBatch) else [event]:
            if isinstance(put, wire.Put):
                local_seq = put.headers[CLIENT_SAF_SEQ_HEADER]
                answer: object = wire.PutDone(put.request_id, 1, int(Status.STORED), local_seq, 0)
                if first and local_seq == 1:
                    answer = wire.Confirmed(put.request_id, 1, 1)
                frames += connection.send(answer)
        return frames


async def test_a_drained_put_answered_with_another_kind_is_drained_again_first(
    tmp_path: Path,
) -> None:
    """The client SAF journal's oldest record answered with a Confirmed. Before: the
    record was left and the drain went on, so the newer records were reported drained
    (stored) before it, and it was sent again on the same connection a second later,
    behind them: out of the FIFO order the journal promises (against this server, again
    and again: LINK_UP never came). Now the connection is dropped as for a refusal that
    passes, and the drain starts again from the oldest: drained in order."""
    journal = tmp_path / "client.saf"
    async with connect(f"127.0.0.1:{free_port()}", "SENDER", saf_journal=journal) as client:
        for index in range(3):
            psb = await client.put(b"m%d" % index, "1.10", delivery=DeliveryMode.WF_DQF)
            assert psb.status == Status.JOURNAL_ON
    server = WrongKindOnce()
    drained: list[int] = []
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, server.serve, 0, host="127.0.0.1"))
        address = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        with trio.fail_after(WAIT_S):
            async with connect(
                address, "SENDER", saf_journal=journal, reconnect=FAST_RECONNECT
            ) as client:
                client.add_journal_listener(
                    lambda event: (
                        drained.append(event.local_seq) if event.kind == "drained" else None
                    )
                )
                await client.wait_journal_status(Status.LINK_UP)
        nursery.cancel_scope.cancel()
    assert drained == [1, 2, 3]
    assert server.connections >= 2
