"""Probes of the client library when a call is cut off (a close racing calls of
other tasks, a lost connection), against a real server process: what a call raises
must say what may have happened on the group."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from clients import ConnectionLost, connect
from tests.client_helpers import FixedPortServer, take_all


@pytest.fixture
def server(tmp_path) -> Iterator[FixedPortServer]:
    """A group with the standard queues, stopped (SIGSTOP) and continued by the test."""
    server = FixedPortServer(tmp_path / "bus")
    server.start()
    yield server
    os.kill(server.process.process.pid, signal.SIGCONT)  # never left stopped
    server.stop()


@pytest.mark.parametrize("call", ["confirm", "confirm_many"])
async def test_a_confirm_cut_off_by_the_close_says_it_may_still_be_recorded(
    server, call: str
) -> None:
    """A task confirms while another leaves the `connect` block: the confirm was
    written, the close answered it before the group did. The group then records it
    (it reads the Confirm before the close), so the message never comes again.
    Before, the confirm raised ConnectionLost "client closed" and the docs said the
    message was still unconfirmed and would come again POSSDUPL: an application that
    undid its work on that waited for a message the group had forgotten. Now it says
    the confirm may still be recorded, as a put's PutOutcomeUnknown does
    (`confirm_many`: that error in the seq's place)."""
    async with connect(server.address, "SENDER") as sender:
        await sender.put(b"order 17", "ANYORDER")
    pid = server.process.process.pid
    lost: list[object] = []
    async with (
        trio.open_nursery() as nursery,
        connect(server.address, "ANYORDER", reconnect=None) as q,
    ):
        message = await q.get(timeout=5)
        os.kill(pid, signal.SIGSTOP)  # the group reads the Confirm after the close

        async def confirm() -> None:
            try:
                if call == "confirm":
                    await q.confirm(message.seq)
                else:
                    lost.extend(await q.confirm_many([message.seq]))
            except ConnectionLost as error:
                lost.append(error)
            finally:
                os.kill(pid, signal.SIGCONT)

        nursery.start_soon(confirm)
        await trio.testing.wait_all_tasks_blocked()  # the Confirm is written
    assert len(lost) == 1
    assert isinstance(lost[0], ConnectionLost)
    assert "before the confirm was answered; the confirm may still be recorded" in str(lost[0])
    async with connect(server.address, "ANYORDER") as q:
        assert await take_all(q) == []  # it was recorded: it does not come again
