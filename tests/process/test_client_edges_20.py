"""The client library at its edges, as an application that must not lose a message
meets them: an interrupt landing anywhere in a blocking call, a put whose headers are
too big for a frame (online and journaled in the client's SAF journal), and the
mistakes of a caller's arguments -- each one clear `BadParameter`, never a bare
TypeError from inside, and the client still working afterwards. Real `mrs serve`
processes, real sockets, a real client SAF journal."""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from clients import (
    BadParameter,
    DeliveryMode,
    MessageTooBig,
    NoMoreMessages,
    PutItem,
    Status,
    connect,
    connect_sync,
    put_once,
)
from clients.sync import SyncClient
from mrs.limits import HEADERS_BYTES_MAX
from tests.client_helpers import FAST_RECONNECT, FixedPortServer, interrupt_at

WAIT_S = 30.0
"""Deadline for what another process must do (a loaded 2-core CI machine)."""


@pytest.fixture
def server(tmp_path: Path):
    """One group on a fixed port (standard queues), stopped at the end."""
    started = FixedPortServer(tmp_path / "bus")
    started.start()
    yield started
    started.stop()


def _take_all(client: SyncClient) -> list[bytes]:
    """Bodies of every message now on the client's queue, each confirmed."""
    bodies = []
    while True:
        try:
            message = client.get(timeout=0)
        except NoMoreMessages:
            return bodies
        message.confirm()
        bodies.append(message.body)


def test_an_interrupt_in_the_blocking_clients_liveness_check_leaves_it_working(
    server: FixedPortServer,
) -> None:
    """A KeyboardInterrupt landing inside the blocking client's check that its trio
    thread still runs. Before, the check was `Thread.is_alive()`, which on Python <
    3.13 marks a running thread stopped when interrupted there: every later call
    raised ConnectionLost("client closed") while the client ran on, attached, in its
    thread, and `close()` left it so, holding the queue (QUEUE_BUSY) for the rest of
    the process. This is why test_interrupts_at_any_moment_of_a_sync_get_lose_no_message
    once failed with "client closed"."""
    with connect_sync(server.address, "SENDER") as sender:
        sender.put(b"kept", "ANYORDER", delivery=DeliveryMode.WF_DQF)
    receiver = connect_sync(server.address, "ANYORDER")
    got: list[bytes] = []
    sys.settrace(  # at the lock's try: what `is_alive()` and `join()` run
        interrupt_at(threading.Thread._wait_for_tstate_lock, "if lock.acquire(")
    )
    try:
        message = receiver.get(timeout=WAIT_S)
        message.confirm()
        got.append(message.body)
    except KeyboardInterrupt:
        pass  # landed: the get was given up (or never began); its message is not lost
    finally:
        sys.settrace(None)
    got += _take_all(receiver)
    receiver.close()
    assert got == [b"kept"]
    with connect_sync(server.address, "ANYORDER") as again:  # the queue was given back
        assert _take_all(again) == []


async def test_headers_too_big_for_a_frame_are_refused_and_the_connection_lives(
    server: FixedPortServer,
) -> None:
    """A put whose headers are bigger than the group's frame limit is refused
    MSGTOOBIG here, and the connection serves on. Before, the frame went out, the
    group closed the connection on it, the put raised PutOutcomeUnknown ("may or may
    not be stored") and every other request on the connection failed with it: a get
    another task had waiting raised ConnectionLost."""
    async with connect(server.address, "ANYORDER", reconnect=FAST_RECONNECT) as client:
        received: list[bytes] = []
        async with trio.open_nursery() as nursery:

            async def wait_for_one() -> None:
                message = await client.get(timeout=WAIT_S)
                await message.confirm()
                received.append(message.body)

            nursery.start_soon(wait_for_one)
            await trio.sleep(0)  # the get is waiting
            with pytest.raises(MessageTooBig, match="headers of"):
                await client.put(b"x", "ANYORDER", headers={"blob": "y" * (3 << 20)})
            with pytest.raises(MessageTooBig, match="headers of"):
                await client.put(b"x", "ANYORDER", headers={"blob": "y" * HEADERS_BYTES_MAX})
            psb = await client.put(b"fine", "ANYORDER", headers={"blob": "y" * 100})
            assert psb.status == Status.SUCCESS
        results = await client.put_many([PutItem(b"x", "ANYORDER", headers={"b": "y" * (3 << 20)})])
        assert isinstance(results[0], MessageTooBig)
        assert received == [b"fine"] and client.reconnects == 0


