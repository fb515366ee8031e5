"""Crash tests of the client SAF journal with real processes and SIGKILL: the client
killed while journaled and while draining, the server killed mid-drain. Nothing is
lost, nothing arrives twice, FIFO order holds, LINK_UP is seen, and puts made during
a drain arrive after the backlog."""

from __future__ import annotations

import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, MrsError, Status, connect
from clients.saf_drain import CLIENT_SAF_SEQ_HEADER
from tests.client_helpers import FAST_RECONNECT as FAST
from tests.client_helpers import FixedPortServer

CHILD = Path(__file__).resolve().parents[1] / "saf_client_process.py"


@pytest.fixture
def server(tmp_path):
    server = FixedPortServer(tmp_path / "bus")
    yield server
    server.stop()


class Child:
    """The client process of tests/saf_client_process.py, read line by line."""

    def __init__(
        self, address: str, journal: Path, count: int, freeze_at: int | None = None
    ) -> None:
        freeze = [] if freeze_at is None else [str(freeze_at)]
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), address, str(journal), str(count), *freeze],
            stdin=subprocess.PIPE,  # a frozen child blocks reading it until killed
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def wait_for(self, prefix: str) -> str:
        while True:
            line = self.process.stdout.readline().decode()
            if not line:
                raise AssertionError(f"client exited: {self.process.stderr.read().decode()}")
            if line.startswith(prefix):
                return line

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.process.stdin.close()


async def receive_all(address: str, workers: int = 32) -> list:
    """Every message on ANYORDER, got and confirmed by many tasks at once (pipelined,
    so thousands take seconds, not minutes), in the order the server stored them."""
    messages = []
    async with connect(address, "ANYORDER") as receiver:

        async def work() -> None:
            while True:
                try:
                    message = await receiver.get(timeout=3)
                except MrsError as error:
                    assert error.status == Status.TIMEOUT, error
                    return
                messages.append(message)
                await message.confirm()

        async with trio.open_nursery() as nursery:
            for _ in range(workers):
                nursery.start_soon(work)
    return sorted(messages, key=lambda message: message.seq)


def check_fifo_exactly_once(messages: list, old: int, new: int = 0) -> None:
    """Each message once; the journaled ones in client-journal order; the new ones
    after every journaled one."""
    bodies = [message.body for message in messages]
    assert len(bodies) == len(set(bodies)), "a message arrived twice"
    expected = {b"old%d" % i for i in range(old)} | {b"new%d" % i for i in range(new)}
    assert set(bodies) == expected, "a message was lost"
    journaled = [m.headers[CLIENT_SAF_SEQ_HEADER] for m in messages if m.body.startswith(b"old")]
    assert journaled == sorted(journaled), "the drain broke FIFO order"
    last_old = max(i for i, body in enumerate(bodies) if body.startswith(b"old"))
    assert all(body.startswith(b"old") for body in bodies[: last_old + 1])


async def put_many(client, prefix: bytes, count: int) -> None:
    """Journal `count` puts at once (one group commit instead of one fsync each)."""
    async with trio.open_nursery() as nursery:
        for index in range(count):
            nursery.start_soon(
                partial(client.put, prefix + b"%d" % index, "1.11", delivery=DeliveryMode.NN_DQF)
            )


async def test_client_killed_while_journaled_then_a_new_client_drains(server, tmp_path) -> None:
    journal = tmp_path / "client.saf"
    child = Child(server.address, journal, 200)
    await trio.to_thread.run_sync(child.wait_for, "journaled")
    child.kill()  # SIGKILL with 200 records journaled and the server down

    statuses = []
    async with connect(server.address, "SENDER", saf_journal=journal, reconnect=FAST) as client:
        client.add_journal_listener(lambda event: statuses.append(event.status))
        assert client.journal_backlog == 200
        assert client.journal_status == Status.JOURNAL_ON
        server.start()
        new = [
            await client.put(b"new%d" % i, target="1.11", delivery=DeliveryMode.WF_DQF)
            for i in range(10)
        ]
        with trio.fail_after(30):
            await client.wait_journal_status(Status.LINK_UP)
    assert statuses[-1] == Status.LINK_UP
    assert any(psb.status == Status.JOURNAL_ON for psb in new)
    check_fifo_exactly_once(await receive_all(server.address), 200, 10)


async def test_server_killed_mid_drain(server, tmp_path) -> None:
    count = 2000
    drained = [0]
    enough = trio.Event()

    def progress(event) -> None:
        if event.kind == "drained":
            drained[0] += 1
            if drained[0] >= 300:
                enough.set()

    async with connect(
        server.address, "SENDER", saf_journal=tmp_path / "j", reconnect=FAST, connect_timeout_s=2
    ) as client:
        client.add_journal_listener(progress)
        await put_many(client, b"old", count)
        server.start()
        with trio.fail_after(30):
            await enough.wait()
        server.kill()  # mid-drain: some stored, some in flight, most still journaled
        assert client.journal_backlog > 0, "the drain finished before the kill"
        server.start()
        with trio.fail_after(60):
            await client.wait_journal_status(Status.LINK_UP)
        assert client.journal_backlog == 0
    check_fifo_exactly_once(await receive_all(server.address), count)


async def test_client_killed_mid_drain(server, tmp_path) -> None:
    journal = tmp_path / "client.saf"
    count = 2000
    child = Child(server.address, journal, count, freeze_at=1000)
    await trio.to_thread.run_sync(child.wait_for, "journaled")
    server.start()
    await trio.to_thread.run_sync(child.wait_for, "frozen 1000")
    child.kill()  # SIGKILL mid-drain: records stored but not yet deleted are re-sent

    async with connect(server.address, "SENDER", saf_journal=journal, reconnect=FAST) as client:
        # stored records whose delete was not yet committed are still here: re-sent
        assert 0 < client.journal_backlog <= count
        with trio.fail_after(60):
            await client.wait_journal_status(Status.LINK_UP)
    check_fifo_exactly_once(await receive_all(server.address), count)
