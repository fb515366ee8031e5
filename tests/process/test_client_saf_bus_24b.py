"""Probes of the client SAF journal against the bus it belongs to, with real `mrs
serve` processes (or a scripted server on a real socket) and real LMDB journals.

1. A journal is tied to its group's journals (group id and incarnation, from the
   first Welcome): one written for group 1 of one bus is refused by group 1 of
   another bus (or a rebuilt group 1), whole and untouched, until re-homed on
   purpose. Before, it drained into whatever group the client reached next.
2. A record the group refuses every time with a status that says "try again"
   (SERVER_ERROR) is kept aside as refused after CLIENT_SAF_REFUSALS_MAX attempts
   over CLIENT_SAF_REFUSALS_SPAN_S. Before, it held every record behind it for ever.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, JournalFailed, MrsError, Status, connect, saf_drain
from mrs import protocol as wire
from sim.ports import free_port
from tests.client_helpers import FAST_RECONNECT as FAST
from tests.client_helpers import FixedPortServer, answer_handshake

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def two_buses(tmp_path):
    """Group 1 of two buses (two data directories: two incarnations), not started."""
    first = FixedPortServer(tmp_path / "first")
    other = FixedPortServer(tmp_path / "other")
    yield first, other
    first.stop()
    other.stop()


async def _bodies(address: str, queue: str, count: int) -> list[bytes]:
    """Up to `count` bodies waiting on `queue`, in order, each confirmed."""
    bodies: list[bytes] = []
    async with connect(address, queue) as receiver:
        for _ in range(count):
            try:
                message = await receiver.get(timeout=2)
            except MrsError:
                break
            bodies.append(message.body)
            await message.confirm()
    return bodies


async def _journal_three(address: str, journal: Path) -> None:
    """Three puts to 1.11 journaled while nothing answers at `address`."""
    async with connect(address, "1.10", saf_journal=journal, connect_timeout_s=1) as client:
        assert client.attach_status == Status.JOURNAL_ON
        for n in range(3):
            psb = await client.put(b"m%d" % n, "1.11", delivery=DeliveryMode.WF_DQF)
            assert (psb.status, psb.delivery_status) == (Status.JOURNAL_ON, Status.STORED)


async def test_a_journal_is_refused_by_another_bus_until_rehomed(two_buses, tmp_path) -> None:
    """A journal bound to bus one's group 1 holds three records; attached to group 1
    of another bus, connect raises JournalFailed naming both and the way out, and
    the other bus gets nothing; bus one back, they drain there. Journaled again and
    re-homed with `clients.saf_journal.rehome` (the operator's act, in a process of
    its own), they drain into the other."""
    first, other = two_buses
    journal = tmp_path / "client.saf"
    address = first.start()
    async with connect(address, "1.10", saf_journal=journal) as client:  # binds it
        assert (await client.put(b"bound", "1.11", delivery=DeliveryMode.WF_DQF)).seq
    first.stop()
    await _journal_three(address, journal)
    other_address = other.start()
    with pytest.raises(JournalFailed, match="other journals") as refused:
        async with connect(other_address, "1.10", saf_journal=journal):
            pass
    assert refused.value.status == Status.JOURNAL_FAIL
    assert "3 record(s) waiting" in str(refused.value)
    assert "saf_journal.rehome(" in str(refused.value)
    assert await _bodies(other_address, "1.11", 1) == []
    first.start()
    async with connect(address, "1.10", saf_journal=journal, reconnect=FAST) as client:
        with trio.fail_after(20):
            await client.wait_journal_status(Status.LINK_UP)
    assert await _bodies(address, "1.11", 5) == [b"bound", b"m0", b"m1", b"m2"]
    first.stop()
    await _journal_three(address, journal)
    script = f"from clients.saf_journal import rehome; print(rehome({str(journal)!r}))"
    rehomed = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False
    )  # the operator's act, in a process of its own (the application stopped)
    assert rehomed.returncode == 0, rehomed.stderr
    assert rehomed.stdout.startswith("group 1 (journals ")
    async with connect(other_address, "1.10", saf_journal=journal, reconnect=FAST) as client:
        with trio.fail_after(20):
            await client.wait_journal_status(Status.LINK_UP)
    assert await _bodies(other_address, "1.11", 4) == [b"m0", b"m1", b"m2"]


async def test_a_group_rebuilt_under_a_running_client_gets_nothing(two_buses, tmp_path) -> None:
    """The client's group dies with records journaled behind it, and another group 1
    (other journals) comes up at its address: the client does not drain into it; its
    journal status is JOURNAL_FAIL, a wait for LINK_UP raises the same one line, and
    the journal keeps its records."""
    first, other = two_buses
    config = other.process.config_path
    config.write_text(config.read_text().replace(str(other.port), str(first.port)))
    address = first.start()
    journal = tmp_path / "client.saf"
    async with connect(address, "1.10", saf_journal=journal, reconnect=FAST) as client:
        first.kill()
        with trio.fail_after(10):
            await client.wait_journal_status(Status.JOURNAL_ON)
        for n in range(2):
            psb = await client.put(b"r%d" % n, "1.11", delivery=DeliveryMode.WF_DQF)
            assert psb.status == Status.JOURNAL_ON
        other.port = first.port
        assert other.process.start() == address
        with trio.fail_after(20), pytest.raises(JournalFailed, match="other journals"):
            await client.wait_journal_status(Status.LINK_UP)
        assert client.journal_status == Status.JOURNAL_FAIL
        assert client.journal_backlog == 2
    assert await _bodies(address, "1.11", 1) == []


def _poisoned(event: object) -> list:
    """A group that fails on one record every time (SERVER_ERROR) and stores the rest."""
    if isinstance(event, wire.Put) and event.body == b"poison":
        return [wire.Failure(event.request_id, Status.SERVER_ERROR, "boom on this record")]
    if isinstance(event, wire.Put):
        stored = (Status.SUCCESS, Status.STORED, event.request_id, Status.NO_UMA)
        return [wire.PutDone(event.request_id, *stored)]
    return []


async def _poisoned_server(task_status=trio.TASK_STATUS_IGNORED) -> None:
    """`_poisoned` on a real socket, for every connection the client opens again
    after each refusal (it drops the connection, and a reset ends only that one)."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")

    async def serve(stream: trio.SocketStream) -> None:
        connection = wire.Connection("server")
        try:
            while data := await stream.receive_some(65536):
                connection.receive_data(data)
                for event in connection.events():
                    if not await answer_handshake(stream, connection, event):
                        for answer in _poisoned(event):
                            await stream.send_all(connection.send(answer))
        except trio.BrokenResourceError:
            return

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, serve, listeners)
        task_status.started(listeners[0].socket.getsockname()[1])


