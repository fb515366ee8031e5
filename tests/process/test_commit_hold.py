"""A commit held back after a busy one (mrs.storage.commit_pacing) goes as soon as as many
batches are pending as the last commit carried: a client that keeps a window of puts
in flight has sent its whole next window by then, and holding on for the rest of the
gap would only add to its latency. On the in-process bus, under MockClock: a hold
shows as virtual time passing."""

from __future__ import annotations

import trio

from clients import DeliveryMode, Uma
from mrs.limits import COMMIT_GAP_BATCHES_MIN, COMMIT_GAP_S

WAVE = COMMIT_GAP_BATCHES_MIN + 8


async def put_wave(sender, count: int) -> float:
    """`count` WF puts in flight at once; the virtual seconds until all are answered."""
    started_s = trio.current_time()
    async with trio.open_nursery() as nursery:
        for index in range(count):
            nursery.start_soon(
                lambda index=index: sender.put(
                    b"%d" % index, "ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ
                )
            )
    return trio.current_time() - started_s


async def test_a_window_as_large_as_the_last_commit_is_committed_without_the_gap(
    make_mem_bus,
) -> None:
    mem_bus = await make_mem_bus(limits="dqf_messages_max = 1000")
    stats = mem_bus.server.group.writer.stats
    async with mem_bus.connect("SENDER") as sender:
        await put_wave(sender, WAVE)
        assert (stats.commits, stats.batches) == (1, WAVE)  # a busy commit
        took_s = await put_wave(sender, WAVE)  # the whole window again: no hold
        assert (stats.commits, stats.batches, took_s) == (2, 2 * WAVE, 0.0)


async def test_a_smaller_window_waits_out_the_gap_for_company(make_mem_bus) -> None:
    mem_bus = await make_mem_bus(limits="dqf_messages_max = 1000")
    stats = mem_bus.server.group.writer.stats
    async with mem_bus.connect("SENDER") as sender:
        await put_wave(sender, WAVE)
        took_s = await put_wave(sender, WAVE // 2)
        assert (stats.commits, stats.batches) == (2, WAVE + WAVE // 2)
        assert took_s >= COMMIT_GAP_S
