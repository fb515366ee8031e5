"""Fixtures: real `mrs serve` processes on ephemeral ports, one bus directory per test;
and the fast seam, the same group in this trio run under MockClock (`mem_bus`)."""

from __future__ import annotations

import compileall
import contextlib
import signal
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from clients import connect
from mrs.config.bus import load_config
from sim.membus import MemoryBus, MemoryGroup, MemoryLinkedBus
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

    def connect(self, queue=None, **options):
        """`clients.connect` to this group: the same call as `MemoryGroup.connect`."""
        return connect(self.address, queue, **options)

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
def started_buses() -> Iterator[list[Bus]]:
    """The buses a test's fixtures started; each still running is stopped at its end."""
    buses: list[Bus] = []
    yield buses
    for bus in buses:
        if bus.process.running:
            bus.process.terminate()


@pytest.fixture
def make_bus(tmp_path: Path, started_buses: list[Bus]):
    def make(**options: str) -> Bus:
        bus = Bus(tmp_path / f"bus{len(started_buses)}", **options)
        bus.start()
        started_buses.append(bus)
        return bus

    return make


@pytest.fixture
def replay_bus(tmp_path: Path, started_buses: list[Bus]):
    """make(records by journal) -> a running group 1 whose journals held them at start."""

    def make(records: dict, **options):  # Journal -> its records
        from tests.journal_helpers import stopped_bus, write_records

        bus = stopped_bus(tmp_path / f"bus{len(started_buses)}", **options)
        for journal, items in records.items():
            write_records(bus.data_dir / "journals", journal, items)
        bus.start()
        started_buses.append(bus)
        return bus

    return make


@pytest.fixture
def bus(make_bus) -> Bus:
    """A running group 1 with the standard queues, pcj_default = true."""
    return make_bus(group_extra="pcj_default = true", limits="dqf_messages_max = 40")


# ------------------------------------------------------------------ the fast seam
MEMORY_BUS_FIXTURES = frozenset({"mem_bus", "make_mem_bus", "make_mem_linked"})


MEMORY_TEST_WALL_S_MAX = 180.0
"""A test on the in-process bus that has not finished after this much wall time is
failed, not left hanging: under the autojump clock a task that never waits (a busy
loop) stops virtual time, so a deadline of the rule under test would never come."""


async def tcp_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """Two ends of one real TCP connection on 127.0.0.1: (dialed, accepted)."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    dialed = await trio.open_tcp_stream("127.0.0.1", port)
    accepted = await listeners[0].accept()
    await listeners[0].aclose()
    return dialed, accepted  # type: ignore[return-value]


def run_under_autojump_clock(fn, clock=None, instruments=()):
    """trio.run with MockClock(autojump_threshold=0): a test whose tasks all wait jumps
    to the next deadline, so timeouts of the rules under test cost no wall time."""
    clock = clock or trio.testing.MockClock(autojump_threshold=0)

    async def guarded() -> None:
        token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:

            def cancel() -> None:
                with contextlib.suppress(trio.RunFinishedError):
                    trio.from_thread.run_sync(scope.cancel, trio_token=token)

            timer = threading.Timer(MEMORY_TEST_WALL_S_MAX, cancel)
            timer.daemon = True
            timer.start()
            try:
                await fn()
            finally:
                timer.cancel()
        if scope.cancelled_caught:
            raise TimeoutError(
                f"still running after {MEMORY_TEST_WALL_S_MAX:.0f} s of wall time under the "
                "autojump clock: a task that never waits keeps virtual time from passing"
            )

    return trio.run(guarded, clock=clock, instruments=instruments)


LONG_TESTS_FIRST = (
    "tests/sim/test_sim.py::test_swarm_keeps_every_invariant",
    "tests/sim/test_sim.py::test_checker_catches_each_broken_build",
    "tests/process/test_link_faults.py::",
    "tests/process/test_demo.py::",
    "tests/process/test_audit_cluster.py::",
    "tests/sim/test_sim.py::test_real_process_mixed_scenario",
    "tests/process/test_crash.py::",
)
"""The suite's longest tests, longest first (up to minutes on a loaded machine), run
before all others: under `pytest -n 3`
each worker takes the next test as it frees up, so a long test started last would
leave the others idle at the end; longest first keeps them busy to the end."""


def _run_order(item) -> int:
    for rank, prefix in enumerate(LONG_TESTS_FIRST):
        if item.nodeid.startswith(prefix):
            return rank
    return len(LONG_TESTS_FIRST)


def pytest_configure(config) -> None:
    """Ctrl-C works in the processes the tests start and interrupt with SIGINT.

    Why: a suite started as a background job of a non-interactive shell (`cmd &`,
    as CI runners and scripts do) inherits SIGINT ignored, and an ignored signal stays
    ignored across exec — so a child client or `mrs jplay` would never see the
    KeyboardInterrupt its test sends and the test would wait forever. A handler
    (unlike SIG_IGN) is reset to the default on exec, so children start as from a
    terminal."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not hasattr(config, "workerinput"):  # once, in the run's first process
        _compile_sources(Path(config.rootpath))