async def test_a_record_refused_server_error_every_time_is_kept_aside(tmp_path, monkeypatch):
    """The oldest record makes the group fail (SERVER_ERROR) each time it is sent.
    After CLIENT_SAF_REFUSALS_MAX refusals over CLIENT_SAF_REFUSALS_SPAN_S it is kept
    aside as refused, SERVER_ERROR named; the two records behind it drain (LINK_UP)."""
    monkeypatch.setattr(saf_drain, "CLIENT_SAF_REFUSALS_SPAN_S", 0.5)
    journal = tmp_path / "client.saf"
    dead = f"127.0.0.1:{free_port()}"
    async with connect(dead, "1.10", saf_journal=journal, connect_timeout_s=1) as client:
        for body in (b"poison", b"a", b"b"):
            await client.put(body, "1.11", delivery=DeliveryMode.WF_DQF)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_poisoned_server)
        events: list = []
        async with connect(
            f"127.0.0.1:{port}", "1.10", saf_journal=journal, reconnect=FAST
        ) as client:
            client.add_journal_listener(events.append)
            with trio.fail_after(20):
                await client.wait_journal_status(Status.LINK_UP)
            refused = client.refused_records()
            assert [(r.local_seq, r.body, r.status) for r in refused] == [
                (1, b"poison", Status.SERVER_ERROR)
            ]
            assert re.search(r"refused \d+ times in a row over \d", refused[0].message)
            assert "boom on this record" in refused[0].message
            drained = [e.local_seq for e in events if e.kind == "drained"]
            assert drained == [2, 3]
        nursery.cancel_scope.cancel()
