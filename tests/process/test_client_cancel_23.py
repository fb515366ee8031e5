"""Probes of the client library under cancellation, timeouts and client death, as an
application developer using trio meets them: calls given up at awkward moments (a
get's answer on the wire as the client closes, a cancel scope around the whole
`connect` block, a journal read stopped part way), a server that takes the TCP
connection and never answers the handshake, and a client process SIGKILLed in the
middle of a `put_many` and started again. Against real `mrs serve` processes.

What must hold each time: nothing lost, nothing delivered twice without the mark,
and the client (or the next one) usable at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import pytest
import trio

from clients import (
    Client,
    ConnectionLost,
    DeliveryMode,
    Message,
    MrsError,
    PutItem,
    Status,
    Uma,
    connect,
    connect_sync,
    open_journal,
)
from mrs.core.selection import by_class_type
from tests.client_helpers import take_all
from tests.conftest import Bus

WAIT_S = 30.0
"""Generous: the machine is shared; an answer that never comes fails the test."""


@pytest.fixture
def bus(make_bus) -> Bus:
    """Group 1 with the standard queues, confirms journaled to the PCJ by default."""
    return make_bus(group_extra="pcj_default = true")


async def put_memory(address: str, queue: str, count: int) -> list[bytes]:
    """`count` nonrecoverable messages (NN_MEM, in memory, no confirm) on `queue`."""
    bodies = [b"memory %d" % number for number in range(count)]
    async with connect(address, "SENDER") as sender:
        for body in bodies:
            await sender.put(body, queue, delivery=DeliveryMode.NN_MEM, uma=Uma.DISC)
    return bodies


async def bodies_left(address: str, queue: str) -> list[bytes]:
    """What a new client attached to `queue` finds there now, in order."""
    async with connect(address, queue, reconnect=None) as receiver:
        return [message.body for message in await take_all(receiver)]


# ------------------------------------------------- a get given up just before the close
Getter = Callable[[Client], Awaitable[object]]
GIVEN_UP: dict[str, Getter] = {
    "get_many": lambda q: q.get_many(3, timeout=WAIT_S),
    "poll": lambda q: q.get(timeout=0),
    "selective": lambda q: q.get(timeout=WAIT_S, select=by_class_type(0)),
    "pooled": lambda q: q.get(timeout=WAIT_S),
}


@pytest.mark.parametrize("call", sorted(GIVEN_UP))
async def test_a_get_given_up_as_the_client_closes_gives_its_messages_back(
    bus: Bus, call: str
) -> None:
    """A get given up (its cancel scope) right before the client closes: its answer,
    memory messages the group handed to it, is still on the wire. The close waits for
    it and names those messages in its GiveBack, so the next reader finds them all.
    Before, only the pool's batches were waited for: a given-up get_many, poll or
    selective get left its answer unread and its messages were lost (3 of 5, 1 of 5)."""
    bodies = await put_memory(bus.address, "ANYORDER", 5)
    async with connect(bus.address, "ANYORDER") as receiver:
        with trio.move_on_after(0) as scope:  # given up once its request is written
            await GIVEN_UP[call](receiver)
        assert scope.cancelled_caught
    with trio.fail_after(WAIT_S):
        assert await bodies_left(bus.address, "ANYORDER") == bodies


# ------------------------------------------------- a scope cancelled around connect
async def test_a_scope_cancelled_around_connect_still_gives_back_what_the_client_holds(
    bus: Bus,
) -> None:
    """The usual trio shape: `async with connect(...)` inside a `move_on_after` or a
    nursery that is torn down. The scope cancels the application's code; the close
    must still give back the memory messages the client holds (read ahead with a
    get). Before, the cancel reached the connection's own loops too, so the close's
    GiveBack was never written (it waited GIVE_BACK_WAIT_S for a loop that was gone)
    and the 49 messages read ahead were lost."""
    bodies = await put_memory(bus.address, "ANYORDER", 50)
    with trio.fail_after(WAIT_S):
        with trio.CancelScope() as outer:
            async with connect(bus.address, "ANYORDER") as receiver:
                first = await receiver.get(timeout=WAIT_S)
                assert first.body == bodies[0]
                assert [message.body for message in receiver.held] == bodies[1:]
                outer.cancel()  # as a move_on_after's deadline or a nursery's teardown
                await trio.sleep_forever()
        assert outer.cancelled_caught
        assert await bodies_left(bus.address, "ANYORDER") == bodies[1:]


async def test_a_scope_cancelled_around_connect_while_gets_wait_loses_nothing(
    bus: Bus,
) -> None:
    """Lanes of gets (pooled, get_many, polls, selective) of memory and recoverable
    messages, the whole `connect` block cancelled while they wait: every message is
    either handed to a lane or found by the next reader, and none twice unmarked."""
    items = [
        PutItem(b"%d" % number, "ANYORDER", delivery=DeliveryMode.NN_MEM, uma=Uma.DISC)
        if number % 2
        else PutItem(b"%d" % number, "ANYORDER")
        for number in range(200)
    ]
    async with connect(bus.address, "SENDER") as sender:
        assert not [r for r in await sender.put_many(items) if isinstance(r, MrsError)]
    handed: list[Message] = []
    with trio.fail_after(WAIT_S), trio.CancelScope() as outer:
        async with connect(bus.address, "ANYORDER") as receiver, trio.open_nursery() as nursery:
            for getter in GIVEN_UP.values():
                nursery.start_soon(_lane, receiver, getter, handed)
            while len(handed) < 5:
                await trio.sleep(0.001)  # the lanes are taking messages
            outer.cancel()
    with trio.fail_after(WAIT_S):
        async with connect(bus.address, "ANYORDER", reconnect=None) as receiver:
            found = await take_all(receiver)
    seen = [message.body for message in handed + found]
    assert sorted(set(seen)) == sorted(item.body for item in items)
    firsts = [m.body for m in handed + found if m.delivery_status != Status.POSSDUPL]
    assert len(firsts) == len(set(firsts)), "a message delivered twice without POSSDUPL"


async def _lane(receiver: Client, getter: Getter, handed: list[Message]) -> None:
    """Get with `getter` until cancelled; each message handed to `handed` (confirmed)."""
    while True:
        try:
            got = await getter(receiver)
        except MrsError as nothing:
            assert nothing.status in (Status.NOMOREMSG, Status.TIMEOUT), nothing
            await trio.sleep(0)
            continue
        for message in cast(list[Message], got if isinstance(got, list) else [got]):
            handed.append(message)
            if message.needs_confirm:
                await receiver.confirm(message.seq)


# ------------------------------------------------- a journal read stopped part way
async def _confirmed_to_pcj(bus: Bus, count: int) -> list[bytes]:
    """`count` recoverable messages put and confirmed (the bus journals confirms to
    the PCJ by default): the PCJ's records, in order."""
    bodies = [b"audited %d" % number for number in range(count)]
    async with connect(bus.address, "SENDER") as sender:
        for body in bodies:
            await sender.put(body, "ANYORDER")
    async with connect(bus.address, "ANYORDER") as receiver:
        assert [message.body for message in await take_all(receiver)] == bodies
    return bodies


