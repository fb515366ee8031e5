"""Read-ahead, the pool of waiting gets and temporary response queues as an application
developer meets them, against a real `mrs serve` over real sockets (and, for a server
that breaks the protocol, the scripted server of tests/unit/test_client_held.py):

- `connect(read_ahead_max=0)` (and `connect_sync`'s) switches read-ahead off, so a
  message of higher priority that arrives later is got before the ones behind it;
  a small bound is kept, a bad one is BADPARAM;
- a pooled batch answered with more messages than it asked for (its callers plus
  its read-ahead) holds no more than that, and a get_many's surplus is held only up
  to the held messages' bound: the surplus that needs no confirm beyond it is given
  back (GiveBack) at once, not held up to the frame size;
- a temporary queue (`permanent = false`) nobody is attached to takes no MRS_ACK and
  no returned message (RTS), as MessageQ's temporary queue, which exists only while
  attached: an AK put naming it as its response queue is refused NOTACTIVE, an
  MRS_ACK due after its owner left is dropped (logged), an RTS answers RTS_FAIL;
  across a link (two groups in process, MockClock) an MRS_ACK for another group's
  temporary queue is refused there, and the sending group says so once, by name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

import clients
from clients import DeliveryMode, MrsError, NoMoreMessages, Status, Uma, connect, connect_sync
from mrs import protocol as wire
from mrs.limits import HELD_MESSAGES_MAX, READ_AHEAD_MAX
from tests.process.test_links import wait_for_link
from tests.unit.test_client_held import ScriptedServer, _start

WAIT_S = 30.0
"""Deadline for what the server process must do (a loaded 2-core CI machine)."""
D = DeliveryMode


async def _put_routine(address: str, count: int) -> None:
    async with connect(address, "SENDER2") as sender:
        for number in range(count):
            await sender.put(b"routine %d" % number, "ANYORDER", delivery=D.WF_MEM)


async def _put_urgent(address: str) -> None:
    async with connect(address, "SENDER2") as sender:
        psb = await sender.put(b"urgent", "ANYORDER", delivery=D.WF_MEM, priority=99)
        assert psb.delivery_status == Status.ENQUEUED


# ------------------------------------------------------------ read-ahead per connection
async def test_with_read_ahead_off_a_later_urgent_message_is_got_first(bus) -> None:
    """docs/client-library.md "Read-ahead": read_ahead_max=0 holds nothing beyond the
    gets, so the priority order of the queue is the order of the gets."""
    await _put_routine(bus.address, 10)
    async with connect(bus.address, "ANYORDER", read_ahead_max=0) as q:
        assert (await q.get(timeout=WAIT_S)).body == b"routine 0"
        assert q.held == ()  # nothing read ahead
        await _put_urgent(bus.address)
        urgent = await q.get(timeout=WAIT_S)
        assert (urgent.body, urgent.priority) == (b"urgent", 99)
        rest = [(await q.get(timeout=WAIT_S)).body for _ in range(9)]
        assert rest == [b"routine %d" % number for number in range(1, 10)]


async def test_a_small_read_ahead_is_kept_to(bus) -> None:
    """read_ahead_max=3: one get brings its message and at most three more."""
    await _put_routine(bus.address, 10)
    async with connect(bus.address, "ANYORDER", read_ahead_max=3) as q:
        assert (await q.get(timeout=WAIT_S)).body == b"routine 0"
        assert [message.body for message in q.held] == [b"routine 1", b"routine 2", b"routine 3"]
    async with connect(bus.address, "ANYORDER", read_ahead_max=0) as again:  # given back
        bodies = [(await again.get(timeout=WAIT_S)).body for _ in range(9)]
        assert bodies == [b"routine %d" % number for number in range(1, 10)]


def test_the_blocking_client_takes_the_same_option(bus) -> None:
    trio.run(_put_routine, bus.address, 5)
    with connect_sync(bus.address, "ANYORDER", read_ahead_max=0) as q:
        assert q.get(timeout=WAIT_S).body == b"routine 0"
        trio.run(_put_urgent, bus.address)
        assert q.get(timeout=WAIT_S).body == b"urgent"
    with connect_sync(bus.address, "ANYORDER") as default:  # on by default
        assert default.get(timeout=WAIT_S).body == b"routine 1"
        trio.run(_put_urgent, bus.address)
        assert default.get(timeout=WAIT_S).body == b"routine 2"  # read ahead: kept its place
    with pytest.raises(clients.BadParameter):
        connect_sync(bus.address, "ANYORDER", read_ahead_max=READ_AHEAD_MAX + 1)


@pytest.mark.parametrize("value", [-1, READ_AHEAD_MAX + 1, True, 2.0, "8", None])
async def test_a_read_ahead_that_is_no_count_is_refused(value: object) -> None:
    """BADPARAM naming the option, before anything is dialed (no server needed)."""
    with pytest.raises(clients.BadParameter) as refused:
        async with connect("127.0.0.1:1", "ANYORDER", read_ahead_max=value):  # type: ignore[arg-type]
            pass
    assert "read_ahead_max" in refused.value.message


# ------------------------------------------------------------ a batch that brings too many
class _GiveBackServer(ScriptedServer):
    """The scripted server, also recording the seqs of each GiveBack."""

    def __init__(self) -> None:
        super().__init__()
        self.given_back: list[int] = []

    async def serve(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        while data := await stream.receive_some(65536):
            self.connection.receive_data(data)
            for event in self.connection.events():
                if isinstance(event, wire.Hello):
                    await self.send(wire.Welcome(wire.PROTOCOL_VERSION, 1, "one", 0))
                elif isinstance(event, wire.Attach):
                    await self.send(wire.Attached(event.request_id, 1, 10))
                elif isinstance(event, wire.GetBatch):
                    self.gets.append(event.request_id)
                    self.batches.append(event)
                elif isinstance(event, wire.CancelGet):
                    self.cancels.append(event.request_id)
                elif isinstance(event, wire.GiveBack):
                    self.given_back.extend(event.seqs)
                self.heard.set()


@asynccontextmanager
async def _scripted(read_ahead_max: int) -> AsyncIterator[tuple[_GiveBackServer, clients.Client]]:
    server = _GiveBackServer()
    async with trio.open_nursery() as nursery:
        port = await _start(nursery, server)
        async with connect(
            f"127.0.0.1:{port}", "1.10", heartbeat_s=None, read_ahead_max=read_ahead_max
        ) as client:
            yield server, client
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("read_ahead_max", [0, 4])
async def test_a_pooled_batch_answered_with_too_many_holds_what_it_asked_for(
    read_ahead_max: int,
) -> None:
    """One get waits (a GetBatch of 1 and its read-ahead); the server answers with 50
    memory messages. The get takes the first, the read-ahead is held, and the other
    ones are given back at once, not held (before: all 49 held)."""
    async with _scripted(read_ahead_max) as (server, client):
        async with trio.open_nursery() as waiting:
            got: list[clients.Message] = []

            async def get_one() -> None:
                got.append(await client.get(timeout=WAIT_S))

            waiting.start_soon(get_one)
            await server.until(lambda: len(server.batches) == 1)
            batch = server.batches[0]
            assert (batch.count_max, batch.read_ahead_max) == (1, read_ahead_max)
            await server.deliver(batch.request_id, b"m", count=50)
        seqs = [batch.request_id * 100 + index for index in range(50)]
        assert [message.seq for message in got] == seqs[:1]
        assert [message.seq for message in client.held] == seqs[1 : 1 + read_ahead_max]
        await server.until(lambda: len(server.given_back) == 49 - read_ahead_max)
        assert server.given_back == seqs[1 + read_ahead_max :]


FLOOD = 2000
"""Messages a broken server answers a get_many(2) with: more than held messages may be."""
HELD_BOUND = HELD_MESSAGES_MAX + READ_AHEAD_MAX
"""What a client holds at most (docs/client-library.md, "Read-ahead")."""


async def test_a_get_many_answered_with_a_flood_holds_no_more_than_the_bound() -> None:
    """get_many(2) answered with 2,000 memory messages: two returned, the rest held for
    the next gets up to the bound, the others given back (before: all 1,998 held)."""
    async with _scripted(0) as (server, client):
        async with trio.open_nursery() as asking:
            got: list[list[clients.Message]] = []

            async def get_two() -> None:
                got.append(await client.get_many(2, timeout=WAIT_S))

            asking.start_soon(get_two)
            await server.until(lambda: len(server.batches) == 1)
            request_id = server.batches[0].request_id
            await server.deliver(request_id, b"m", count=FLOOD)
        seqs = [request_id * 100 + index for index in range(FLOOD)]
        assert [message.seq for message in got[0]] == seqs[:2]
        assert [message.seq for message in client.held] == seqs[2:HELD_BOUND]
        await server.until(lambda: len(server.given_back) == FLOOD - HELD_BOUND)
        assert server.given_back == seqs[HELD_BOUND:]


async def test_a_get_many_given_up_and_answered_with_a_flood_holds_no_more_than_the_bound() -> None:
    """get_many(2) given up; the answer crossing its CancelGet brings 2,000 memory
    messages: held up to the bound, in order, the others given back (before: all held)."""
    async with _scripted(0) as (server, client):
        with trio.move_on_after(WAIT_S) as scope:
            async with trio.open_nursery() as asking:
                asking.start_soon(client.get_many, 2)
                await server.until(lambda: len(server.batches) == 1)
                scope.cancel()
        request_id = server.batches[0].request_id
        await server.until(lambda: request_id in server.cancels)
        await server.deliver(request_id, b"m", count=FLOOD)
        seqs = [request_id * 100 + index for index in range(FLOOD)]
        await server.until(lambda: len(server.given_back) == FLOOD - HELD_BOUND)
        assert server.given_back == seqs[HELD_BOUND:]
        assert [message.seq for message in client.held] == seqs[:HELD_BOUND]


# ------------------------------------------------------------ temporary response queues
async def test_an_ak_put_naming_a_temporary_queue_nobody_attached_is_refused(bus) -> None:
    """Its MRS_ACK could reach nobody: NOTACTIVE, nothing stored (before: stored, and
    the MRS_ACK kept on TEMP for whoever attached next)."""
    async with connect(bus.address, "SENDER") as sender:
        with pytest.raises(MrsError) as refused:
            await sender.put(b"x", "ANYORDER", delivery=D.AK_DQF, resp_q="TEMP")
        assert refused.value.status == Status.NOTACTIVE
        assert "TEMP" in refused.value.message or "1.15" in refused.value.message
        assert await sender.pending(["ANYORDER", "TEMP"]) == [0, 0]


async def test_an_mrs_ack_due_after_its_temporary_queue_was_left_is_dropped(bus) -> None:
    """An AK_CONF sender attached to TEMP leaves before the receiver confirms: the
    MRS_ACK is dropped (logged once), not kept for the next program on TEMP."""
    async with connect(bus.address, "TEMP") as sender:
        psb = await sender.put(b"order", "ANYORDER", delivery=D.AK_CONF)
        assert psb.status == Status.SUCCESS
    async with connect(bus.address, "ANYORDER") as receiver:
        message = await receiver.get(timeout=WAIT_S)
        await receiver.confirm(message.seq)
        assert await receiver.pending(["TEMP"]) == [0]
    async with connect(bus.address, "TEMP") as successor:
        with pytest.raises(NoMoreMessages):
            await successor.get(timeout=0)
    assert f"MRS_ACK for seq {psb.seq} dropped" in bus.log_text()


async def test_a_message_returned_to_a_temporary_queue_nobody_attached_fails(bus) -> None:
    """RTS to a response queue that is temporary and not attached: RTS_FAIL (before:
    RTS_SUCCESS, and the returned message kept on TEMP for nobody)."""
    async with connect(bus.address, "SENDER") as sender:
        psb = await sender.put(b"x", "TEMP", delivery=D.WF_MEM, uma=Uma.RTS, resp_q="TEMP")
        assert (psb.status, psb.delivery_status, psb.uma_status) == (
            Status.SUCCESS, Status.NOTACTIVE, Status.RTS_FAIL,
        )  # fmt: skip
        assert await sender.pending(["TEMP"]) == [0]
        async with connect(bus.address, "TEMP") as owner:  # attached: it takes it
            psb = await sender.put(b"y", "1.55", delivery=D.WF_MEM, uma=Uma.RTS, resp_q="TEMP")
            assert (psb.delivery_status, psb.uma_status) == (Status.NOSUCHQUEUE, Status.RTS_SUCCESS)
            returned = await owner.get(timeout=WAIT_S)
            assert (returned.body, returned.delivery_status) == (b"y", Status.MSGUNDEL)


LINKED_QUEUES = """
[[group.queue]]
id = 11
name = "OUT"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 15
name = "TEMP"
permanent = false
"""
REMOTE_ACKS = 5


async def test_mrs_acks_due_on_a_temporary_queue_after_a_confirm_elsewhere_are_dropped(
    make_mem_linked, caplog: pytest.LogCaptureFixture
) -> None:
    """A program attached to 2.15 (temporary) puts AK_CONF to 1.11 and leaves; group 1's
    confirms reach group 2, which owes the MRS_ACKs: dropped, said in one line, none
    kept on 2.15 for the next program."""
    linked = await make_mem_linked(queues=LINKED_QUEUES)
    await wait_for_link(linked, 1, 2)
    async with linked.connect(2, "2.15") as sender:
        for number in range(REMOTE_ACKS):
            psb = await sender.put(b"%d" % number, "1.11", delivery=D.AK_CONF)
            assert psb.status == Status.SUCCESS
    caplog.clear()
    async with linked.connect(1, "1.11") as receiver:
        for message in await receiver.get_many(REMOTE_ACKS, timeout=WAIT_S):
            await receiver.confirm(message.seq)
    with trio.fail_after(WAIT_S):
        while not any("dropped" in record.message for record in caplog.records):
            await trio.sleep(0.01)  # MockClock time: the confirm notices travel the link
    async with linked.connect(2, "2.15") as successor:
        with pytest.raises(NoMoreMessages):
            await successor.get(timeout=0)
    dropped = [record.message for record in caplog.records if "dropped" in record.message]
    assert len(dropped) == 1 and "2.15" in dropped[0], dropped


async def test_mrs_acks_refused_by_a_temporary_queue_of_another_group_log_once(
    make_mem_linked, caplog: pytest.LogCaptureFixture
) -> None:
    """AK puts in group 1 naming 2.15 (temporary, nobody attached) as their response
    queue: group 2 refuses each MRS_ACK (NOTACTIVE), none waits on 2.15, and group 1
    says so in one line naming the status, not one ERROR line per MRS_ACK (before:
    five lines, each a bare status number)."""
    linked = await make_mem_linked(queues=LINKED_QUEUES)
    await wait_for_link(linked, 1, 2)
    caplog.clear()
    async with linked.connect(1, "1.11") as sender:
        for number in range(REMOTE_ACKS):
            psb = await sender.put(b"%d" % number, "1.11", delivery=D.AK_DQF, resp_q="2.15")
            assert psb.status == Status.SUCCESS
    outbox = linked.server(1).group.ack_outbox
    with trio.fail_after(WAIT_S):
        while outbox.count():
            await trio.sleep(0.01)  # MockClock time: the refusals travel back over the link
    async with linked.connect(2, "2.15") as successor:
        with pytest.raises(NoMoreMessages):
            await successor.get(timeout=0)
    refused = [record.message for record in caplog.records if "MRS_ACK" in record.message]
    assert len(refused) == 1 and "NOTACTIVE" in refused[0], refused
