"""Fixtures: real `mrs serve` processes on ephemeral ports, one bus directory per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.processes import GroupProcess, write_single_group_config

STANDARD_QUEUES = """
[[group.queue]]
id = 10
name = "ORDERS"
confirm = "explicit-in-order"
[[group.queue]]
id = 11
name = "ANYORDER"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 12
name = "IMPLICIT"
confirm = "implicit"
[[group.queue]]
id = 13
name = "SENDER"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 14
name = "SMALL"
confirm = "explicit-out-of-order"
messages_max = 2
unconfirmed_max = 2
[[group.queue]]
id = 15
name = "TEMP"
permanent = false
[[group.queue]]
id = 16
name = "SENDER2"
"""


class Bus:
    """One group's server process and its config, restartable."""

    def __init__(
        self,
        directory: Path,
        limits: str = "",
        group_extra: str = "",
        queues: str = STANDARD_QUEUES,
        env: dict[str, str] | None = None,
    ) -> None:
        self.config_path = write_single_group_config(
            directory, queues=queues, group_extra=group_extra, limits=limits
        )
        self.data_dir = directory / "g1"
        self.process = GroupProcess(self.config_path, 1, env=env or {})

    @property
    def address(self) -> str:
        return self.process.address

    def start(self) -> str:
        return self.process.start()

    def kill(self) -> None:
        self.process.kill()

    def restart(self, graceful: bool = False) -> str:
        if graceful:
            assert self.process.terminate() == 0
        else:
            self.process.kill()
        return self.process.start()

    def log_text(self) -> str:
        return (self.config_path.parent / "group1.log").read_text(errors="replace")


@pytest.fixture
def make_bus(tmp_path: Path) -> Iterator:
    buses: list[Bus] = []

    def make(**options: str) -> Bus:
        bus = Bus(tmp_path / f"bus{len(buses)}", **options)
        bus.start()
        buses.append(bus)
        return bus

    yield make
    for bus in buses:
        if bus.process.running:
            bus.process.terminate()


@pytest.fixture
def bus(make_bus) -> Bus:
    """A running group 1 with the standard queues, pcj_default = true."""
    return make_bus(group_extra="pcj_default = true", limits="dqf_messages_max = 40")
