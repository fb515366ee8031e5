"""Probes of the receive-side API (selective gets, confirmation styles, confirm_many,
get_many, priorities, the unconfirmed cap, POSSDUPL, the PCJ) against a real `mrs
serve` that is SIGKILLed and restarted while clients work, and of gets given up
(trio cancel scopes) whose messages were already on their way.

Each crash test keeps its own oracle (what was acknowledged stored, what was handed
to the application, what was confirmed and answered) and checks it after the restart."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

import clients
from clients import ForceJrn, Message, Status, connect
from journals import Journal
from mrs import protocol as wire
from mrs.core.selection import Selection, by_class_type, by_correlation_id, by_priority
from mrs.model import DeliveryMode
from tests.client_helpers import FAST_RECONNECT, FixedPortServer, take_all
from tests.conftest import Bus
from tests.journal_helpers import journal_seqs
from tests.unit.test_client_held import ScriptedServer, _start

WAIT_S = 15.0
"""Generous: the machine is shared; an answer that never comes fails the test."""


# ------------------------------------------------------- gets given up (scripted server)
def _recoverable(request_id: int, seq: int, body: bytes) -> wire.Delivery:
    """A first delivery of a recoverable message (CONFIRMREQ) answering `request_id`."""
    return wire.Delivery(
        request_id, seq, body, "1.11", "1.10", 0, 0, 0,
        int(DeliveryMode.WF_DQF), int(Status.CONFIRMREQ), b"", 1, None,
    )  # fmt: skip


Getter = Callable[[clients.Client], Awaitable[list[Message]]]


async def _single(client: clients.Client) -> list[Message]:
    return [await client.get(timeout=5)]


async def _poll(client: clients.Client) -> list[Message]:
    return [await client.get(timeout=0)]


async def _many(client: clients.Client) -> list[Message]:
    return await client.get_many(1, timeout=5)


async def _selective(client: clients.Client) -> list[Message]:
    return [await client.get(timeout=5, select=by_class_type(0))]


async def _given_up_get_many(client: clients.Client, server: ScriptedServer) -> None:
    """A get_many given up (cancel scope) once the scripted group has its GetBatch."""
    with trio.CancelScope() as giving_up:
        async with trio.open_nursery() as waiting:
            waiting.start_soon(client.get_many, 1)
            await server.until(lambda: len(server.gets) == 1)
            giving_up.cancel()
    await server.until(lambda: len(server.cancels) == 1)


async def test_a_message_that_crossed_a_given_up_get_comes_to_the_next_get_first() -> None:
    """A get_many is given up (cancel scope) while the group hands it message A; the
    application's next get is sent before A's Delivery arrives, and is handed B. The
    client gave the next get B and held A for the get after: the application saw B
    before A, so on an explicit-in-order queue (confirmation order is delivery order,
    A first) confirming in the order its gets returned messages answered BADSEQ
    ("confirm A before B"), which docs/delivery-modes.md says never happens. A message
    already on its way goes to the next get, oldest first."""
    server = ScriptedServer()
    async with trio.open_nursery() as nursery:
        port = await _start(nursery, server)
        async with connect(f"127.0.0.1:{port}", queue="1.10", heartbeat_s=None) as client:
            await _given_up_get_many(client, server)
            received: list[Message] = []

            async def get_next() -> None:  # a waiting get: the pool asks at once
                received.extend(await _single(client))

            async with trio.open_nursery() as getting:
                getting.start_soon(get_next)
                await server.until(lambda: len(server.gets) == 2)
                given_up, current = server.gets
                await server.send(wire.DeliveryBatch(given_up, [_recoverable(given_up, 1, b"A")]))
                newer = _recoverable(current, 2, b"B")
                if current in [batch.request_id for batch in server.batches]:
                    await server.send(wire.DeliveryBatch(current, [newer]))
                else:
                    await server.send(newer)
            assert [message.body for message in received] == [b"A"]
            assert [message.body for message in client.held] == [b"B"]
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    "next_get", [_poll, _many, _selective], ids=["poll", "get_many", "selective"]
)
async def test_a_poll_or_get_many_after_a_given_up_get_takes_what_it_brought(
    next_get: Getter,
) -> None:
    """A poll, a get_many or a selective get after a given-up get first waits for that
    get's answer (one round trip), then takes what it brought, asking nothing more.
    Sent at once, it was answered without it: nothing waiting (a timeout, or
    NoMoreMessages for a poll) or EXCMAXUNCONF at the cap, the message held."""
    server = ScriptedServer()
    async with trio.open_nursery() as nursery:
        port = await _start(nursery, server)
        async with connect(f"127.0.0.1:{port}", queue="1.10", heartbeat_s=None) as client:
            await _given_up_get_many(client, server)
            received: list[Message] = []

            async def get_next() -> None:
                received.extend(await next_get(client))

            async with trio.open_nursery() as getting:
                getting.start_soon(get_next)
                await trio.testing.wait_all_tasks_blocked()  # waiting, nothing sent
                assert len(server.gets) == 1
                (given_up,) = server.gets
                await server.send(wire.DeliveryBatch(given_up, [_recoverable(given_up, 1, b"A")]))
            assert [message.body for message in received] == [b"A"]
            assert len(server.gets) == 1 and not client.held
        nursery.cancel_scope.cancel()


# ------------------------------------------------------------- a real server, SIGKILLed
CRASH_QUEUES = 30
"""Messages put to the out-of-order queue before the crash."""


async def put_tagged(
    address: str, target: str, count: int, priorities: int = 4
) -> dict[int, tuple[int, int, bytes]]:
    """Put `count` recoverable messages of class i % 3, priority i % `priorities`,
    correlation id c<i>; each acknowledged STORED. seq -> (class, priority, id)."""
    stored = {}
    async with connect(address, queue="SENDER") as sender:
        for index in range(count):
            fields = (index % 3, index % priorities, f"c{index}".encode())
            psb = await sender.put(
                f"m{index}".encode(),
                target,
                msg_class=fields[0],
                priority=fields[1],
                correlation_id=fields[2],
            )
            assert psb.delivery_status == Status.STORED
            stored[psb.seq] = fields
    return stored


async def settled(client: clients.Client) -> None:
    """Wait until a reconnecting client is attached to the restarted server again (a
    request on the dead connection raises ConnectionLost, as documented)."""
    with trio.fail_after(WAIT_S):
        while True:
            try:
                await client.wait_connected()
                await client.status()
                return
            except clients.ConnectionLost:
                await trio.sleep(0.02)  # the drop is seen by the client's receive loop


def pcj_seqs(server: FixedPortServer | Bus) -> list[int]:
    return journal_seqs(Path(server.data_dir) / "journals", Journal.PCJ)


async def test_selective_gets_confirms_and_the_pcj_hold_across_a_sigkill(tmp_path: Path) -> None:
    """Selective gets (correlation id, class, priority), a plain get and a get_many
    hand out messages; some are confirmed FORCE_JRN (confirm, confirm_many); SIGKILL.
    After the restart: the handed-out unconfirmed ones come POSSDUPL (a selective get
    by correlation id finds one), the others CONFIRMREQ, in priority then arrival
    order; none confirmed comes back; nothing is lost; the PCJ holds each confirmed
    message once."""
    bus = Bus(tmp_path, group_extra="pcj_default = true")
    bus.start()
    try:
        stored = await put_tagged(bus.address, "ANYORDER", CRASH_QUEUES)
        selections: list[Selection | None] = [
            by_correlation_id(b"c7"), by_class_type(2), None, by_priority("eq", 1),
        ]  # fmt: skip
        async with connect(bus.address, queue="ANYORDER", reconnect=None) as receiver:
            handed = [await receiver.get(timeout=WAIT_S, select=sel) for sel in selections]
            handed += await receiver.get_many(3, timeout=WAIT_S)
            assert all(message.delivery_status == Status.CONFIRMREQ for message in handed)
            chosen = zip(selections, handed[:4], strict=True)
            assert all(sel is None or sel.matches(message) for sel, message in chosen)
            await receiver.confirm(handed[1].seq, force_j=ForceJrn.FORCE_JRN)
            seqs = [handed[2].seq, handed[4].seq]
            assert await receiver.confirm_many(seqs, force_j=ForceJrn.FORCE_JRN) == [None, None]
            confirmed = {handed[1].seq, *seqs}
            bus.kill()
        bus.start()
        assert sorted(pcj_seqs(bus)) == sorted(confirmed)
        async with connect(bus.address, queue="ANYORDER", reconnect=None) as receiver:
            again = await receiver.get(timeout=WAIT_S, select=by_correlation_id(b"c7"))
            assert (again.seq, again.delivery_status) == (handed[0].seq, Status.POSSDUPL)
            await receiver.confirm(again.seq, force_j=ForceJrn.FORCE_JRN)
            rest = await take_all(receiver)
    finally:
        bus.process.terminate()
    was_handed = {message.seq for message in handed}
    for message in rest:
        expected = Status.POSSDUPL if message.seq in was_handed else Status.CONFIRMREQ
        assert message.delivery_status == expected, message
    order = [(-stored[message.seq][1], message.seq) for message in rest]
    assert order == sorted(order)  # highest priority, then first arrived
    assert sorted([again.seq, *(m.seq for m in rest)]) == sorted(set(stored) - confirmed)
    pcj = pcj_seqs(bus)
    assert sorted(pcj) == sorted(stored)  # each once: confirmed before and after


async def test_confirmation_styles_and_the_cap_hold_for_a_client_that_reconnects(
    tmp_path: Path,
) -> None:
    """One reconnecting client per queue while the server is SIGKILLed under it.
    Implicit: the get that returned B confirmed A durably (A never comes back, the PCJ
    has it); B, unconfirmed when the server died, comes again POSSDUPL and the first
    get after the reconnect confirms nothing of the old session. The cap: both messages
    handed out again, a third get is EXCMAXUNCONF. In order: BADSEQ for the wrong one,
    and a message confirmed before the crash is unknown (BADSEQ) after it."""
    server = FixedPortServer(tmp_path)
    server.data_dir = tmp_path / "g1"  # type: ignore[attr-defined]
    server.start()
    try:
        implicit = await put_tagged(server.address, "IMPLICIT", 4, 1)
        small = await put_tagged(server.address, "SMALL", 2, 1)
        orders = await put_tagged(server.address, "ORDERS", 3, 1)
        async with connect(server.address, queue="IMPLICIT", reconnect=FAST_RECONNECT) as client:
            first, second = [await client.get(timeout=WAIT_S) for _ in range(2)]
            server.kill()
            server.start()
            await settled(client)
            again = await client.get(timeout=WAIT_S)
            assert (again.seq, again.delivery_status) == (second.seq, Status.POSSDUPL)
            after = await client.get(timeout=WAIT_S)  # confirms `again`
            assert (after.seq, after.delivery_status) == (sorted(implicit)[2], Status.CONFIRMREQ)
        assert set(pcj_seqs(server)) == {first.seq, second.seq}
        async with connect(server.address, queue="SMALL", reconnect=FAST_RECONNECT) as client:
            [await client.get(timeout=WAIT_S) for _ in range(2)]
            server.kill()
            server.start()
            await settled(client)
            held = [await client.get(timeout=WAIT_S) for _ in range(2)]
            assert {m.seq for m in held} == set(small)
            assert {m.delivery_status for m in held} == {Status.POSSDUPL}
            with pytest.raises(clients.TooManyUnconfirmed):
                await client.get(timeout=0)
        async with connect(server.address, queue="ORDERS", reconnect=FAST_RECONNECT) as client:
            before = [await client.get(timeout=WAIT_S) for _ in range(2)]
            await client.confirm(before[0].seq)
            server.kill()
            server.start()
            await settled(client)
            after_crash = [await client.get(timeout=WAIT_S) for _ in range(2)]
            assert [m.seq for m in after_crash] == sorted(orders)[1:]
            assert [m.delivery_status for m in after_crash] == [Status.POSSDUPL, Status.CONFIRMREQ]
            with pytest.raises(clients.BadSequence, match=f"confirm {after_crash[0].seq} before"):
                await client.confirm(after_crash[1].seq)
            with pytest.raises(clients.BadSequence, match="not awaiting a confirm"):
                await client.confirm(before[0].seq)
            assert await client.confirm_many([m.seq for m in after_crash]) == [None, None]
    finally:
        server.stop()
    assert sorted(pcj_seqs(server)) == sorted([first.seq, second.seq, *orders])


HOLDER = """
import sys, trio
from clients import connect
async def main(address, queue, count):
    async with connect(address, queue=queue, reconnect=None) as client:
        got = [await client.get(timeout=15) for _ in range(count)]
        print(" ".join(str(message.seq) for message in got), flush=True)
        await trio.sleep_forever()
trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
"""


@pytest.mark.parametrize("restart", [False, True], ids=["server-up", "server-restarted"])
@pytest.mark.parametrize("queue", ["ORDERS", "IMPLICIT"])
async def test_a_sigkilled_receiver_s_unconfirmed_messages_come_again_possdupl(
    make_bus, queue: str, restart: bool
) -> None:
    """A receiver process holding unconfirmed messages is SIGKILLed (and the server
    too, `restart`): the next receiver gets each unconfirmed one POSSDUPL, the rest
    CONFIRMREQ, nothing lost; on an implicit queue the messages the dead receiver's
    later gets confirmed do not come back."""
    bus = make_bus(group_extra="pcj_default = true")
    stored = sorted(await put_tagged(bus.address, queue, 6, 1))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, bus.address, queue, "3"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    try:
        line = await trio.to_thread.run_sync(holder.stdout.readline)  # type: ignore[union-attr]
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert [int(seq) for seq in line.split()] == stored[:3]
    if restart:
        bus.restart()
    async with connect(bus.address, queue=queue, reconnect=None) as receiver:
        taken = [(m.seq, m.delivery_status) for m in await take_all(receiver)]
    unconfirmed = stored[2:3] if queue == "IMPLICIT" else stored[:3]
    assert taken == [(seq, Status.POSSDUPL) for seq in unconfirmed] + [
        (seq, Status.CONFIRMREQ) for seq in stored[3:]
    ]


class Oracle:
    """What the application knows: acknowledged stored, handed to it, confirmed and
    answered, and confirms whose answer it gave up on (maybe applied, maybe not)."""

    def __init__(self) -> None:
        self.acknowledged: set[int] = set()
        self.handed: set[int] = set()
        self.confirmed: set[int] = set()
        self.unsure: set[int] = set()
        self.problems: list[tuple] = []

    def received(self, message: Message) -> None:
        """A get returned `message`: a first delivery unless handed out before."""
        expected = Status.POSSDUPL if message.seq in self.handed else Status.CONFIRMREQ
        if message.delivery_status != expected or message.seq in self.confirmed:
            self.problems.append(("delivered", message.seq, message.delivery_status))
        self.handed.add(message.seq)

    def after_restart(self, waiting: list[Message]) -> None:
        """Everything on the queue after a restart (taken, not confirmed): nothing
        acknowledged lost, nothing confirmed back, each handed one POSSDUPL."""
        seqs = {message.seq for message in waiting}
        for message in waiting:
            if message.seq in self.handed and message.delivery_status != Status.POSSDUPL:
                self.problems.append(("not POSSDUPL", message.seq))
            if message.seq in self.confirmed:
                self.problems.append(("confirmed came back", message.seq))
        lost = self.acknowledged - self.confirmed - self.unsure - seqs
        if lost:
            self.problems.append(("lost", sorted(lost)))
        self.confirmed |= self.unsure - seqs
        self.unsure.clear()
        self.handed |= seqs


async def _cancelled_work(address: str, oracle: Oracle, rng: random.Random) -> None:
    """Gets and confirm_manys on the in-order queue, each in a cancel scope of a few ms,
    while a sender puts; each confirm_many names the oldest messages the gets returned,
    in the order they returned them, so BADSEQ is never the right answer."""
    async with (
        connect(address, queue="SENDER") as sender,
        connect(address, queue="ORDERS", reconnect=None) as receiver,
    ):

        async def send() -> None:
            for _ in range(40):
                await trio.sleep(rng.random() * 0.01)
                oracle.acknowledged.add((await sender.put(b"x", "ORDERS")).seq)

        mine: list[int] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            for _ in range(60):
                with trio.move_on_after(rng.random() * 0.01):
                    many = rng.random() < 0.3
                    got = await receiver.get_many(3) if many else [await receiver.get()]
                    for message in got:
                        oracle.received(message)
                        mine.append(message.seq)
                if mine and rng.random() < 0.5:
                    batch = mine[: rng.randrange(1, len(mine) + 1)]
                    oracle.unsure.update(batch)
                    with trio.move_on_after(rng.random() * 0.01):
                        results = await receiver.confirm_many(batch, force_j=ForceJrn.FORCE_JRN)
                        for seq, error in zip(batch, results, strict=True):
                            # "not awaiting": a confirm given up before was applied
                            if error is not None and "not awaiting" not in error.message:
                                oracle.problems.append(("confirm", seq, error.message))
                            oracle.confirmed.add(seq)
                            oracle.unsure.discard(seq)
                            mine.remove(seq)
            nursery.cancel_scope.cancel()


async def test_gets_and_confirms_given_up_mid_flight_then_a_sigkill(make_bus) -> None:
    """Cancel scopes end gets, get_manys and confirm_manys at random instants while
    messages arrive; then the server is SIGKILLed. Live: every message comes as it
    should (CONFIRMREQ first, POSSDUPL after), and confirming in the order the gets
    returned messages is never BADSEQ; after each restart nothing acknowledged is
    lost, nothing confirmed comes back, and each handed-out message is POSSDUPL."""
    bus = make_bus(group_extra="pcj_default = true")
    rng = random.Random(2)
    oracle = Oracle()
    for _ in range(5):
        await _cancelled_work(bus.address, oracle, rng)
        bus.restart()
        async with connect(bus.address, queue="ORDERS", reconnect=None) as receiver:
            waiting = []
            while True:
                try:
                    waiting.append(await receiver.get(timeout=0))
                except clients.NoMoreMessages:
                    break
        oracle.after_restart(waiting)
    assert oracle.problems == []
    assert len(oracle.confirmed) > 20
    pcj = pcj_seqs(bus)
    assert len(pcj) == len(set(pcj))  # each confirmed message once
    assert set(pcj) == oracle.confirmed  # every one confirmed FORCE_JRN
