"""A commit hands its answers to the clients' sockets itself (issue 17's paced latency):
every durable put is answered, and the server keeps no session for it afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from clients import DeliveryMode, Status, Uma, connect
from mrs.config.bus import load_config
from mrs.server.group_server import GroupServer
from sim.processes import write_single_group_config
from tests.conftest import STANDARD_QUEUES


@pytest.mark.parametrize("writer_kind", ["inline", "thread"])
async def test_durable_puts_are_answered_and_no_session_is_kept_for_them(
    tmp_path: Path, writer_kind: str
) -> None:
    bus = load_config(write_single_group_config(tmp_path, queues=STANDARD_QUEUES))
    server = GroupServer(bus, bus.group(1), writer_kind=writer_kind)
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(server.run)
        async with connect(f"{host}:{port}", "SENDER") as client:
            answers: list = []

            async def put_one(index: int) -> None:
                body = b"%d" % index
                answers.append(
                    await client.put(body, "ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
                )

            with trio.fail_after(30):
                async with trio.open_nursery() as puts:
                    for index in range(200):
                        puts.start_soon(put_one, index)
            assert len(answers) == 200
            assert {(psb.status, psb.delivery_status) for psb in answers} == {
                (Status.SUCCESS, Status.STORED)
            }
            if writer_kind == "inline":
                assert server.answered_sessions == set()  # emptied by every commit
            else:  # the writer thread's commits do not run on the loop: nothing to track
                assert server.answered_sessions is None
        nursery.cancel_scope.cancel()


async def test_a_closed_session_is_not_kept_for_a_commit_that_never_comes(tmp_path: Path) -> None:
    """Answers made without a commit (nonrecoverable puts) also put a session in the
    set; a connection that closes leaves it at once, so connection churn with no
    journaled traffic cannot grow it."""
    bus = load_config(write_single_group_config(tmp_path, queues=STANDARD_QUEUES))
    server = GroupServer(bus, bus.group(1))
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(server.run)
        for index in range(3):
            async with connect(f"{host}:{port}", "SENDER") as client:
                psb = await client.put(b"%d" % index, "ANYORDER", delivery=DeliveryMode.NN_MEM)
                assert psb.status == Status.SUCCESS
        with trio.fail_after(10):
            while server.sessions:  # each server task notices its client closed
                await trio.testing.wait_all_tasks_blocked()
        assert server.answered_sessions == set()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("delivery", "uma"), [(DeliveryMode.NN_MEM, Uma.DISC), (DeliveryMode.AK_DQF, Uma.DLJ)]
)
async def test_an_answer_that_waits_for_no_commit_leaves_with_the_read_that_asked(
    tmp_path: Path, delivery: DeliveryMode, uma: Uma
) -> None:
    """A put whose answer needs no commit (NN, and an AK put's immediate answer) is on
    the socket when the receive pass that read it ends, not queued for the session's
    send loop, whose turn may come after a commit: an AK producer's next get then
    reaches the server while that commit runs."""
    bus = load_config(write_single_group_config(tmp_path, queues=STANDARD_QUEUES))
    server = GroupServer(bus, bus.group(1))
    left_queued: list[int] = []
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(server.run)
        assert server.connections is not None  # made with the group, before the first one
        receive_once = server.connections.receive_once

        async def receive_once_then_look(session) -> bool:
            open_ = await receive_once(session)
            left_queued.append(session.outbox_bytes)
            return open_

        server.connections.receive_once = receive_once_then_look  # type: ignore[method-assign]
        async with connect(f"{host}:{port}", "SENDER") as client:
            for index in range(20):
                psb = await client.put(b"%d" % index, "ANYORDER", delivery=delivery, uma=uma)
                assert psb.status == Status.SUCCESS
        assert len(left_queued) >= 20 and set(left_queued) == {0}
        nursery.cancel_scope.cancel()
