"""The operator's and auditor's tools against a replicated group while it fails over:
real etcd, three real `mrs serve --instance` processes, the real `mrs` commands.

What an operator depends on: a tool pointed at one instance's journals either reads
the group's records or refuses in one line; it never shows part of them as if they
were all (a replica taking a full copy from the active empties its journals first and
fills them a slice at a time, and one SIGKILLed halfway stays so until its next copy).
`mrs jplay` replaying into the group while its active is SIGKILLed stores every
replayed record once and says so.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from clients import ForceJrn, MrsError, Psb, PutItem, connect, instance_addresses
from journals import JournalStore
from mrs.replication.replica import COPY_PARTIAL_KEY
from sim.etcd import wait_active
from tests.cli_helpers import run_mrs
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config
from tests.process.test_replication import wait_caught_up

__all__ = ["etcd"]  # the fixture, used by name

WAIT_S = 30.0
LEASE_TTL_S = 2
FILL_MESSAGES = 800
FILL_BODY_BYTES = 32 << 10
"""25 MiB of journals: a full copy of about 25 slices, so the copy takes a while."""
CONFIRMED = 5
COPY_TRIES = 3
"""Wipes tried until the test sees a copy under way (it lasts ~0.1 s here)."""


def _group(etcd_endpoint: str, directory: Path) -> tuple[Path, dict[str, InstanceProcess]]:
    """A replicated group of this test's own (bus file named after it: its etcd
    prefix), its three instances started; the active has printed READY."""
    config = write_replicated_config(directory, etcd_endpoint, STANDARD_QUEUES, LEASE_TTL_S)
    config = config.rename(config.with_name(f"bus_{directory.name}.toml"))
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    for process in processes.values():
        process.start()
    return config, processes


async def _fill_and_confirm(addresses: list[str]) -> None:
    """25 MiB waiting in ORDERS' DQF, CONFIRMED more confirmed into the PCJ; every
    instance holds them all."""
    body = b"f" * FILL_BODY_BYTES
    async with connect(addresses, "ORDERS") as client:
        for _ in range(0, FILL_MESSAGES, 100):
            results = await client.put_many([PutItem(body, "ORDERS") for _ in range(100)])
            assert all(isinstance(r, Psb) for r in results), results
        for _ in range(CONFIRMED):
            message = await client.get(timeout=5)
            await client.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)
        await wait_caught_up(client, {"a", "b", "c"})


def _copy_seen_under_way(process: InstanceProcess, journals: Path) -> bool:
    """Start the wiped instance and SIGKILL it as soon as its journals say a full
    copy is under way (True); False when the copy ended before the mark was seen."""
    process.start()
    deadline = time.monotonic() + WAIT_S
    store = None
    try:
        while time.monotonic() < deadline:
            if store is None:
                if not (journals / "data.mdb").exists():
                    time.sleep(0.001)
                    continue
                store = JournalStore(journals, readonly=True)
            if store.meta_get(COPY_PARTIAL_KEY) is not None:
                process.kill()
                return True
            if store.meta_get("replication.copy_upto") is not None:
                return False  # the copy ended between two looks
            time.sleep(0.0005)
    finally:
        if store is not None:
            store.close()
    raise AssertionError("the wiped instance took no full copy")


def _kill_mid_copy(config: Path, processes: dict[str, InstanceProcess], wiped: str) -> None:
    """Wipe `wiped`'s data directory and SIGKILL it halfway through the full copy the
    active sends it (tried again if the copy was over before it was seen)."""
    data_dir = config.parent / wiped
    for _ in range(COPY_TRIES):
        processes[wiped].kill()
        shutil.rmtree(data_dir)
        if _copy_seen_under_way(processes[wiped], data_dir / "journals"):
            return
    pytest.fail(f"no copy seen under way in {COPY_TRIES} tries")


def _assert_one_line_refusal(result: subprocess.CompletedProcess, what: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (what, result.returncode, result.stdout[-500:], result.stderr)
    assert len(lines) == 1 and "part of a full copy" in lines[0], (what, result.stderr)
    assert "Traceback" not in result.stderr and "records" not in result.stdout, what


def test_tools_refuse_an_instance_whose_full_copy_was_cut_off_halfway(etcd, tmp_path) -> None:
    """A replica wiped and SIGKILLed while it took a full copy from the active holds
    part of the group's journals (its partial mark says so). Before, `mrs dump
    --instance` printed "dqf of group 1: 0 records" (exit 0) while the group held 795,
    and `mrs audit --data-dir` reported nothing confirmed and nothing waiting: wrong
    numbers with nothing to say so. Now each refuses in one line (exit 2), as does the
    audit's data source; the active's journals are read as before."""
    config, processes = _group(etcd.endpoint, tmp_path)
    try:
        active = wait_active(processes, WAIT_S)
        trio.run(_fill_and_confirm, instance_addresses(config, "NYC"))
        wiped = next(name for name in ("a", "b", "c") if name != active)
        _kill_mid_copy(config, processes, wiped)

        dump = run_mrs("dump", "--config", str(config), "--group", "1", "--instance", wiped, "dqf")
        _assert_one_line_refusal(dump, "dump")
        jplay = run_mrs(
            "jplay", "--config", str(config), "--group", "1", "--instance", wiped, "pcj",
            "--to", "ANYORDER", "--as", "SENDER", "--dry-run",
        )  # fmt: skip
        _assert_one_line_refusal(jplay, "jplay")
        audit = run_mrs("audit", "--data-dir", str(tmp_path / wiped), "--json", "--quiet")
        _assert_one_line_refusal(audit, "audit")
        from mrs.audit.source import SourceError, resolve_sources

        with pytest.raises(SourceError, match="part of a full copy"):
            resolve_sources({"path": str(tmp_path / wiped)})

        whole = run_mrs("dump", "--config", str(config), "--group", "1", "--instance", active,
                        "dqf")  # fmt: skip
        assert whole.returncode == 0, whole.stderr
        assert f"dqf of group 1: {FILL_MESSAGES - CONFIRMED} records" in whole.stdout
    finally:
        for process in processes.values():
            process.terminate()


REPLAYED = 300


async def _confirm_into_pcj(addresses: list[str]) -> None:
    """REPLAYED messages put to ORDERS and confirmed into the PCJ; every instance
    holds them."""
    async with connect(addresses, "ORDERS") as client:
        results = await client.put_many([PutItem(b"%d" % n, "ORDERS") for n in range(REPLAYED)])
        assert all(isinstance(r, Psb) for r in results), results
        for _ in range(REPLAYED):
            message = await client.get(timeout=5)
            await client.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)
        await wait_caught_up(client, {"a", "b", "c"})


async def _drain_bodies(addresses: list[str], queue: str) -> collections.Counter:
    bodies: collections.Counter = collections.Counter()
    async with connect(addresses, queue) as client:
        while True:
            try:
                message = await client.get(timeout=2)
            except MrsError:
                return bodies
            bodies[int(message.body)] += 1
            await client.confirm(message.seq)


def test_jplay_into_a_group_whose_active_is_sigkilled_stores_each_record_once(
    etcd, tmp_path
) -> None:
    """`mrs jplay` replays a replica's PCJ into the group (paced, so the SIGKILL of the
    active lands mid-replay): the client follows the group to its new active and
    re-sends what was in flight under its idempotency keys, so every record is stored
    exactly once; the run ends 0 with its one summary line, and a second run finds
    every record replayed."""
    config, processes = _group(etcd.endpoint, tmp_path)
    try:
        active = wait_active(processes, WAIT_S)
        addresses = instance_addresses(config, "NYC")
        trio.run(_confirm_into_pcj, addresses)
        replica = next(name for name in ("a", "b", "c") if name != active)
        command = [sys.executable, "-m", "mrs", "jplay", "--config", str(config), "--group",
                   "1", "--instance", replica, "pcj", "--to", "ANYORDER", "--as", "SENDER",
                   "--rate", "300"]  # fmt: skip
        replay = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)  # fmt: skip
        deadline = time.monotonic() + WAIT_S
        while trio.run(_pending, addresses) < REPLAYED // 10:  # the replay is under way
            assert time.monotonic() < deadline and replay.poll() is None, replay.poll()
            time.sleep(0.02)
        processes[active].kill()
        out, err = replay.communicate(timeout=120)
        assert replay.returncode == 0, err
        assert f"selected {REPLAYED}, sent {REPLAYED}, skipped 0" in err, err
        again = run_mrs(*command[3:])
        assert again.returncode == 0 and f"skipped {REPLAYED}" in again.stderr, again.stderr
        bodies = trio.run(_drain_bodies, addresses, "ANYORDER")
        assert sorted(bodies) == list(range(REPLAYED)), sorted(set(range(REPLAYED)) - set(bodies))
        assert set(bodies.values()) == {1}, [b for b, n in bodies.items() if n > 1]
    finally:
        for process in processes.values():
            process.terminate()


async def _pending(addresses: list[str]) -> int:
    """How many replayed messages wait in ANYORDER on the active."""
    async with connect(addresses, None) as client:
        return int((await client.status())["queues"]["1.11"]["pending"])
