"""Probes of a replicated group as an operator runs it: real etcd, three real
`mrs serve --instance` processes, real LMDB directories copied and restored.

What they prove: an instance whose data directory was replaced by an older copy of
itself (a backup restored) does not take the group over without the records it
acknowledged since, even when the in-sync record names it alone; every answered put
is delivered once the instance that holds them is back. A replica whose journals were
served by a plain `mrs serve` in between takes a full copy instead of the next
records on top of what that server wrote, and promoted, loses nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from clients import MrsError, connect, instance_addresses
from mrs.config.bus import load_config
from mrs.model import Status
from mrs.replication.coordinator import EtcdCoordinator, GroupState, etcd_prefix
from mrs.replication.etcd import EtcdClient
from mrs.storage.data_dir_owner import OWNER_FILE_NAME
from sim.etcd import wait_active
from sim.ports import free_port
from tests.etcd_helpers import InstanceProcess, etcd
from tests.process.test_replication import (
    instances,
    wait_caught_up,
    wait_dropped,
    wait_in_sync,
)

__all__ = ["etcd", "instances"]  # the fixtures, used by name

LOST_ACKNOWLEDGED_LINE = "is not a candidate: its journals end at"
WAIT_S = 30.0


async def _put(client, first: int, count: int) -> list[int]:
    """`count` WF puts to ORDERS numbered from `first`; the numbers answered SUCCESS."""
    answered = []
    for number in range(first, first + count):
        psb = await client.put(b"%d" % number, "ORDERS")
        assert psb.status == Status.SUCCESS, psb
        answered.append(number)
    return answered


async def _group_state(config: Path) -> GroupState:
    """What etcd holds for group 1 of `config`, read as the instances read it."""
    bus = load_config(config)
    assert bus.coordinator is not None
    coordinator = EtcdCoordinator(
        EtcdClient(bus.coordinator.etcd),
        etcd_prefix(bus.coordinator.prefix, 1),
        "probe",
        bus.coordinator.lease_ttl_s,
    )
    try:
        return await coordinator.read()
    finally:
        await coordinator.aclose()


async def _wait_floor(config: Path, name: str, at_least: tuple[int, int]) -> None:
    """Until etcd records `name`'s acknowledged position at `at_least` or beyond."""
    with trio.fail_after(WAIT_S):
        while (await _group_state(config)).floors.get(name, (0, 0)) < at_least:
            await trio.sleep(0.1)


def _wait_log_line(log: Path, text: str, timeout_s: float = WAIT_S) -> str:
    """The first line of `log` holding `text`, once the process has written it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [line for line in log.read_text().splitlines() if text in line]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no {text!r} in {log} within {timeout_s} s:\n{log.read_text()[-3000:]}")


async def _drain(addresses: list[str]) -> list[int]:
    """Every message of ORDERS, confirmed, by an independent consumer; in order."""
    seen = []
    async with connect(addresses, "ORDERS") as client:
        while True:
            try:
                message = await client.get(timeout=3)
            except MrsError:
                return seen
            seen.append(int(message.body))
            await client.confirm(message.seq)


def _restore(process: InstanceProcess, backup: Path) -> None:
    """Replace the instance's data directory by `backup` (SIGTERM first, not started)."""
    data_dir = process.config_path.parent / process.name
    process.terminate()
    shutil.rmtree(data_dir)
    shutil.copytree(backup, data_dir)


def test_an_instance_restored_from_an_older_backup_does_not_take_over_without_its_acks(
    instances: dict[str, InstanceProcess],
) -> None:
    """The third instance down (dropped from the in-sync set), the one replica left is
    backed up, puts go on, and it is restarted on that backup while the active is
    paused: named alone in sync, it used to win the next term and every put answered
    since the backup was lost. It now says why it is no candidate, the group waits
    for the active, and every answered put is delivered once, in order."""
    first = wait_active(instances, WAIT_S)
    kept, down = sorted(n for n in instances if n != first)
    config = instances[first].config_path
    addresses = instance_addresses(config, "NYC")
    backup = config.parent / "backup"

    async def before_the_restore() -> list[int]:
        async with connect(addresses, "SENDER") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            answered = await _put(client, 0, 30)
            instances[down].kill()
            answered += await _put(client, 30, 10)
            await wait_dropped(client, down)
            instances[kept].terminate()
            shutil.copytree(config.parent / kept, backup)  # the backup, taken stopped
            instances[kept].start()
            await wait_caught_up(client, {kept})
            answered += await _put(client, 40, 60)  # only on the active and `kept`
            status = (await client.status())["replication"]
            acked = (status["term"], status["replicas"][kept]["acked"])
            await _wait_floor(config, kept, acked)
        return answered

    answered = trio.run(before_the_restore)
    _restore(instances[kept], backup)
    instances[first].pause()
    try:
        instances[kept].start()
        line = _wait_log_line(config.parent / f"{kept}.log", LOST_ACKNOWLEDGED_LINE)
        assert "ERROR" in line and "older copy" in line, line
        assert trio.run(_group_state, config).leader is None  # nobody took the term
    finally:
        instances[first].resume()
    assert wait_active({first: instances[first]}, WAIT_S) == first
    assert trio.run(_drain, addresses) == answered  # nothing answered lost, in order


