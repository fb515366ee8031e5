"""A bus of real group processes with a fault proxy on every link.

`LinkedBus` writes one config for N groups on free ports, with each link's dial
address pointing at a `FaultProxy` in front of the higher group, and starts/stops/
kills the `mrs serve` processes. Tests, `mrs demo` and `mrs sim` use it.
"""

from __future__ import annotations

import signal
import subprocess
import textwrap
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import trio

from sim.ports import free_port
from sim.processes import GroupProcess
from sim.proxy import FaultProxy

STOP_S_MAX = 30.0
"""How long `LinkedBus.stop` waits for a group's graceful exit before killing it."""


@dataclass
class LinkedBus:
    directory: Path
    group_ids: tuple[int, ...] = (1, 2)
    queues: str = ""
    """[[group.queue]] tables (TOML) added to every group."""
    limits: str = ""
    group_extra: str = ""
    env: dict[str, str] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    group_limits: dict[int, str] = field(default_factory=dict)
    """Extra [group.limits] lines for one group (after `limits`)."""
    group_extras: dict[int, str] = field(default_factory=dict)
    """Extra [[group]] keys for one group (after `group_extra`)."""
    """Group names (default G<id>)."""
    ports: dict[int, int] = field(default_factory=dict)
    proxies: dict[tuple[int, int], FaultProxy] = field(default_factory=dict)
    processes: dict[int, GroupProcess] = field(default_factory=dict)
    config_path: Path | None = None
    direct: bool = False
    """Links dial the higher group itself, with no fault proxy (a benchmark that must
    not pay for one: the proxy copies every byte of the link in this process)."""

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ports = {group_id: free_port() for group_id in self.group_ids}
        for low, high in combinations(sorted(self.group_ids), 2):
            if not self.direct:
                self.proxies[(low, high)] = FaultProxy(free_port(), self.ports[high])
        self.config_path = self.directory / "bus.toml"
        self.config_path.write_text(self._config_text())
        for group_id in self.group_ids:
            self.processes[group_id] = GroupProcess(
                self.config_path,
                group_id,
                log_path=self.directory / f"group{group_id}.log",
                env=dict(self.env),
            )

    def _config_text(self) -> str:
        listen = {group_id: f"127.0.0.1:{port}" for group_id, port in self.ports.items()}
        links = {pair: f"127.0.0.1:{proxy.listen_port}" for pair, proxy in self.proxies.items()}
        if self.direct:
            links = {(low, high): listen[high] for low, high in combinations(sorted(listen), 2)}
        return bus_config_text(self, listen, links)

    async def start_proxies(self, nursery: trio.Nursery) -> None:
        for proxy in self.proxies.values():
            await nursery.start(proxy.run)

    def start(self) -> None:
        """Start every group, in order; when one does not start (ServerStartError, or
        the run is interrupted meanwhile), the ones already started are stopped before
        the error goes on: `mrs sim run` whose group 2 did not start left group 1
        running, in a process group of its own, after the command had ended."""
        try:
            for process in self.processes.values():
                process.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM each running group and wait for it; one that does not exit in time
        (stopped by SIGSTOP, or hung) is killed, so no process outlives the bus."""
        for process in self.processes.values():
            if process.running:
                assert process.process is not None
                process.process.send_signal(signal.SIGCONT)  # a stopped one would not exit
                try:
                    process.terminate(STOP_S_MAX)
                except subprocess.TimeoutExpired:
                    process.kill()

    def address(self, group_id: int) -> str:
        return self.processes[group_id].address

    def connect(self, group_id: int, queue=None, **options):
        """`clients.connect` to a group: the same call as `MemoryLinkedBus.connect`."""
        from clients import connect

        return connect(self.address(group_id), queue, **options)

    def proxy(self, group_a: int, group_b: int) -> FaultProxy:
        return self.proxies[(min(group_a, group_b), max(group_a, group_b))]

    def data_dir(self, group_id: int) -> Path:
        return self.directory / f"g{group_id}"


def bus_config_text(
    shape: LinkedBus | MemoryBusShape,
    listen: dict[int, str],
    links: dict[tuple[int, int], str],
) -> str:
    """The TOML of a bus of `shape`'s groups listening on `listen`, each pair of groups
    linked through the address in `links` (a fault proxy, or the higher group itself)."""
    parts = []
    for group_id in shape.group_ids:
        parts.append(
            textwrap.dedent(f"""\
            [[group]]
            id = {group_id}
            name = "{shape.names.get(group_id, f"G{group_id}")}"
            listen = "{listen[group_id]}"
            data_dir = "g{group_id}"
            {shape.group_extra}
            {shape.group_extras.get(group_id, "")}
            [group.limits]
            {shape.limits}
            {shape.group_limits.get(group_id, "")}
            """)
            + textwrap.dedent(shape.queues)
        )
    for (low, high), address in links.items():
        parts.append(f'[[link]]\ngroups = [{low}, {high}]\naddress = "{address}"\n')
    return "\n".join(parts)


@dataclass
class MemoryBusShape:
    """What a bus of in-process groups holds (sim/membus.py): LinkedBus's options."""

    group_ids: tuple[int, ...] = (1, 2)
    queues: str = ""
    limits: str = ""
    group_extra: str = ""
    names: dict[int, str] = field(default_factory=dict)
    group_limits: dict[int, str] = field(default_factory=dict)
    group_extras: dict[int, str] = field(default_factory=dict)
