"""The client library's request deadlines and the answers it takes from a server, as
an application uses them: real `mrs serve` processes (a disk stalled with the fault
file's `SLOW <s>` under MRS_WRITER=thread, so heartbeats go on while the commit
hangs) and real TCP peers speaking the framing of docs/protocol.md with answers of
the right types and the wrong values (tests.client_helpers.scripted_server).

- confirm, confirm_many, status, locate and pending wait at most their `timeout=`
  or the connection's `request_timeout_s`, then raise ReplyTimeout in one line that
  says what the request may still do; before, a confirm behind a stalled commit
  waited for ever.
- `mrs status` tells a server that closed the connection unanswered by the error's
  `closed_unanswered`, not by the text of its message.
- a Located or Attached naming no queue address is a protocol error, not an address.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import trio

from clients import (
    BadParameter,
    BadSequence,
    ConnectionLost,
    DeliveryMode,
    MrsError,
    NoMoreMessages,
    ProtocolFailure,
    ReplyTimeout,
    Status,
    connect,
    connect_sync,
)
from mrs import protocol as wire
from tests.client_helpers import answer_handshake, scripted_server

WAIT_S = 10.0
"""Every probe's bound: a call still waiting by then hangs."""
STALL_S = 4.0
"""How long each commit takes while the fault file says SLOW."""
TIMEOUT_S = 1.0
"""The calls' own bound in the stalled-disk tests: well under STALL_S."""


def stalled_bus(make_bus, tmp_path: Path) -> tuple[object, Path]:
    """A group whose commits run in a writer thread (heartbeats are answered while a
    commit hangs) and whose fault file may stall them; the fault is off at first."""
    fault = tmp_path / "fault"
    fault.write_text("")
    bus = make_bus(env={"MRS_WRITER": "thread", "MRS_FAULT_FILE": str(fault)})
    return bus, fault


async def delivered_seq(bus, queue: str = "ANYORDER") -> int:
    """Put one recoverable message to `queue` and return its seq once stored."""
    async with bus.connect(queue="SENDER") as sender:
        psb = await sender.put(b"order", queue, delivery=DeliveryMode.WF_DQF)
        assert psb.status == Status.SUCCESS
        return psb.seq


async def test_a_confirm_behind_a_stalled_commit_times_out_and_may_still_be_recorded(
    make_bus, tmp_path: Path
) -> None:
    """Before: the server kept answering pings while its commit hung, so the client
    never counted the connection lost and `confirm` waited for ever. Now it raises
    ReplyTimeout after its own `timeout=`, on a connection that stays up, saying the
    confirm may still be recorded; and it was: once the disk is back no copy comes
    again."""
    bus, fault = stalled_bus(make_bus, tmp_path)
    await delivered_seq(bus)
    async with bus.connect(queue="ANYORDER", heartbeat_s=0.3) as q:
        message = await q.get(timeout=5)
        fault.write_text(f"SLOW {STALL_S}")
        started_s = trio.current_time()
        with trio.fail_after(STALL_S - 0.5), pytest.raises(ReplyTimeout) as timed_out:
            await message.confirm(timeout=TIMEOUT_S)
        assert trio.current_time() - started_s < STALL_S - 1.0
        line = str(timed_out.value)
        assert "\n" not in line and timed_out.value.status == Status.TIMEOUT
        assert f"confirm of message {message.seq}" in line and "may still be recorded" in line
        assert q.connected and q.reconnects == 0  # heartbeats went on: not a lost link
        fault.write_text("")
        with pytest.raises(BadSequence):  # the group has it (being written): not again
            await q.confirm(message.seq, timeout=WAIT_S)
    async with bus.connect(queue="ANYORDER") as again:
        with trio.fail_after(WAIT_S), pytest.raises(NoMoreMessages):
            await again.get(timeout=0)  # recorded: it does not come back


async def test_the_connection_wide_request_timeout_bounds_every_confirm(
    make_bus, tmp_path: Path
) -> None:
    """`connect(request_timeout_s=)` bounds the calls given no timeout of their own:
    `confirm_many` answers the unanswered confirm with a ReplyTimeout in its place
    (before, nothing bounded it; a None left in place would have read as recorded),
    and the blocking client's `message.confirm()` raises it."""
    bus, fault = stalled_bus(make_bus, tmp_path)
    first = await delivered_seq(bus)
    second = await delivered_seq(bus)
    async with bus.connect(queue="ANYORDER", request_timeout_s=TIMEOUT_S) as q:
        assert (await q.get(timeout=5)).seq == first
        fault.write_text(f"SLOW {STALL_S}")
        with trio.fail_after(STALL_S - 0.5):
            (result,) = await q.confirm_many([first])
        assert isinstance(result, ReplyTimeout), result
        assert f"confirm of message {first}" in str(result)
        fault.write_text("")

    def blocking(address: str) -> MrsError:
        with connect_sync(address, "ANYORDER", request_timeout_s=TIMEOUT_S) as sync:
            message = sync.get(timeout=5)
            assert message.seq == second
            fault.write_text(f"SLOW {STALL_S}")
            try:
                with pytest.raises(ReplyTimeout) as timed_out:
                    message.confirm()
            finally:
                fault.write_text("")
            return timed_out.value

    with trio.fail_after(WAIT_S + STALL_S):
        error = await trio.to_thread.run_sync(blocking, bus.address)
    assert f"confirm of message {second}" in str(error)


