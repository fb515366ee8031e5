"""Bounds found by flooding one group from many angles (real `mrs serve` processes,
real TCP, real LMDB files): past a bound a group drops what it cannot keep and says
so, but its log grows by one line per state change or a rate-limited summary with a
count, never by one line per message or per redial of a sustained refusal."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from clients import DeliveryMode, Uma
from clients.batch import PutItem
from mrs.limits import ACKS_OWED_PER_PEER_MAX, LINK_BACKOFF_S_MAX, RECEIPTS_PER_PEER_MAX
from sim.bus import LinkedBus
from tests.process.test_auth_lifecycle import wait_for_log
from tests.process.test_links import link_state, wait_for_link

QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-out-of-order"
messages_max = 30000
[[group.queue]]
id = 11
name = "OUT"
messages_max = 30000
"""
"""Queues deep enough to hold more messages than the bound under test."""

BEYOND = 300
"""Messages past the bound: before, each wrote one ERROR line."""
PUT_CHUNK = 1000
WAIT_S = 20.0


@asynccontextmanager
async def _linked(
    tmp_path: Path, nursery: trio.Nursery, started: tuple[int, ...]
) -> AsyncIterator[LinkedBus]:
    """Groups 1 and 2 linked through a fault proxy; only `started` run (a group not
    started is down for the whole test: with no group 2, no proxy listens for it)."""
    linked = LinkedBus(tmp_path / "bus", queues=QUEUES)
    try:
        if len(started) == 2:
            await linked.start_proxies(nursery)
        for group_id in started:
            await trio.to_thread.run_sync(linked.processes[group_id].start)
        yield linked
    finally:
        linked.stop()


async def _put_ak_deq(linked: LinkedBus, target: str, count: int, **options: str) -> None:
    """`count` AK_DEQ messages (in memory) from group 1's OUT, each accepted."""
    async with linked.connect(1, "OUT") as sender:
        for start in range(0, count, PUT_CHUNK):
            items = [
                PutItem(b"x", target, delivery=DeliveryMode.AK_DEQ, uma=Uma.DISC, **options)
                for _ in range(min(PUT_CHUNK, count - start))
            ]
            results = await sender.put_many(items)
            assert all(hasattr(result, "seq") for result in results), results[:3]


async def _get_all(linked: LinkedBus, group_id: int, count: int) -> None:
    """Get `count` messages of the group's IN (each get is the message's DEQ)."""
    got = 0
    async with linked.connect(group_id, "IN") as receiver:
        with trio.fail_after(WAIT_S):
            while got < count:
                got += len(await receiver.get_many(PUT_CHUNK, timeout=5))


def _lines(linked: LinkedBus, group_id: int, found: Callable[[str], bool]) -> list[str]:
    log = linked.directory / f"group{group_id}.log"
    return [line for line in log.read_text(errors="replace").splitlines() if found(line)]


async def test_mrs_acks_lost_for_a_down_group_are_one_summary_line(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """AK_DEQ messages whose response queue is in group 2, down the whole time: their
    MRS_ACKs wait in group 1's outbox, ACKS_OWED_PER_PEER_MAX at most, and the rest
    are dropped. Each dropped one wrote an ERROR line (300 messages past the bound,
    300 lines; a busy consumer writes thousands a second). Now the first says so and
    the rest are counted into a line at most every REFUSAL_LOG_INTERVAL_S."""
    async with _linked(tmp_path, nursery, started=(1,)) as linked:
        count = ACKS_OWED_PER_PEER_MAX + BEYOND
        await _put_ak_deq(linked, "1.10", count, resp_q="2.11")
        await _get_all(linked, 1, count)
        link = await link_state(linked, 1, 2)  # also: every MRS_ACK was made before it
        assert (link["state"], link["mrs_acks_owed"]) == ("down", ACKS_OWED_PER_PEER_MAX)
        lost = _lines(linked, 1, lambda line: "MRS_ACK for seq" in line and " lost: " in line)
        assert 1 <= len(lost) <= 2, lost[:5]
        assert f"{ACKS_OWED_PER_PEER_MAX} already owed to group 2" in lost[0]


async def test_notices_lost_for_a_down_group_are_one_summary_line(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Group 1's AK_DEQ messages reached group 2, then the link was cut: their DEQ
    notices are kept for group 1, RECEIPTS_PER_PEER_MAX at most. Each one dropped
    beyond wrote an ERROR line; now a rate-limited line with a count."""
    async with _linked(tmp_path, nursery, started=(1, 2)) as linked:
        await wait_for_link(linked, 1, 2)
        count = RECEIPTS_PER_PEER_MAX + BEYOND
        await _put_ak_deq(linked, "2.10", count)
        async with linked.connect(2, None) as client:
            with trio.fail_after(WAIT_S):  # all of them arrived in group 2
                while (await client.pending(["2.10"]))[0] < count:
                    await trio.sleep(0.05)
        linked.proxy(1, 2).cut()
        await wait_for_link(linked, 2, 1, "down")
        await _get_all(linked, 2, count)
        link = await link_state(linked, 2, 1)  # also: every notice was kept or dropped
        assert link["receipts_pending"] == RECEIPTS_PER_PEER_MAX
        lost = _lines(linked, 2, lambda line: "notice for message" in line and " lost: " in line)
        assert 1 <= len(lost) <= 2, lost[:5]


async def test_a_link_that_cannot_dial_logs_changes_not_each_dial(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """Group 2 is down: group 1 redials with a backoff doubling up to
    LINK_BACKOFF_S_MAX, and every dial wrote an INFO line, 43,200 a day per link
    once at the cap. Now the first failure and the backoff reaching its cap are
    logged at once, and the same failure again at most every REFUSAL_LOG_INTERVAL_S
    with the count of dials not shown."""
    async with _linked(tmp_path, nursery, started=(1,)) as linked:
        log = linked.directory / "group1.log"
        await wait_for_log(log, f"retrying in {LINK_BACKOFF_S_MAX:.2f} s")
        dials = _lines(linked, 1, lambda line: "link to group 2 at" in line)
        # 0.05, 0.1, ... 1.6 s, then the cap: before, seven lines already
        assert len(dials) == 2, dials
