"""The client library as an application developer who must not lose a message calls
it: a get whose deadline has under a millisecond left, options of the wrong type given
to `connect`, the blocking client called from inside a trio task, and a selective get
after an interrupted blocking get. Each against a real `mrs serve` over real sockets."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from clients import (
    BadParameter,
    Client,
    DeliveryMode,
    MrsTimeout,
    NoMoreMessages,
    Status,
    connect,
    connect_sync,
)
from clients.sync import SyncClient
from mrs.core.selection import by_correlation_id
from tests.client_helpers import FixedPortServer, interrupt_at

WAIT_S = 30.0
"""Deadline for what another process must do (a loaded 2-core CI machine)."""

TIMEOUT_S_UNDER_A_MS = 0.0004
"""A positive get timeout that rounds to 0 ms: what `deadline - now` leaves a loop
that computes each get's timeout from its own deadline."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FixedPortServer]:
    """One group on a fixed port (standard queues), stopped at the end."""
    started = FixedPortServer(tmp_path / "bus")
    started.start()
    yield started
    started.stop()


GETS_UNDER_A_MS: dict[str, tuple[str, Callable[[Client], Awaitable[object]]]] = {
    "get_many": ("ANYORDER", lambda q: q.get_many(5, timeout=TIMEOUT_S_UNDER_A_MS)),
    "selective get": (
        "ANYORDER",
        lambda q: q.get(timeout=TIMEOUT_S_UNDER_A_MS, select=by_correlation_id(b"none")),
    ),
    "selective get_many": (
        "ANYORDER",
        lambda q: q.get_many(3, timeout=TIMEOUT_S_UNDER_A_MS, select=by_correlation_id(b"x")),
    ),
    "get on an implicit queue": ("IMPLICIT", lambda q: q.get(timeout=TIMEOUT_S_UNDER_A_MS)),
}


@pytest.mark.parametrize("shape", list(GETS_UNDER_A_MS))
async def test_a_get_with_under_a_millisecond_left_times_out_it_does_not_poll(
    server: FixedPortServer, shape: str
) -> None:
    """A get given a positive timeout that finds nothing raises MrsTimeout, however
    little the timeout. Before, one under half a millisecond was rounded to 0 ms and
    sent as a poll: get_many, a selective get and a get on an implicit queue raised
    NoMoreMessages, which a consumer loop catching MrsTimeout (what the docs and a
    plain get give) did not catch, and the loop died at its deadline's last moment."""
    queue, call = GETS_UNDER_A_MS[shape]
    async with connect(server.address, queue) as client:
        with pytest.raises(MrsTimeout) as raised:
            await call(client)
        assert not isinstance(raised.value, NoMoreMessages)
        with pytest.raises(NoMoreMessages):  # a poll is still a poll
            await client.get(timeout=0)


WRONG_OPTIONS: dict[str, dict[str, Any]] = {
    "reconnect": {"reconnect": 5},
    "reconnect class": {"reconnect": "Reconnect()"},
    "tls": {"tls": "ca.pem"},
    "credentials": {"credentials": ("producer", "secret")},
    "protection": {"protection": {"SHOP": "key"}},
    "program": {"program": 7},
}


@pytest.mark.parametrize("option", list(WRONG_OPTIONS))
async def test_connect_refuses_an_option_of_the_wrong_type_at_once(
    server: FixedPortServer, option: str
) -> None:
    """An option of the wrong type is one BadParameter from `connect`, naming it.
    Before, `reconnect=5` was taken and the first drop -- a server restart, the moment
    the client must carry on -- ended the application with a bare AttributeError
    from the background reconnect; a wrong tls, credentials or protection raised a
    bare AttributeError too, a wrong program a protocol error."""
    with pytest.raises(BadParameter, match=f"connect: {option.split()[0]} must be"):
        async with connect(server.address, "SENDER", **WRONG_OPTIONS[option]):
            pass
    with pytest.raises(BadParameter, match="connect: address must be"):
        async with connect(7001, "SENDER"):  # type: ignore[arg-type]
            pass
    async with connect(server.address, "SENDER") as client:  # nothing was left attached
        assert client.queue is not None and client.queue.queue == 13