# ------------------------------------------------------------ a server that does not answer
async def test_status_locate_and_pending_give_up_on_a_server_that_never_answers() -> None:
    """Each waits at most its `timeout=`, then ReplyTimeout naming the call, and the
    connection serves on. Before: `status` waited for ever (as long as the server
    answered its pings), and locate and pending could not be bounded by the caller."""
    async with trio.open_nursery() as nursery:
        port = await nursery.start(scripted_server, lambda event: [])
        async with connect(f"127.0.0.1:{port}", "1.10", reconnect=None) as q:
            calls = {
                "status": lambda: q.status(timeout=0.3),
                "locate ORDERS": lambda: q.locate("ORDERS", timeout=0.3),
                "pending": lambda: q.pending(["1.10"], timeout=0.3),
            }
            for what, call in calls.items():
                with trio.fail_after(3), pytest.raises(ReplyTimeout) as timed_out:
                    await call()
                assert str(timed_out.value).startswith(f"mrs: TIMEOUT: {what}: no answer from")
                assert "changed nothing" in str(timed_out.value)
                assert q.connected
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, "5", True])
async def test_a_bad_timeout_is_refused_before_anything_is_sent(timeout: object) -> None:
    """BADPARAM in one line, nothing sent (the server would never be asked)."""
    asked: list[object] = []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(scripted_server, lambda event: asked.append(event) or [])
        async with connect(f"127.0.0.1:{port}", "1.10", reconnect=None) as q:
            for call in (
                lambda: q.confirm(1, timeout=timeout),
                lambda: q.confirm_many([1], timeout=timeout),
                lambda: q.status(timeout=timeout),
                lambda: q.locate("ORDERS", timeout=timeout),
                lambda: q.pending(["1.10"], timeout=timeout),
            ):
                with pytest.raises(BadParameter, match="timeout must be"):
                    await call()
        nursery.cancel_scope.cancel()
    # nothing but the close's GiveBack (a clean close says so: mrs.group.queues.detach)
    assert asked in ([], [wire.GiveBack([])]), asked
    with pytest.raises(BadParameter, match="request_timeout_s"):
        async with connect(f"127.0.0.1:{port}", "1.10", request_timeout_s=timeout):
            pass


# ------------------------------------------------------------ numbers no address has
BAD_ADDRESSES = [(-1, 10), (0, 10), (32001, 10), (1, 0), (1, 1000), (1, -5), (2**62, 2**62)]


@pytest.mark.parametrize(("group", "queue"), BAD_ADDRESSES)
async def test_a_located_naming_no_queue_address_is_a_protocol_error(
    group: int, queue: int
) -> None:
    """Before: `locate` returned Address(-1, 10) (and so on) as the queue's address.
    Now ProtocolFailure naming the numbers, and only that call fails: a status in
    flight beside it and the next locate are answered on the same connection."""

    def answers(event: object) -> list:
        if isinstance(event, wire.Locate):
            if event.name == "GOOD":
                return [wire.Located(event.request_id, 1, 10)]
            return [wire.Located(event.request_id, group, queue)]
        if isinstance(event, wire.StatusRequest):
            return [wire.StatusReply(event.request_id, {"ok": True})]
        return []

    async with trio.open_nursery() as nursery:
        port = await nursery.start(scripted_server, answers)
        with trio.fail_after(WAIT_S):
            async with connect(f"127.0.0.1:{port}", "1.10", reconnect=None) as q:
                statuses: list[dict] = []

                async def status() -> None:
                    statuses.append(await q.status())

                async with trio.open_nursery() as beside:
                    beside.start_soon(status)
                    with pytest.raises(ProtocolFailure) as refused:
                        await q.locate("HOSTILE")
                assert f"{group}.{queue}" in str(refused.value)
                assert "no queue address" in str(refused.value)
                assert statuses == [{"ok": True}]
                assert str(await q.locate("GOOD")) == "1.10"
                assert q.connected and q.reconnects == 0
        nursery.cancel_scope.cancel()


