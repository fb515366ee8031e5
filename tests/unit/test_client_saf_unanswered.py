"""A drained record the server never answers does not stall the client SAF journal:
past the put's reply deadline the client drops the connection and drains again from
the oldest record, under the same idempotency keys (so a server that did store it
answers the copy as a duplicate)."""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing

from clients import DeliveryMode, Status, connect
from clients.saf_drain import IDEMPOTENCY_HEADER
from mrs import protocol as wire
from sim.ports import free_port
from tests.client_helpers import FAST_RECONNECT as FAST
from tests.client_helpers import answer_handshake
from tests.conftest import run_under_autojump_clock

PUT_TIMEOUT_S = 0.5


def run_jumping_when_idle(fn, clock=None, instruments=()):
    """Virtual time jumps only after 250 ms of real quiet: the TCP handshakes, attaches
    and puts of the test happen in real time, the reply deadline costs none."""
    clock = trio.testing.MockClock(autojump_threshold=0.25)
    return run_under_autojump_clock(fn, clock=clock, instruments=instruments)


class DeafServer:
    """Answers the handshake, every attach and every Ping, and never a Put: a group
    alive on the wire that lost the puts. Records each connection's put keys, and
    sets `resent` once a second connection has sent `records` puts."""

    def __init__(self, records: int) -> None:
        self.records = records
        self.keys_by_connection: list[list[str]] = []
        self.resent = trio.Event()

    async def serve(self, stream: trio.SocketStream) -> None:
        connection = wire.Connection("server")
        keys: list[str] = []
        self.keys_by_connection.append(keys)
        while data := await stream.receive_some(65536):
            connection.receive_data(data)
            for event in connection.events():
                if await answer_handshake(stream, connection, event):
                    continue
                if isinstance(event, wire.Ping):
                    await stream.send_all(connection.send(wire.Pong(event.nonce)))
                elif isinstance(event, wire.Put):
                    keys.append(event.headers[IDEMPOTENCY_HEADER])
                    if keys is not self.keys_by_connection[0] and len(keys) == self.records:
                        self.resent.set()


@pytest.mark.trio(run=run_jumping_when_idle)
async def test_a_drained_put_never_answered_restarts_the_drain(tmp_path) -> None:
    journal = tmp_path / "client.saf"
    nobody = f"127.0.0.1:{free_port()}"
    async with connect(nobody, "SENDER", saf_journal=journal, reconnect=FAST) as client:
        for index in range(3):
            psb = await client.put(
                b"m%d" % index, "1.10", delivery=DeliveryMode.WF_DQF, timeout=PUT_TIMEOUT_S
            )
            assert psb.status == Status.JOURNAL_ON

    deaf = DeafServer(records=3)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, deaf.serve, 0, host="127.0.0.1"))
        address = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        async with connect(address, "SENDER", saf_journal=journal, reconnect=FAST) as client:
            assert client.journal_backlog == 3
            with trio.fail_after(60):  # virtual seconds: the deadline is 0.5 + 5 s
                await deaf.resent.wait()
            assert client.journal_status == Status.JOURNAL_ON
            assert client.journal_backlog == 3, "an unanswered record left the journal"
            assert client.reconnects >= 1
        nursery.cancel_scope.cancel()
    first, second = deaf.keys_by_connection[:2]
    assert len(first) == 3
    assert second == first, "the drain did not start again from the oldest, same keys"
