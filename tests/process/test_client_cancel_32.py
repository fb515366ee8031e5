"""Probes of the client library under cancellation, against real server processes: a
call given up at any point must leave neither a message lost nor a queue jammed nor
a duplicate without its mark."""

from __future__ import annotations

import contextlib
import json

import pytest
import trio

from clients import ProtectionRefused, connect
from mrs.model import POSSIBLE_DUPLICATE_HEADER
from tests.process.test_protection_bus import (  # noqa: F401 - fixtures
    app,
    dump,
    keys,
    put_in_order,
    start_group,
)


@pytest.mark.parametrize("given_up_at", ["put", "confirm"])
async def test_a_get_given_up_while_its_refused_message_is_dead_lettered_jams_nothing(
    start_group,  # noqa: F811 - a fixture
    keys,  # noqa: F811 - a fixture
    given_up_at: str,
) -> None:
    """A get on an in-order protected queue that meets a refused message puts it on
    the DLQ and confirms it. Given up (its cancel scope) while that DLQ put waited for
    its answer, the message was dropped by the client: neither handed out nor
    confirmed; given up while its confirm waited (refused BADSEQ: an older message is
    unconfirmed), that answer was lost and the confirm never made again. Either way
    the application's next confirm was refused BADSEQ naming a message it never saw,
    for as long as the connection lasted. Now the next get moves it again under its
    key (the copy marked a possible duplicate) and confirms it, and a confirm under
    way is waited for, so it is confirmed after the older one as when not given up."""
    group, directory = start_group()
    bodies = [b"good-1", b"bad-2", b"good-3"]
    await put_in_order(group.address, app(directory, keys, "SHOP"), bodies)
    async with connect(group.address, "1.15", protection=app(directory, keys, "BILLING")) as q:
        first = await q.get(timeout=5)
        call = getattr(q, given_up_at)

        async def give_up_at_the_refused_message(*args: object, **options: object):
            if args[0] != first.seq:  # the DLQ put (a body), or the refused one's confirm
                scope.cancel()  # sent, then its wait for the answer is cancelled
            return await call(*args, **options)

        setattr(q, given_up_at, give_up_at_the_refused_message)
        with trio.CancelScope() as scope, contextlib.suppress(ProtectionRefused):
            await q.get(timeout=5)  # a confirm given up is waited for: then refused
        assert scope.cancel_called
        delattr(q, given_up_at)
        third = await q.get(timeout=5)
        assert third.body == b"good-3"
        assert await q.confirm_many([first.seq, third.seq]) == [None, None]
    async with connect(group.address, "1.15", protection=app(directory, keys, "BILLING")) as q:
        assert await q.pending(["1.15"]) == [0]
    records = [json.loads(line) for line in dump(directory, "dlj").splitlines()]
    assert {record["body"] for record in records} == {"bad-2"}
    assert all(record["headers"].get(POSSIBLE_DUPLICATE_HEADER) for record in records[1:])