async def test_the_blocking_client_inside_a_trio_task_refuses_and_gives_its_queue_back(
    server: FixedPortServer,
) -> None:
    """`connect_sync` used from inside a trio task (a script's helper called from
    async code): its calls refuse with one BadParameter saying what to use instead,
    and leaving the `with` detaches. Before, the call raised trio's RuntimeError
    ("this is a blocking function; call it from a thread"), the close raised it again,
    and the client's thread stayed attached for the rest of the process: the next
    program part attaching to the queue met QUEUE_BUSY."""
    with pytest.raises(BadParameter, match="use `async with clients.connect"):  # noqa: SIM117
        with connect_sync(server.address, "SENDER") as blocking:
            blocking.put(b"from a trio task", "ANYORDER")
    async with connect(server.address, "SENDER") as client:  # given back: no QUEUE_BUSY
        psb = await client.put(b"after", "ANYORDER", delivery=DeliveryMode.WF_DQF)
        assert psb.delivery_status == Status.STORED

    def from_a_worker_thread() -> Status:
        with connect_sync(server.address, "SENDER2") as worker:
            return worker.put(b"worker", "ANYORDER").delivery_status

    assert await trio.to_thread.run_sync(from_a_worker_thread) == Status.STORED


def _get_interrupted_as_its_message_came(receiver: SyncClient) -> None:
    """A blocking get stopped by KeyboardInterrupt on the line of `SyncClient._call`
    that runs once the client's trio thread has handed the answer over, as a Ctrl-C
    landing there does: the client keeps the message for the next get (`_given_back`)."""
    sys.settrace(interrupt_at(SyncClient._call, "return result if convert"))
    try:
        with pytest.raises(KeyboardInterrupt):
            receiver.get(timeout=WAIT_S)
    finally:
        sys.settrace(None)


def test_a_selective_get_takes_the_message_an_interrupted_blocking_get_kept(
    server: FixedPortServer,
) -> None:
    """Ctrl-C landing just as a blocking get's message came: the client keeps it for
    the next get, and a selective get that matches it takes it first, as the async
    client's selective get takes its held messages. Before, the selective get passed
    over the kept message and returned the next one, whose confirm on the in-order
    queue failed BADSEQ ("confirm <kept> before <next>")."""
    with connect_sync(server.address, "SENDER") as sender:
        for body in (b"first", b"second"):
            sender.put(body, "ORDERS", correlation_id=b"order-7")
    with connect_sync(server.address, "ORDERS") as receiver:
        _get_interrupted_as_its_message_came(receiver)
        select = by_correlation_id(b"order-7")
        bodies = []
        for _ in range(2):
            message = receiver.get(timeout=WAIT_S, select=select)
            message.confirm()  # in order: the kept message was delivered first
            bodies.append(message.body)
        assert bodies == [b"first", b"second"]
        with pytest.raises(NoMoreMessages):
            receiver.get(timeout=0)


def test_pending_counts_the_message_an_interrupted_blocking_get_kept(
    server: FixedPortServer,
) -> None:
    """The async client's pending() counts the messages it holds for the next get; the
    blocking client's left out the one it kept from a get interrupted as its message
    came, so a script polling pending() before get() saw 0 and never took it."""
    with connect_sync(server.address, "SENDER") as sender:
        sender.put(b"kept", "ORDERS")
    with connect_sync(server.address, "ORDERS") as receiver:
        _get_interrupted_as_its_message_came(receiver)
        assert receiver.pending(["ORDERS"]) == [1]
        assert receiver.get(timeout=0).body == b"kept"
        assert receiver.pending(["ORDERS"]) == [0]


@pytest.mark.parametrize(
    ("field", "value"),
    [("target", None), ("target", 10), ("target", b"1.10"), ("resp_q", 10), ("resp_q", b"1.10")],
)
async def test_a_put_to_something_that_is_no_queue_is_refused_in_one_line(
    server: FixedPortServer, field: str, value: object
) -> None:
    """`target=None` went out as the queue name "None" (NOSUCHQUEUE "no queue named
    'None'", the caller's mistake hidden), an int as a name. A queue is a str or an
    Address (resp_q None: no response queue): anything else is BADPARAM before
    anything is sent."""
    async with connect(server.address, "SENDER") as sender:
        arguments = {"target": "ORDERS", field: value}
        with pytest.raises(BadParameter, match="a queue is a str or an Address"):
            await sender.put(b"x", **arguments)  # type: ignore[arg-type]
        orders = await sender.locate("ORDERS")  # an Address is a queue too
        psb = await sender.put(b"x", **{"target": "ORDERS", field: orders})
        assert psb.status == Status.SUCCESS
