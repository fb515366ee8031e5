"""The MessageQ calls as an application developer makes them, against a real `mrs
serve`: `putil_show_pending` given its queues as an iterable, and the journal readers
(`pams_open_jrn`, local and through the group) given a queue number where a queue
address belongs. What must hold: the call answers what it was asked, and a mistake is
one BadParameter line (client-library.md, "MessageQ call -> MRS call"), never a
Python traceback from inside the library."""

from __future__ import annotations

import pytest

from clients import BadParameter, connect, connect_sync, open_journal

WAIT_S = 30.0
"""Generous: the machine is shared; an answer that never comes fails the test."""


def test_pending_counts_the_queues_a_generator_names(bus) -> None:
    """`pending` reads the queues it is given once. Before, its up-front check read a
    generator and the request went out empty: two queues asked, one holding a message,
    raised BadParameter "give 1..100 queues, got 0"."""
    with connect_sync(bus.address, "SENDER") as sender:
        sender.put(b"order 1", "ORDERS")
        queues = (name for name in ["ORDERS", "ANYORDER"])
        assert sender.pending(queues, timeout=WAIT_S) == [1, 0]


async def test_pending_refuses_a_held_count_that_is_no_count(bus) -> None:
    """`kept` (what the blocking client holds for its next get) is added to the
    attached queue's count: a negative one was returned as a negative count, and a
    string raised TypeError from inside the call."""
    async with connect(bus.address, "ANYORDER") as client:
        for kept in (-5, "x"):
            with pytest.raises(BadParameter, match="pending: kept is an int >= 0"):
                await client.pending(["ANYORDER"], kept=kept, timeout=WAIT_S)  # type: ignore[arg-type]
        assert await client.pending(["ANYORDER"], kept=2, timeout=WAIT_S) == [2]


def test_a_journal_reader_given_a_queue_number_says_so_in_one_line(bus) -> None:
    """`open_journal(target=10)`: a queue number where "G.Q", an Address or a list of
    them belongs. Before, both readers raised TypeError ("'int' object is not
    iterable") from `list(10)`; now BadParameter names the argument, as every other
    bad selection does. A confirmed message is still found by its address."""
    with connect_sync(bus.address, "SENDER") as sender:
        sender.put(b"audited", "ANYORDER")
    with connect_sync(bus.address, "ANYORDER") as receiver:
        receiver.get(timeout=WAIT_S).confirm()
        for name in ("target", "source"):
            with pytest.raises(BadParameter, match=f"open_journal: {name} is a queue address"):
                open_journal(bus.data_dir, "pcj", **{name: 10})
            with pytest.raises(BadParameter, match=f"open_journal: {name} is a queue address"):
                receiver.open_journal("pcj", **{name: 10})
        with receiver.open_journal("pcj", target="1.11") as remote:
            assert [record.body for record in remote] == [b"audited"]