async def test_a_journaled_put_with_headers_too_big_is_refused_and_the_drain_goes_on(
    tmp_path: Path,
) -> None:
    """With the server down, a recoverable put is journaled in the client's SAF
    journal and answered STORED. Before, one whose headers were too big for the
    group was journaled all the same: at drain time a frame over the group's limit
    made it close the connection, and the drain reconnected and sent the same record
    again for ever (hundreds of reconnects a second) -- every put journaled after it,
    each answered STORED, waited behind it and never arrived. One that fitted alone
    but not with the headers the drain adds was refused MSGTOOBIG at drain time,
    after its STORED. Now both are refused when put, and the rest drains."""
    server = FixedPortServer(tmp_path / "bus")
    saf = tmp_path / "saf"
    try:
        async with connect(
            server.address, "SENDER", saf_journal=saf, reconnect=FAST_RECONNECT
        ) as sender:
            assert sender.attach_status == Status.JOURNAL_ON
            for size_bytes in (3 << 20, HEADERS_BYTES_MAX - 64):
                with pytest.raises(MessageTooBig, match="headers of"):
                    await sender.put(b"big", "ANYORDER", headers={"blob": "y" * size_bytes})
            psb = await sender.put(b"after", "ANYORDER", headers={"note": "small"})
            assert (psb.status, psb.delivery_status) == (Status.JOURNAL_ON, Status.STORED)
            server.start()
            with trio.fail_after(WAIT_S):
                await sender.wait_journal_status(Status.LINK_UP)
            assert sender.journal_backlog == 0 and sender.reconnects <= 1
        async with connect(server.address, "ANYORDER") as receiver:
            message = await receiver.get(timeout=WAIT_S)
            assert message.body == b"after" and message.headers["note"] == "small"
    finally:
        server.stop()


def _bad_calls(client: SyncClient) -> dict[str, Callable[[], object]]:
    """Calls with a caller's mistake in one argument, by name."""
    return {
        "put body str": lambda: client.put("text", "ANYORDER"),
        "put body None": lambda: client.put(None, "ANYORDER"),
        "put body list of ints": lambda: client.put([104, 105], "ANYORDER"),
        "put delivery name": lambda: client.put(b"x", "ANYORDER", delivery="WF_MEM"),
        "put delivery None": lambda: client.put(b"x", "ANYORDER", delivery=None),
        "put uma name": lambda: client.put(b"x", "ANYORDER", uma="DLJ"),
        "confirm force_j name": lambda: client.confirm(1, 0, "FORCE_JRN"),
        "confirm force_j None": lambda: client.confirm(1, 0, None),
        "confirm_many None": lambda: client.confirm_many(None),
        "confirm_many one seq": lambda: client.confirm_many(7),
        "put_many None": lambda: client.put_many(None),
        "get_many None": lambda: client.get_many(None, timeout=0),
        "wait_connected text": lambda: client.wait_connected("5"),
        "wait_connected negative": lambda: client.wait_connected(-1),
        "wait_connected NaN": lambda: client.wait_connected(math.nan),
        "admin action int": lambda: client.admin(5),
    }


def test_a_callers_mistake_is_one_bad_parameter_and_sends_nothing(
    server: FixedPortServer,
) -> None:
    """docs/client-library.md: "bad input raises BadParameter (status BADPARAM) with
    one line and sends nothing". Before, each of these raised a bare TypeError or
    ValueError from deep inside (`bytes("text")`, `int("WF_MEM")`, `len(None)`, trio's
    `fail_after(-1)`), the blocking get_many(None) a TypeError after taking a message,
    admin(5) a PROTOCOL_ERROR, and put([104, 105]) stored b"hi". Items of put_many
    that are no PutItem are refused in their place; a generator of items or seqs is
    taken as a list."""
    with connect_sync(server.address, "ANYORDER") as client:
        for name, call in _bad_calls(client).items():
            with pytest.raises(BadParameter) as raised:
                call()
            assert raised.value.status == Status.BADPARAM, name
            assert "\n" not in str(raised.value), name
        results = client.put_many(
            [(b"tuple", "ANYORDER"), PutItem("text", "ANYORDER"), PutItem(b"ok", "ANYORDER")]
        )
        assert [type(result).__name__ for result in results[:2]] == ["FieldRefused"] * 2
        assert results[2].status == Status.SUCCESS
        generated = client.put_many(PutItem(b"gen%d" % n, "ANYORDER") for n in range(2))
        assert [result.status for result in generated] == [Status.SUCCESS] * 2
        messages = client.get_many(10, timeout=WAIT_S)
        assert [message.body for message in messages] == [b"ok", b"gen0", b"gen1"]
        assert client.confirm_many(message.seq for message in messages) == [None] * 3
        assert _take_all(client) == []  # nothing of the mistakes was stored


@pytest.mark.parametrize("within_s", [math.nan, -1.0, "5"])
async def test_put_once_refuses_a_bound_that_is_no_length_of_time(
    server: FixedPortServer, within_s: object
) -> None:
    """`put_once(..., within_s=)` that is no number of seconds >= 0 is BADPARAM, and
    nothing is sent. Before, trio's bare ValueError ("`seconds` must not be NaN") or
    TypeError reached the caller from inside the library."""
    async with connect(server.address, "SENDER") as client:
        with pytest.raises(BadParameter, match="within_s"):
            await put_once(client, b"x", "ANYORDER", "once-key", within_s=within_s)
        assert (await client.pending(["ANYORDER"])) == [0]