def _compile_sources(root: Path) -> None:
    """Write the bytecode of the project's packages before any test starts a process.

    Why: with PYTHONDONTWRITEBYTECODE set (as on these machines and CI's), no
    process writes a `.pyc`, so every `mrs serve` and `mrs ...` a test starts
    compiled some 190 modules from source again: a server took 0.9 s to be READY
    instead of 0.45 s, and the suite starts thousands. Bytecode written here is
    read by every later process (the variable stops writing, not reading); a
    source edited later is compiled afresh as usual (its mtime no longer matches)."""
    for package in ("mrs", "clients", "journals", "sim", "tests"):
        compileall.compile_dir(root / package, quiet=2)


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if MEMORY_BUS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.trio(run=run_under_autojump_clock))
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        _name_xdist_groups(items)
    items.sort(key=_run_order)  # stable: the rest keep their order


def _name_xdist_groups(items) -> None:
    """Give each test marked `xdist_group(NAME)` the node id `...@NAME` by which
    `--dist loadgroup` sends a group's tests to one worker, as pytest-xdist itself
    does on pytest before 9.2.

    Why: pytest 9.2 derives `nodeid` from a structured id, and pytest-xdist 3.8 still
    writes the old `_nodeid` attribute (pytest-xdist issue 1386), so no group was
    named: the tests of the "spark" group ran on every worker, each worker starting
    its own Spark session, standalone cluster (two JVMs) and audit buses."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest before 9.2: xdist names the groups itself
        return
    for item in items:
        nodeid = item.nodeid
        if nodeid.rfind("@") > nodeid.rfind("]"):  # named already (a fixed xdist)
            continue
        names = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        if names:
            item._id = NodeId.parse(f"{nodeid}@{'_'.join(sorted(names))}")


@pytest.fixture
async def make_mem_bus(tmp_path: Path, nursery: trio.Nursery):
    """Like `make_bus`, but group 1 is a `GroupServer` in this trio run on the
    in-memory network and journals (sim/membus.py); `await make_mem_bus(...)`."""
    count = 0

    async def make(
        limits: str = "", group_extra: str = "", queues: str = STANDARD_QUEUES
    ) -> MemoryGroup:
        nonlocal count
        directory = tmp_path / f"membus{count}"
        count += 1
        path = write_single_group_config(
            directory, queues=queues, group_extra=group_extra, limits=limits
        )
        memory = MemoryBus(load_config(path), nursery)
        await memory.start(1)
        return MemoryGroup(memory, 1, path)

    return make


@pytest.fixture
async def mem_bus(make_mem_bus) -> AsyncIterator[MemoryGroup]:
    """The `bus` fixture's group (standard queues, pcj_default, dqf_messages_max = 40)
    in this trio run under MockClock: connect with `mem_bus.connect(queue)`."""
    yield await make_mem_bus(group_extra="pcj_default = true", limits="dqf_messages_max = 40")


@pytest.fixture
async def make_mem_linked(tmp_path: Path, nursery: trio.Nursery):
    """Like sim.bus.LinkedBus (same options), but every group runs in this trio run
    under MockClock; `proxy(a, b).cut()` partitions the memory network instead."""
    count = 0

    async def make(**options) -> MemoryLinkedBus:
        nonlocal count
        count += 1
        return await MemoryLinkedBus.start(tmp_path / f"memlinked{count}", nursery, **options)

    return make
