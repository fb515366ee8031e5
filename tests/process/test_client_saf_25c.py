"""The client SAF journal as an application that must not lose a message uses it, with
real processes, a real group and real filesystems: a journal whose owner forked a
worker and was then SIGKILLed, and a journal on a disk that fills up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from clients import (
    DeliveryMode,
    JournalFull,
    MrsError,
    Status,
    Uma,
    connect,
)
from tests.client_helpers import FAST_RECONNECT as FAST
from tests.client_helpers import FixedPortServer
from tests.disk_helpers import mounted_tmpfs

ROOT = Path(__file__).resolve().parents[2]

FORKING_OWNER = """
import os, sys
from clients import DeliveryMode, Reconnect, connect_sync
address, journal = sys.argv[1], sys.argv[2]
client = connect_sync(address, "SENDER", saf_journal=journal, connect_timeout_s=1,
                      reconnect=Reconnect(delay_s_initial=0.02, delay_s_max=0.2))
psb = client.put(b"kept", target="1.10", delivery=DeliveryMode.WF_DQF)
print("journaled", psb.status.name, flush=True)
if os.fork() == 0:  # a worker of the application's (multiprocessing, a pre-fork server)
    print("worker", os.getpid(), flush=True)
    sys.stdin.readline()
    os._exit(0)
sys.stdin.readline()
"""
"""A client process that journals one put (its server down), forks a worker that
lives on, and waits to be killed."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FixedPortServer]:
    """Configured, not started: the tests start it when they want it up."""
    server = FixedPortServer(tmp_path / "bus")
    yield server
    server.stop()


async def bodies_on(address: str, queue: str = "ORDERS") -> list[bytes]:
    """The bodies of every message on `queue`, each confirmed, in order."""
    bodies: list[bytes] = []
    async with connect(address, queue) as receiver:
        while True:
            try:
                message = await receiver.get(timeout=2.0)
            except MrsError as error:
                assert error.status == Status.TIMEOUT, error
                return bodies
            bodies.append(message.body)
            await message.confirm()


async def test_a_worker_forked_by_a_killed_owner_does_not_keep_its_journal(
    server: FixedPortServer, tmp_path: Path
) -> None:
    """The journal's owner forks a worker and is SIGKILLed; the worker lives on. The
    owner restarted opens its journal and drains it. Before, both flocks (the
    journal's and its store's) were shared with the worker through fork, and the
    restart was refused "in use by another process (pid <the dead owner>)"."""
    journal = tmp_path / "client.saf"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    owner = subprocess.Popen(
        [sys.executable, "-c", FORKING_OWNER, server.address, str(journal)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert owner.stdout is not None and owner.stdin is not None
    assert owner.stdout.readline().split() == [b"journaled", b"JOURNAL_ON"]
    worker = int(owner.stdout.readline().split()[1])
    try:
        owner.kill()  # SIGKILL: its one put is answered STORED and on disk
        owner.wait()
        os.kill(worker, 0)  # the worker lives on (ProcessLookupError if not)
        async with connect(
            server.address, "SENDER", saf_journal=journal, reconnect=FAST, connect_timeout_s=1
        ) as client:
            assert (client.journal_status, client.journal_backlog) == (Status.JOURNAL_ON, 1)
            server.start()
            with trio.fail_after(20):
                await client.wait_journal_status(Status.LINK_UP)
    finally:
        os.kill(worker, signal.SIGKILL)
        owner.stdin.close()
        owner.stdout.close()
    assert await bodies_on(server.address) == [b"kept"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    yield from mounted_tmpfs(tmp_path / "small-disk", "3m")


async def test_a_full_disk_is_a_full_journal_and_the_uma_applies(
    server: FixedPortServer, small_disk: Path
) -> None:
    """The journal's disk fills up (the caps far away): a put gets JOURNAL_FULL and
    its UMA applies, as at a cap and as the group does with a full device
    (DISC/DISCL discard, the others raise JournalFull); every put answered STORED
    drains once the group is back, and the drain makes room again. Before, each put
    raised JournalFailed (JOURNAL_FAIL) whatever its UMA."""
    body = b"x" * (64 << 10)
    stored: list[bytes] = []
    async with connect(
        server.address, "SENDER", saf_journal=small_disk / "j", reconnect=FAST, connect_timeout_s=1
    ) as client:
        for index in range(100):
            try:
                await client.put(b"%03d" % index + body, target="1.10", uma=Uma.DLJ)
            except JournalFull as full:
                assert full.status == Status.JOURNAL_FULL
                assert "no space left" in str(full)
                break
            stored.append(b"%03d" % index + body)
        else:
            pytest.fail("the 3 MiB disk took 100 puts of 64 KiB")
        assert stored, "not one put fitted"
        for uma, done in ((Uma.DISC, Status.DISC_SUCCESS), (Uma.DISCL, Status.DISCL_SUCCESS)):
            psb = await client.put(body, target="1.10", delivery=DeliveryMode.WF_DQF, uma=uma)
            assert (psb.status, psb.delivery_status, psb.uma_status) == (
                Status.JOURNAL_ON,
                Status.JOURNAL_FULL,
                done,
            )
        server.start()
        with trio.fail_after(30):
            await client.wait_journal_status(Status.LINK_UP)
        assert await bodies_on(server.address) == stored
        server.kill()  # the drain's deletes made room: the journal takes puts again
        with trio.fail_after(10):
            await client.wait_journal_status(Status.JOURNAL_ON)
        again = await client.put(body, target="1.10", uma=Uma.DLJ)
        assert (again.status, again.delivery_status) == (Status.JOURNAL_ON, Status.STORED)
