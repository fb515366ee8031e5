"""`Client.confirm_many`: a batch of confirms sent at once and answered each on its own,
against a real `mrs serve` process (clients.confirm_batch)."""

from __future__ import annotations

import signal

import pytest
import trio
import trio.testing

from clients import ConnectionLost, FieldRefused, MrsError, Status, connect, connect_sync


async def put_all(address: str, target: str, count: int) -> list[int]:
    async with connect(address, queue="SENDER") as sender:
        return [(await sender.put(f"m{index}".encode(), target)).seq for index in range(count)]


async def get_all(receiver, seqs: list[int]) -> list:
    """The messages of `seqs`, in one get_many: every one delivered, in put order."""
    messages = await receiver.get_many(len(seqs))
    assert [message.seq for message in messages] == seqs
    return messages


async def test_confirm_many_confirms_every_message_of_a_batch_and_none_comes_again(
    make_bus,
) -> None:
    bus = make_bus()
    seqs = await put_all(bus.address, "ANYORDER", 300)
    async with connect(bus.address, queue="ANYORDER") as receiver:
        messages = await get_all(receiver, seqs)
        assert await receiver.confirm_many([message.seq for message in messages]) == [None] * 300
        depth = (await receiver.status())["dqf_messages"]
    assert depth == 0
    async with connect(bus.address, queue="ANYORDER") as receiver:  # nothing redelivered
        with pytest.raises(MrsError) as nothing:
            await receiver.get(timeout=0)
        assert nothing.value.status == Status.NOMOREMSG


async def test_a_refused_confirm_is_answered_in_its_place_and_the_others_are_confirmed(
    make_bus,
) -> None:
    bus = make_bus()
    seqs = await put_all(bus.address, "ANYORDER", 3)
    async with connect(bus.address, queue="ANYORDER") as receiver:
        await get_all(receiver, seqs)
        results = await receiver.confirm_many([seqs[0], 987_654_321, seqs[1], -1, seqs[2]])
        assert results[0] is None and results[2] is None and results[4] is None
        assert results[1].status == Status.BADSEQ  # the server's refusal, this item alone
        assert isinstance(results[3], FieldRefused)  # never on the wire
        assert (await receiver.status())["dqf_messages"] == 0


async def test_confirms_unanswered_when_the_connection_drops_are_each_connection_lost(
    make_bus,
) -> None:
    """Sent, never answered (the server stopped, then killed): each confirm is a
    ConnectionLost in its place, and the messages, still unconfirmed on the server,
    come again marked POSSDUPL after a restart: nothing is lost."""
    bus = make_bus()
    seqs = await put_all(bus.address, "ANYORDER", 20)
    async with connect(bus.address, queue="ANYORDER", reconnect=None) as receiver:
        messages = await get_all(receiver, seqs)
        bus.process.process.send_signal(signal.SIGSTOP)  # reads nothing, answers nothing
        results: list = []
        try:
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:

                    async def confirm_them() -> None:
                        results.extend(await receiver.confirm_many([m.seq for m in messages]))

                    nursery.start_soon(confirm_them)
                    await trio.testing.wait_all_tasks_blocked()  # written, waiting for answers
                    assert not receiver._requests.link.unsent
                    bus.process.process.send_signal(signal.SIGKILL)
        finally:
            bus.process.process.wait()
    assert len(results) == 20
    assert all(isinstance(result, ConnectionLost) for result in results)
    bus.start()
    async with connect(bus.address, queue="ANYORDER") as receiver:
        again = await receiver.get_many(20)
        assert [message.seq for message in again] == seqs
        assert {message.delivery_status for message in again} == {Status.POSSDUPL}


def test_the_blocking_client_confirms_many(make_bus) -> None:
    bus = make_bus()
    seqs = trio.run(put_all, bus.address, "ANYORDER", 5)
    with connect_sync(bus.address, "ANYORDER") as receiver:
        messages = receiver.get_many(5)
        assert receiver.confirm_many([message.seq for message in messages]) == [None] * 5
        assert [message.seq for message in messages] == seqs
        assert receiver.status()["dqf_messages"] == 0
