"""A SAF backlog built while the receiving group is down drains whole once it is back,
with a producer still putting: real `mrs serve` processes, the scenario of
benchmarks/saf_backlog_drain.py on a short run (`--cut receiver`: group 2 stopped
with SIGTERM during the fill and started again, its link dialed directly)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import trio

# The benchmark imports its sibling module `procstat` as a script does (benchmarks/ first
# on the path).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from benchmarks.saf_backlog_drain import measure  # noqa: E402

BACKLOG = 3000
RUN_S_MAX = 120.0
"""The benchmark waits for the drain without a deadline of its own."""


async def test_a_backlog_made_while_the_receiver_was_down_drains_whole(tmp_path) -> None:
    args = argparse.Namespace(
        backlog=BACKLOG, reference_s=0.2, batch=250, batches=2, live_rate=200.0, cut="receiver"
    )
    with trio.fail_after(RUN_S_MAX):
        figures = await measure(tmp_path / "bus", args)
    # Group 2 holds its own reference puts, the whole backlog and every live put
    # answered during the drain (FIFO: they arrive after the backlog): nothing lost,
    # nothing stored twice (at most the live put cut off unanswered at the end).
    expected = figures.reference_put + BACKLOG + figures.live_put
    assert expected <= figures.group2_dqf <= expected + 1, figures
    assert figures.live_put > 0 and figures.drain_s > 0, figures
    # Each message crosses the link about once, no proxy in between.
    assert figures.link_sent <= 1.05 * (BACKLOG + figures.live_put) + 10, figures