async def test_a_journal_read_stopped_part_way_goes_on_from_the_next_record(bus: Bus) -> None:
    """A journal reader's loop left part way through a page (a `break`, a cancel
    scope around the work on one record, Ctrl-C) and iterated again goes on with the
    next record. Before, it went on after the page (or chunk) it had read: the rest of
    the page was never read (3 of 20 over the wire; 18 of 20 from the files)."""
    bodies = await _confirmed_to_pcj(bus, 20)
    async with (
        connect(bus.address, None) as client,
        client.open_journal("pcj", page_records=5) as pcj,
    ):
        read = []
        async for record in pcj:
            read.append(record.body)
            if len(read) == 2:
                break
        with trio.move_on_after(WAIT_S) as scope:
            async for record in pcj:
                read.append(record.body)
                if len(read) == 8:
                    scope.cancel()  # the work on this record given up
                    await trio.sleep(0)
        read.extend([record.body async for record in pcj])
        assert read == bodies
    with open_journal(bus.data_dir, "pcj") as local:
        read = []
        for record in local:
            read.append(record.body)
            if len(read) == 2:
                break
        read.extend(record.body for record in local)
        assert read == bodies
    await trio.to_thread.run_sync(_read_blocking, bus.address, bodies)


def _read_blocking(address: str, bodies: list[bytes]) -> None:
    """The blocking client's reader, stopped part way and iterated again."""
    with connect_sync(address, None) as client, client.open_journal("pcj", page_records=5) as pcj:
        read = []
        for record in pcj:
            read.append(record.body)
            if len(read) == 3:
                break
        read.extend(record.body for record in pcj.read_page())  # the rest of that page
        read.extend(record.body for record in pcj)
        assert read == bodies


