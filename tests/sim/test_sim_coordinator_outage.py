"""An etcd outage in a replicated group's log: the simulator's group (the real instance
runner over an in-memory coordinator that nobody reaches for two minutes of its clock).
An operator reading the log at 3 a.m. gets one line when it starts, a reminder every
COORDINATOR_LOG_INTERVAL_S with the count of tries, and one line when it is over, per
instance; not a line per try (every REPLICATION_POLL_S: 600 a minute each, before)."""

from __future__ import annotations

import logging
import random
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from mrs.limits import COORDINATOR_LOG_INTERVAL_S
from sim.memnet import MemoryNetwork
from sim.replicated import ReplicatedSimGroup
from sim.simulation import DEFAULT_WORKLOAD, bus_config
from tests.conftest import run_under_autojump_clock

OUTAGE_S = 120.0
INSTANCES = 3


async def _until(condition, timeout_s: float = 60.0) -> None:
    with trio.fail_after(timeout_s):
        while not condition():
            await trio.sleep(0.05)


def test_an_etcd_outage_is_logged_per_state_change_not_per_try(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shape = replace(DEFAULT_WORKLOAD, groups=(1,), replicated=(1,))
    group = ReplicatedSimGroup(bus_config(tmp_path, shape), 1, MemoryNetwork(random.Random(1)))
    election = group.election

    async def scenario() -> None:
        async with trio.open_nursery() as nursery:
            await group.start(nursery)
            await _until(group.settled)
            caplog.clear()
            election.reachable = {"nobody"}  # etcd down for every instance
            await trio.sleep(OUTAGE_S)
            election.reachable = set()
            await _until(group.settled)
            nursery.cancel_scope.cancel()

    with caplog.at_level(logging.INFO, logger="mrs.server"):
        run_under_autojump_clock(scenario)
    messages = [record.getMessage() for record in caplog.records]
    unavailable = [line for line in messages if line.startswith("coordinator unavailable")]
    reminders_max = OUTAGE_S / COORDINATOR_LOG_INTERVAL_S + 1
    assert INSTANCES <= len(unavailable) <= INSTANCES * reminders_max, unavailable
    assert any("more since the last such line" in line for line in unavailable), unavailable
    again = [line for line in messages if line.startswith("coordinator answers again")]
    assert len(again) == INSTANCES, messages
