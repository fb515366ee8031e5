"""`locate` (pams_locate_q) and `pending` (putil_show_pending), async and blocking,
against real `mrs serve` processes: one group, and two groups across a link (the
names of the other group resolved from the bus, its counts asked over the link)."""

from __future__ import annotations

import pytest
import trio

from clients import (
    Address,
    BadParameter,
    DeliveryMode,
    MrsError,
    NoSuchQueue,
    NotAuthorized,
    Status,
    connect,
    connect_sync,
)
from mrs.limits import PENDING_QUERY_WAIT_S, PENDING_QUEUES_MAX, QUEUE_NAME_CHARS_MAX
from sim.bus import LinkedBus
from tests.auth_helpers import SecureBus, creds
from tests.process.test_links import QUEUES, wait_for_link

OWN_QUEUE = """
[[group.queue]]
id = 20
name = "ONLY{group}"
"""


async def test_locate_answers_names_addresses_and_refuses_with_one_line(bus) -> None:
    async with bus.connect(None) as client:
        assert await client.locate("ORDERS") == Address(1, 10)
        assert await client.locate("1.11") == Address(1, 11)
        assert await client.locate(Address(1, 12)) == Address(1, 12)
        assert await client.locate(" SMALL ") == Address(1, 14)
        with pytest.raises(NoSuchQueue) as unknown:
            await client.locate("NOPE")
        assert "NOPE" in unknown.value.message and "\n" not in unknown.value.message
        with pytest.raises(NoSuchQueue):
            await client.locate("1.55")  # a number no queue of the group has
        for bad in ("", "x" * (QUEUE_NAME_CHARS_MAX + 1), 7):
            with pytest.raises(BadParameter) as refused:
                await client.locate(bad)  # type: ignore[arg-type]
            assert refused.value.status == Status.BADPARAM
        assert await client.locate("ORDERS") == Address(1, 10)  # the connection stays


async def test_pending_counts_waiting_messages_not_unconfirmed_ones(bus) -> None:
    async with bus.connect("ORDERS") as client:
        for index in range(3):
            await client.put(b"%d" % index, "1.10", delivery=DeliveryMode.WF_DQF)
        await client.put(b"mem", "ANYORDER", delivery=DeliveryMode.WF_MEM)
        assert await client.pending(["ORDERS", "1.11", Address(1, 12)]) == [3, 1, 0]
        message = await client.get(timeout=5)
        assert await client.pending(["1.10"]) == [2]  # delivered, unconfirmed: not pending
        await client.confirm(message.seq)
        assert await client.pending(["ORDERS", "ORDERS"]) == [2, 2]
        with pytest.raises(NoSuchQueue) as unknown:
            await client.pending(["ORDERS", "NOPE"])
        assert "NOPE" in unknown.value.message
        for bad in ("ORDERS", [], ["1.10"] * (PENDING_QUEUES_MAX + 1), [b"1.10"], None):
            with pytest.raises(BadParameter):
                await client.pending(bad)  # type: ignore[arg-type]


def test_the_blocking_client_locates_and_counts(bus) -> None:
    with connect_sync(bus.address, "ORDERS") as client:
        client.put(b"one", "ORDERS")
        assert client.locate("IMPLICIT") == Address(1, 12)
        assert client.pending(["ORDERS", "IMPLICIT"]) == [1, 0]
        with pytest.raises(NoSuchQueue):
            client.locate("NOPE")
        with pytest.raises(BadParameter):
            client.pending("ORDERS")


@pytest.fixture
async def two_groups(tmp_path, nursery):
    """Groups 1 and 2 as real processes, linked through a fault proxy; each has its own
    queue ONLY1 / ONLY2 besides the queues both have."""
    own = {group: OWN_QUEUE.format(group=group) for group in (1, 2)}
    linked = LinkedBus(tmp_path / "bus", queues=QUEUES, group_extras=own)
    await linked.start_proxies(nursery)
    await trio.to_thread.run_sync(linked.start)
    await wait_for_link(linked, 1, 2)
    yield linked
    linked.stop()


