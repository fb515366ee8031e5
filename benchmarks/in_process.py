"""One group in this process, over real LMDB journals with the production InlineWriter,
for the benchmarks that measure a room's CPU without sockets or an event loop
(`put_path.py`, `handover_cpu.py`, `link_accept_cpu.py`).

Why one module: each of them built the same group, the same timer stand-in and the
same session stand-in; and each must import `mrs` before `journals`, or the compiled
build is not installed and the figures are the sources' (mrs.native.loader), which
`put_path.py` got wrong once. A sibling module, as `procstat.py` is (benchmarks/ is on
sys.path when a benchmark runs).
"""

from __future__ import annotations

import mrs  # noqa: F401 - first: installs the compiled hot path before journals is imported

# isort: split
from dataclasses import dataclass, field
from pathlib import Path

from journals import InlineWriter, JournalStore
from mrs.config.bus import parse_config
from mrs.group import Group


class NoTimers:
    """The group's timers, never firing: a benchmark commits and answers by hand."""

    def call_later(self, delay_s: float, callback: object):  # type: ignore[no-untyped-def]
        return lambda: None


@dataclass(eq=False)
class Session:
    """A connection's stand-in: keeps what the group sends it."""

    id: int = 1
    attached: object = None
    peer: str = "bench"
    sent: list = field(default_factory=list)

    def send(self, event: object) -> None:
        self.sent.append(event)

    def answer(self, event: object) -> None:
        """A PutDone or Confirmed (a real session may frame several together)."""
        self.sent.append(event)


def open_group(
    bus_text: str, directory: Path, group_id: int, journal_bytes: int
) -> tuple[Group, InlineWriter, JournalStore]:
    """Group `group_id` of the bus `bus_text`, its journals under `directory`, recovered."""
    bus = parse_config(bus_text, directory / "bus.toml")
    config = bus.group(group_id)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    store = JournalStore(config.data_dir / "journals", journal_bytes)
    writer = InlineWriter(store, lambda: None)
    group = Group(bus, config, store, writer, NoTimers())
    group.recover()
    return group, writer, store
