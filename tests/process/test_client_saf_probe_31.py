"""Probes of the client SAF journal with real processes: a client SIGKILLed in the
middle of its drain, its journal reopened by a client attached to another queue.

What must hold: every put answered STORED reaches the group, and a copy the group
may have stored twice is marked POSSDUPL, never handed out twice unmarked.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from clients import Status, connect
from tests.client_helpers import FAST_RECONNECT, FixedPortServer
from tests.process.test_client_saf_crash import Child, receive_all

RECORDS = 100
FREEZE_AT = 20
"""The child freezes when this many records drained: the rest of its window was sent,
most of it stored by the group, none of it deleted from the journal."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FixedPortServer]:
    server = FixedPortServer(tmp_path / "bus")
    yield server
    server.stop()


async def test_a_journal_drained_from_another_queue_marks_its_possible_duplicates(
    server: FixedPortServer, tmp_path: Path
) -> None:
    """A client attached to SENDER journals 100 puts, starts draining them and is
    SIGKILLed with records the group stored but the journal still holds; the
    application comes back attached to SENDER2 on the same journal. The group's
    dedupe is per sender queue, so those records are stored again: each second copy
    must come POSSDUPL. Before, every one came twice, the second copy unmarked."""
    journal = tmp_path / "client.saf"
    child = Child(server.address, journal, RECORDS, freeze_at=FREEZE_AT)
    await trio.to_thread.run_sync(child.wait_for, "journaled")
    server.start()
    await trio.to_thread.run_sync(child.wait_for, "frozen")
    child.kill()

    async with connect(
        server.address, "SENDER2", saf_journal=journal, reconnect=FAST_RECONNECT
    ) as client:
        assert client.journal_backlog > RECORDS - FREEZE_AT - 1
        with trio.fail_after(30):
            await client.wait_journal_status(Status.LINK_UP)

    copies: dict[bytes, list] = defaultdict(list)
    for message in await receive_all(server.address):  # in the order stored
        copies[message.body].append(message)
    assert set(copies) == {b"old%d" % i for i in range(RECORDS)}, "a message was lost"
    twice = [body for body, messages in copies.items() if len(messages) > 1]
    assert twice, "the group stored nothing before the kill: the probe tested nothing"
    unmarked = [body for body in twice if not all(m.possible_duplicate for m in copies[body][1:])]
    assert not unmarked, f"delivered twice without POSSDUPL: {unmarked[:5]}"