def _serve_unreplicated(
    config: Path, data_dir: Path, work: Callable[[str], Awaitable[None]]
) -> None:
    """`mrs serve --group 1` of a one-group bus (no instances) on `data_dir`, with the
    replicated group's coordinator prefix, while `work(address)` runs; then SIGTERM.
    It is refused at once (one line naming the instance) until the operator deletes
    the directory's instance entry, as that line says, to serve it anyway."""
    bus = load_config(config)
    assert bus.coordinator is not None
    port = free_port()
    single = config.parent / "single.toml"
    single.write_text(
        f'[coordinator]\netcd = ["{bus.coordinator.etcd[0]}"]\n'
        f'prefix = "{bus.coordinator.prefix}"\n'
        f'[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:{port}"\n'
        f'data_dir = "{data_dir}"\n'
        '[[group.queue]]\nid = 10\nname = "ORDERS"\nconfirm = "explicit-in-order"\n'
    )
    serve = [sys.executable, "-m", "mrs", "serve", "--config", str(single), "--group", "1"]
    refused = subprocess.run(serve, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "READY" not in refused.stdout
    [line] = refused.stderr.strip().splitlines()
    assert f"holds the journals of instance {data_dir.name} of replicated group 1" in line, line
    owner_path = data_dir / OWNER_FILE_NAME
    owner = json.loads(owner_path.read_text())
    del owner["instance"]  # the way out the line names: these journals on their own
    owner_path.write_text(json.dumps(owner))
    server = subprocess.Popen(serve, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("READY"), "the plain server did not start"
        trio.run(work, f"127.0.0.1:{port}")
    finally:
        server.terminate()
        server.wait(timeout=15)


def test_a_replica_served_outside_the_group_takes_a_full_copy_and_loses_nothing(
    instances: dict[str, InstanceProcess],
) -> None:
    """A replica stopped, its data directory served by a plain `mrs serve` that takes
    and confirms 20 messages and puts one of its own, then started again as the
    instance: it used to take the next records on top of that, and handed the active
    role (`mrs failover --to`) the group lost the 20 and delivered the stranger. It
    now says so in one line and takes a full copy: every answered put is delivered,
    nothing else."""
    first = wait_active(instances, WAIT_S)
    other = sorted(n for n in instances if n != first)[0]
    config = instances[first].config_path
    addresses = instance_addresses(config, "NYC")

    async def put(numbers: range) -> None:
        async with connect(addresses, "SENDER") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            await _put(client, numbers.start, len(numbers))
            await wait_caught_up(client, {"a", "b", "c"})

    async def outside(address: str) -> None:
        async with connect(address, "ORDERS") as client:
            for _ in range(20):
                await client.confirm((await client.get(timeout=5)).seq)
            await client.put(b"999", "ORDERS")

    trio.run(put, range(0, 50))
    instances[other].terminate()
    _serve_unreplicated(config, config.parent / other, outside)
    instances[other].start()
    instances[other].wait_for("REPLICA")
    trio.run(put, range(50, 60))
    line = _wait_log_line(config.parent / f"{other}.log", "served outside the group")
    assert "ERROR" in line and "full copy" in line, line
    switched = subprocess.run(
        [sys.executable, "-m", "mrs", "failover", "--config", str(config), "NYC", "--to", other],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert switched.returncode == 0, switched.stderr
    assert trio.run(_drain, addresses) == list(range(60))