async def attaching_server(group: int, queue: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Answers Hello as group 1 and every Attach with Attached(group, queue)."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")

    async def serve(stream: trio.SocketStream) -> None:
        connection = wire.Connection("server")
        while data := await stream.receive_some(65536):
            connection.receive_data(data)
            for event in connection.events():
                if isinstance(event, wire.Attach):
                    answer = wire.Attached(event.request_id, group, queue)
                    await stream.send_all(connection.send(answer))
                else:
                    await answer_handshake(stream, connection, event)

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, serve, listeners)
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.sleep_forever()


@pytest.mark.parametrize(("group", "queue"), BAD_ADDRESSES[:4])
async def test_an_attached_naming_no_queue_address_is_passed_over(group: int, queue: int) -> None:
    """Before: the client took Attached(-1, 10) as the queue it is attached to (its
    `queue`, the resp_q of what it sends). Now that server is passed over like one
    answering with a frame that does not decode: alone, `connect` raises ConnectionLost
    naming the numbers; listed first, the client attaches at the next address."""
    async with trio.open_nursery() as nursery:
        hostile = await nursery.start(attaching_server, group, queue)
        with trio.fail_after(WAIT_S), pytest.raises(ConnectionLost) as lost:
            async with connect(f"127.0.0.1:{hostile}", "1.10", reconnect=None):
                pass
        assert f"answered Attach with {group}.{queue}, no queue address" in str(lost.value)
        assert "\n" not in str(lost.value)
        good = await nursery.start(scripted_server, lambda event: [])
        addresses = [f"127.0.0.1:{hostile}", f"127.0.0.1:{good}"]
        with trio.fail_after(WAIT_S):
            async with connect(addresses, "1.10", reconnect=None) as q:
                assert str(q.queue) == "1.10"
        nursery.cancel_scope.cancel()


# ------------------------------------------------------------ a server that closes at once
async def closing_server(task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Takes each connection and closes it without a byte (a crashing or wrong program)."""

    async def serve(stream: trio.SocketStream) -> None:
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, serve, listeners)
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.sleep_forever()


async def test_a_server_closing_unanswered_is_told_by_the_error_not_its_words() -> None:
    """`mrs status` said "it took the connection and closed it without answering" when
    the error's text ended with the client's own wording, so any rewording (or another
    error worded alike) changed what the operator read. Now the client marks the error
    where it reads the end of the stream (`closed_unanswered`) and `down_reason` reads
    that mark, wherever the error sits in the chain."""
    from mrs.tools.bus_status import down_reason

    async with trio.open_nursery() as nursery:
        port = await nursery.start(closing_server)
        with trio.fail_after(WAIT_S), pytest.raises(ConnectionLost) as lost:
            async with connect(f"127.0.0.1:{port}", "1.10", reconnect=None):
                pass
        nursery.cancel_scope.cancel()
    assert down_reason(lost.value) == "it took the connection and closed it without answering"
    worded_alike = ConnectionLost(
        Status.LINK_DOWN, "handshake with h:1 failed: mrs: LINK_DOWN: server closed the connection"
    )
    assert down_reason(worded_alike) != "it took the connection and closed it without answering"


async def test_pending_answered_with_a_negative_count_is_a_protocol_error() -> None:
    """Before: PendingCounts([-5]) was returned as -5 messages waiting (and a held
    message added made it -4). Now ProtocolFailure, and the connection serves on."""

    def answers(event: object) -> list:
        if isinstance(event, wire.ShowPending):
            return [wire.PendingCounts(event.request_id, [-5] * len(event.queues))]
        if isinstance(event, wire.StatusRequest):
            return [wire.StatusReply(event.request_id, {"ok": True})]
        return []

    async with trio.open_nursery() as nursery:
        port = await nursery.start(scripted_server, answers)
        with trio.fail_after(WAIT_S):
            async with connect(f"127.0.0.1:{port}", "1.10", reconnect=None) as q:
                with pytest.raises(ProtocolFailure, match="negative count"):
                    await q.pending(["1.10", "1.11"])
                assert await q.status() == {"ok": True}
        nursery.cancel_scope.cancel()


async def test_a_put_never_answered_says_the_message_may_be_stored() -> None:
    """A put whose answer never came (its timeout + REPLY_GRACE_S) raised ReplyTimeout
    "no answer from the server in time", which neither named the server nor said the
    message may be stored. Now the one line says both."""
    async with trio.open_nursery() as nursery:
        port = await nursery.start(scripted_server, lambda event: [])
        with trio.fail_after(WAIT_S):
            async with connect(f"127.0.0.1:{port}", "1.10", reconnect=None) as q:
                with pytest.raises(ReplyTimeout) as timed_out:
                    await q.put(b"x", "1.10", delivery=DeliveryMode.WF_DQF, timeout=0.1)
        nursery.cancel_scope.cancel()
    line = str(timed_out.value)
    assert line.startswith(f"mrs: TIMEOUT: Put: no answer from 127.0.0.1:{port} within 5.1 s")
    assert "may or may not be stored" in line