async def test_locate_and_pending_across_a_link(two_groups) -> None:
    async with two_groups.connect(1, "IN") as client:
        assert await client.locate("ONLY2") == Address(2, 20)  # a name of the other group
        assert await client.locate("G2.IN") == Address(2, 10)
        assert await client.locate("IN") == Address(1, 10)  # its own group's first
        for index in range(4):
            await client.put(b"%d" % index, "G2.IN", delivery=DeliveryMode.WF_DQF)
        await client.put(b"here", "1.11", delivery=DeliveryMode.WF_DQF)
        counts = await client.pending(["2.10", "1.11", "ONLY2", "G2.IN", "1.10"])
        assert counts == [4, 1, 0, 4, 0]
    async with two_groups.connect(2, "IN") as receiver:
        message = await receiver.get(timeout=10)
        await receiver.confirm(message.seq)
        assert await receiver.pending(["1.11", "IN"]) == [1, 3]  # asked the other way
    async with two_groups.connect(1, None) as client:
        assert await client.pending(["2.10"]) == [3]
        with pytest.raises(NoSuchQueue):
            await client.pending(["2.99"])
        two_groups.proxy(1, 2).cut()
        await wait_for_link(two_groups, 1, 2, state="down")
        with pytest.raises(MrsError) as down:
            await client.pending(["1.11", "2.10"])
        assert down.value.status == Status.LINK_DOWN
        assert "group 2" in down.value.message
        assert await client.locate("ONLY2") == Address(2, 20)  # names need no link
        assert await client.pending(["1.11"]) == [1]


async def test_a_count_the_other_group_never_sends_is_answered(make_mem_linked) -> None:
    """The link goes silent or drops while the query travels: the request is answered
    (TIMEOUT after PENDING_QUERY_WAIT_S, or LINK_DOWN), never left waiting."""
    linked = await make_mem_linked(queues=QUEUES)
    await wait_for_link(linked, 1, 2)
    async with linked.connect(1, None) as client:
        linked.proxy(1, 2).blackhole()
        start_s = trio.current_time()
        with pytest.raises(MrsError) as silent:
            await client.pending(["2.10"])
        assert silent.value.status == Status.TIMEOUT
        assert "group 2 did not answer" in silent.value.message
        assert trio.current_time() - start_s == pytest.approx(PENDING_QUERY_WAIT_S, abs=0.5)
        linked.proxy(1, 2).heal()
        await wait_for_link(linked, 1, 2)
        assert await client.pending(["2.10"]) == [0]
        linked.proxy(1, 2).cut()
        with pytest.raises(MrsError) as lost:
            await client.pending(["2.10"])
        assert lost.value.status == Status.LINK_DOWN


@pytest.fixture
def secure(tmp_path):
    """One group, a real process, with [auth] on (tests/auth_helpers.py)."""
    bus = SecureBus(tmp_path / "secure", group_ids=(1,))
    bus.start()
    yield bus
    bus.stop()


async def test_with_auth_a_queue_is_located_and_counted_only_with_a_grant_on_it(
    secure,
) -> None:
    """What a principal may attach to or put to it may find and count; nothing else
    (a principal with no grant on a queue learns nothing of its traffic)."""
    address = secure.address(1)
    async with connect(address, "1.13", credentials=creds("producer")) as producer:
        await producer.put(b"m", "1.10", delivery=DeliveryMode.WF_DQF)  # put grant on 1.10
        assert await producer.locate("IN") == Address(1, 10)
        assert await producer.pending(["IN", "SENDER"]) == [1, 0]
        with pytest.raises(NotAuthorized, match="locate of 1.11 needs a grant"):
            await producer.locate("OTHER")
        with pytest.raises(NotAuthorized, match="pending count of 1.11 needs a grant"):
            await producer.pending(["IN", "1.11"])
    async with connect(address, None, credentials=creds("ops")) as ops:  # admin status
        assert await ops.pending(["OTHER", "IN"]) == [0, 1]