# ------------------------------------------------- a server that never answers
async def _silent_peer(task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Takes TCP connections and never answers a byte; reports each it saw closed."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    send, closed = trio.open_memory_channel[None](100)

    async def serve(stream: trio.SocketStream) -> None:
        try:
            while await stream.receive_some(65536):
                pass  # the Hello: never answered
        except trio.BrokenResourceError:
            pass
        await send.send(None)

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, serve, listeners)
        task_status.started((listeners[0].socket.getsockname()[1], closed))
        await trio.sleep_forever()


async def test_connect_to_a_server_that_never_answers_the_handshake() -> None:
    """A peer that takes the connection and never answers: `connect` raises
    ConnectionLost (LINK_DOWN, "no answer in time") after connect_timeout_s, and a
    `move_on_after` around `connect` ends it at once; each time the connection is
    closed (the peer sees it), so nothing is left open."""
    async with trio.open_nursery() as nursery:
        port, closed = await nursery.start(_silent_peer)
        address = f"127.0.0.1:{port}"
        with trio.fail_after(WAIT_S), pytest.raises(ConnectionLost) as lost:
            async with connect(address, "1.10", connect_timeout_s=0.2):
                pytest.fail("attached to a peer that never answered")
        assert lost.value.status == Status.LINK_DOWN and "no answer in time" in str(lost.value)
        with trio.fail_after(WAIT_S):
            await closed.receive()
            for _attempt in range(20):
                with trio.move_on_after(0.01) as scope:
                    async with connect(address, "1.10", connect_timeout_s=WAIT_S):
                        pytest.fail("attached to a peer that never answered")
                assert scope.cancelled_caught
                await closed.receive()
        nursery.cancel_scope.cancel()


# ------------------------------------------------- a client process SIGKILLed
PUTTER = """
import sys, trio
from clients import PutItem, connect
async def main(address, prefix):
    async with connect(address, "SENDER") as q:
        items = [PutItem(b"%d" % n, "ANYORDER", headers={"idempotency_key": f"{prefix}{n}"})
                 for n in range(int(sys.argv[3]))]
        print("putting", flush=True)
        results = await q.put_many(items)
        print("answered", sum(not isinstance(r, Exception) for r in results), flush=True)
trio.run(main, sys.argv[1], sys.argv[2])
"""


def _putter(address: str, count: int) -> subprocess.Popen:
    """A client process that puts `count` keyed messages in one put_many."""
    return subprocess.Popen(
        [sys.executable, "-c", PUTTER, address, "order-", str(count)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )


async def test_a_client_killed_mid_put_many_and_run_again_stores_each_once(bus: Bus) -> None:
    """A producer SIGKILLed in the middle of a put_many of keyed messages (some
    stored, some on the wire, some never sent), then run again with the same keys:
    each message is on the queue exactly once."""
    count = 3000
    first = _putter(bus.address, count)
    try:
        line = await trio.to_thread.run_sync(first.stdout.readline)  # type: ignore[union-attr]
        assert line.strip() == "putting"
        await trio.sleep(0.05)  # part of it on its way
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    again = _putter(bus.address, count)
    out, _ = await trio.to_thread.run_sync(again.communicate)
    assert out.split()[-2:] == ["answered", str(count)], out
    with trio.fail_after(WAIT_S * 4):
        left = await bodies_left(bus.address, "ANYORDER")
    assert sorted(left) == sorted(b"%d" % number for number in range(count))
