"""A replicated group, as real processes: etcd, three `mrs serve --instance` processes,
a client that follows the active.

What it proves: SIGKILL the active in the middle of a stream of WF puts, and a
replica takes over within seconds; every put that was answered is delivered exactly
once, in order, none marked POSSDUPL (none was handed out); an instance whose data
directory was deleted rejoins (a full copy) and counts as in sync again; a message
handed out and not confirmed when the next active is killed comes back POSSDUPL.
"""

from __future__ import annotations

import collections
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import trio

from clients import (
    ConnectionLost,
    MrsError,
    Psb,
    PutItem,
    connect,
    instance_addresses,
    put_once,
)
from mrs.config.bus import load_config
from mrs.limits import REPLICATION_LAG_S_MAX
from mrs.model import DeliveryMode, Status, Uma
from mrs.replication.coordinator import EtcdCoordinator, etcd_prefix
from mrs.replication.etcd import EtcdClient
from sim.etcd import EtcdServer, wait_active
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.auth_helpers import add_principal, creds, password_of
from tests.cli_helpers import run_mrs
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config

__all__ = ["etcd"]  # the fixture, used by name

FAILOVER_S_MAX = 15.0
"""A replica answers this long after the active was killed at most (lease 3 s)."""
PUTS = 120
KILL_AFTER = 40


@pytest.fixture
def instances(etcd, tmp_path):
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    # each test its own group in etcd: the bus file's stem names the key prefix
    named = config.with_name(f"bus_{tmp_path.name}.toml")
    config.rename(named)
    processes = {name: InstanceProcess(named, name) for name in ("a", "b", "c")}
    for process in processes.values():
        process.start()
    for process in processes.values():
        process.wait_for("REPLICA")
    yield processes
    for process in processes.values():
        process.terminate()


async def wait_in_sync(client, names: set[str], timeout_s: float = 30.0) -> dict:
    """The active's replication status once every instance in `names` is in sync."""
    with trio.fail_after(timeout_s):
        while True:
            status = (await client.status())["replication"]
            replicas = status["replicas"]
            if all(replicas.get(n, {}).get("in_sync") for n in names - {status["instance"]}):
                return status
            await trio.sleep(0.1)


async def wait_caught_up(client, names: set[str], timeout_s: float = 30.0) -> None:
    """Once every replica in `names` is in sync and has applied every record."""
    with trio.fail_after(timeout_s):
        while True:
            status = await wait_in_sync(client, names)
            replicas = status["replicas"]
            if not any(replicas[n]["backlog_records"] for n in names - {status["instance"]}):
                return
            await trio.sleep(0.1)


async def wait_dropped(client, name: str) -> dict:
    """`name`'s replication status once the active no longer counts it in sync (a
    dead replica is dropped after the lag bound, mrs.replication.stream `laggards`)."""
    with trio.fail_after(10 * REPLICATION_LAG_S_MAX):
        while True:
            status = (await client.status())["replication"]["replicas"][name]
            if not status["in_sync"]:
                return status
            await trio.sleep(0.1)


def test_failover_keeps_every_answered_put_once_in_order(instances) -> None:
    """Kill the active mid-stream: every answered put is delivered once, in order; the
    replica left behind joins the new active by a bridge from their old term, not by
    a full copy of the journals (mrs.replication.stream `Bridge`)."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")
    logs = {name: p.config_path.parent / f"{name}.log" for name, p in instances.items()}

    async def scenario() -> tuple[list[int], float, str]:
        acknowledged: list[int] = []
        failover_s = 0.0
        second = ""
        async with connect(addresses, "ORDERS") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            copies_before = {
                name: log.read_text().count("took a full copy") for name, log in logs.items()
            }
            for i in range(PUTS):
                if i == KILL_AFTER:
                    instances[first].kill()
                    killed_s = time.monotonic()
                    others = {n: p for n, p in instances.items() if n != first}
                    second = await trio.to_thread.run_sync(wait_active, others, FAILOVER_S_MAX)
                    failover_s = time.monotonic() - killed_s
                psb = await put_once(
                    client, b"m%d" % i, "ORDERS", f"put-{i}", delivery=DeliveryMode.WF_DQF
                )
                assert psb.status == Status.SUCCESS
                acknowledged.append(i)
            seen = []
            for _ in range(len(acknowledged)):
                message = await client.get(timeout=10)
                assert message.delivery_status != Status.POSSDUPL, message
                seen.append(int(message.body[1:]))
                await client.confirm(message.seq)
            with pytest.raises(Exception):  # noqa: B017 - nothing more: NOMOREMSG
                await client.get(timeout=0)
            third = ({"a", "b", "c"} - {first, second}).pop()
            await wait_in_sync(client, {second, third})
        assert seen == acknowledged  # every answered put once, in order
        assert logs[third].read_text().count("took a full copy") == copies_before[third]
        assert "a bridge from" in logs[second].read_text()
        return acknowledged, failover_s, second

    acknowledged, failover_s, second = trio.run(scenario)
    assert len(acknowledged) == PUTS
    assert failover_s < FAILOVER_S_MAX
    print(f"failover {failover_s:.2f} s: {first} -> {second}")

    # the killed instance loses its disk and rejoins from a full copy
    shutil.rmtree(instances[first].config_path.parent / first)
    instances[first].start()
    instances[first].wait_for("REPLICA")

    async def rejoin_then_possdupl() -> None:
        async with connect(addresses, "ORDERS") as client:
            status = await wait_in_sync(client, {"a", "b", "c"})
            assert status["instance"] == second
            await put_once(client, b"handed", "ORDERS", "handed-1", delivery=DeliveryMode.WF_DQF)
            handed = await client.get(timeout=10)
            assert handed.body == b"handed"
            instances[second].kill()
            rest = {n: p for n, p in instances.items() if n != second}
            await trio.to_thread.run_sync(wait_active, rest, FAILOVER_S_MAX)
            await client.wait_connected()
            again = await client.get(timeout=20)
            assert again.body == b"handed"
            assert again.delivery_status == Status.POSSDUPL  # handed out, not confirmed
            await client.confirm(again.seq)

    trio.run(rejoin_then_possdupl)


TASKS = 8
PUTS_PER_TASK = 25


async def _take_all(client) -> list[bytes]:
    """Get and confirm until the queue is empty; the bodies in delivery order. None
    comes POSSDUPL: its callers handed nothing out before."""
    bodies = []
    while True:
        try:
            message = await client.get(timeout=2)
        except MrsError:
            return bodies
        assert message.delivery_status != Status.POSSDUPL, message
        bodies.append(message.body)
        await client.confirm(message.seq)


def _assert_each_once_in_order(bodies: list[bytes], tasks: int, per_task: int) -> None:
    """Bodies `t<task>:<n>`: each stored once, each task's in the order it put them."""
    assert len(bodies) == len(set(bodies)) == tasks * per_task
    for task in range(tasks):
        mine = [int(body.split(b":")[1]) for body in bodies if body.startswith(b"t%d:" % task)]
        assert mine == list(range(per_task))


def test_the_client_resends_puts_a_kill_of_the_active_left_unanswered(instances) -> None:
    """SIGKILL the active while 200 WF puts from 8 tasks are in flight: the client
    re-sends the unanswered ones to the new active under the keys it gave them
    (clients.resend), so every `await put()` returns SUCCESS (none PutOutcomeUnknown)
    and every message is stored exactly once, in order per task."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def scenario() -> tuple[list[bytes], int]:
        answered = trio.Semaphore(0)
        async with connect(addresses, "ORDERS") as client:
            await wait_in_sync(client, {"a", "b", "c"})

            async def putter(task: int) -> None:
                for i in range(PUTS_PER_TASK):
                    psb = await client.put(b"t%d:%d" % (task, i), "ORDERS")  # WF_DQF
                    assert psb.status == Status.SUCCESS, psb
                    answered.release()

            async with trio.open_nursery() as nursery:
                for task in range(TASKS):
                    nursery.start_soon(putter, task)
                for _ in range(TASKS * PUTS_PER_TASK // 3):
                    await answered.acquire()
                instances[first].kill()  # puts of every task are in flight
            resent = client.resent_puts
            bodies = await _take_all(client)
            assert (await client.status())["replication"]["instance"] != first
        return bodies, resent

    bodies, resent = trio.run(scenario)
    assert resent >= 1  # the kill did leave puts unanswered
    _assert_each_once_in_order(bodies, TASKS, PUTS_PER_TASK)


BATCH_TASKS = 4
BATCHES_PER_TASK = 6
BATCH_ITEMS = 40


def test_put_many_batches_a_kill_of_the_active_left_unanswered_are_resent(instances) -> None:
    """SIGKILL the active while 4 tasks send WF put_many batches: the client re-sends
    each batch's unanswered puts to the new active under the keys it gave each one
    (clients.resend.Resender.resend_lost), so every item's result is a SUCCESS Psb
    (none PutOutcomeUnknown) and every message is stored exactly once, in order per
    task."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def scenario() -> tuple[list[bytes], int]:
        answered = trio.Semaphore(0)
        async with connect(addresses, "ORDERS") as client:
            await wait_in_sync(client, {"a", "b", "c"})

            async def putter(task: int) -> None:
                for batch in range(BATCHES_PER_TASK):
                    numbers = range(batch * BATCH_ITEMS, (batch + 1) * BATCH_ITEMS)
                    items = [PutItem(b"t%d:%d" % (task, i), "ORDERS") for i in numbers]
                    for result in await client.put_many(items):  # WF_DQF
                        assert isinstance(result, Psb) and result.status == Status.SUCCESS, result
                    answered.release()

            async with trio.open_nursery() as nursery:
                for task in range(BATCH_TASKS):
                    nursery.start_soon(putter, task)
                for _ in range(BATCH_TASKS * BATCHES_PER_TASK // 3):
                    await answered.acquire()
                instances[first].kill()  # batches of every task are in flight
            resent = client.resent_puts
            bodies = await _take_all(client)
            assert (await client.status())["replication"]["instance"] != first
        return bodies, resent

    bodies, resent = trio.run(scenario)
    assert resent >= 1  # the kill did leave batches unanswered
    _assert_each_once_in_order(bodies, BATCH_TASKS, BATCHES_PER_TASK * BATCH_ITEMS)
    print(f"{resent} puts of put_many batches re-sent")


def test_planned_failover_and_status(instances) -> None:
    """`mrs failover --to` hands the active role to a chosen in-sync replica: nothing
    lost, POSSDUPL only on the message that was handed out; `mrs status` shows every
    instance's role, term, in-sync state and backlog."""
    first = wait_active(instances, 30)
    config = instances["a"].config_path
    addresses = instance_addresses(config, "NYC")
    target = "b" if first != "b" else "c"

    async def before_switch() -> None:
        async with connect(addresses, "ORDERS") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            for i in range(3):
                await put_once(client, b"p%d" % i, "ORDERS", f"p-{i}")
            confirmed = await client.get(timeout=10)
            await client.confirm(confirmed.seq)
            handed = await client.get(timeout=10)
            assert handed.body == b"p1"
            shown = run_mrs("status", "--config", str(config))
            assert shown.returncode == 0, shown.stderr
            assert "Replication" in shown.stdout and "active" in shown.stdout
            switched = run_mrs("failover", "--config", str(config), "NYC", "--to", target)
            assert switched.returncode == 0, switched.stderr
            assert f"{first} -> {target}" in switched.stdout

    trio.run(before_switch)
    assert wait_active({target: instances[target]}, 10) == target

    async def after_switch() -> None:
        async with connect(addresses, "ORDERS") as client:
            status = await client.status()
            assert status["replication"]["instance"] == target
            again = await client.get(timeout=10)
            assert (again.body, again.delivery_status) == (b"p1", Status.POSSDUPL)
            fresh = await client.get(timeout=10)
            assert fresh.body == b"p2" and fresh.delivery_status != Status.POSSDUPL
            for message in (again, fresh):
                await client.confirm(message.seq)
            await wait_in_sync(client, {"a", "b", "c"})

    trio.run(after_switch)
    for name in ("zz", ""):  # an empty name is no instance either, not "any"
        refused = run_mrs("failover", "--config", str(config), "NYC", "--to", name)
        assert refused.returncode == 2 and f"no instance {name!r}" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1


EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def example_client(config: Path, puts: int, cwd: Path) -> subprocess.Popen:
    """docs/examples/replicated_client.py putting `puts` messages to the group of
    `config`, its stdout read line by line (text)."""
    client = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "replicated_client.py"), str(config), str(puts)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    assert client.stdout is not None
    return client


def test_the_docs_example_survives_a_kill_of_the_active(etcd, tmp_path) -> None:
    """docs/replication.md's example as a reader runs it (its bus on free ports, this
    etcd), with the active SIGKILLed a third of the way through its puts."""
    text = (EXAMPLES / "replicated.toml").read_text()
    text = text.replace("http://127.0.0.1:2379", etcd.endpoint)
    text = re.sub(r"127\.0\.0\.1:7[12]0\d", lambda _: f"127.0.0.1:{free_port()}", text)
    config = tmp_path / f"docs_{tmp_path.name}.toml"
    config.write_text(text)
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    try:
        for process in processes.values():
            process.start()
        first = wait_active(processes, 30)
        client = example_client(config, 300, tmp_path)
        assert client.stdout.readline().strip() == f"active: {first}"
        assert "so far" in client.stdout.readline()
        processes[first].kill()
        output, _ = client.communicate(timeout=120)
        assert client.returncode == 0
        assert "300 puts answered" in output
        assert "300 delivered, in order: True, POSSDUPL: 0" in output
        assert f"active now: {first}" not in output
    finally:
        for process in processes.values():
            process.terminate()


def test_a_replica_restarted_with_its_disk_catches_up_from_where_it_was(instances) -> None:
    """Kill a replica: the active answers with the other (a majority) and drops the
    dead one from the in-sync set after the lag bound; restarted with its data
    directory, it is sent only the records it missed (no full copy) and is in sync
    again."""
    active = wait_active(instances, 30)
    replica = next(name for name in ("a", "b", "c") if name != active)
    addresses = instance_addresses(instances["a"].config_path, "NYC")
    log = instances[replica].config_path.parent / f"{replica}.log"

    async def scenario() -> None:
        async with connect(addresses, "ORDERS") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            await put_once(client, b"before", "ORDERS", "before")
            instances[replica].kill()
            for i in range(20):  # answered by the active and the other replica
                await put_once(client, b"m%d" % i, "ORDERS", f"m-{i}", within_s=15)
            status = await wait_dropped(client, replica)
            assert status["backlog_records"] >= 20
            copies_before = log.read_text().count("took a full copy")
            instances[replica].start()
            instances[replica].wait_for("REPLICA")
            status = await wait_in_sync(client, {"a", "b", "c"})
            assert status["replicas"][replica]["backlog_records"] == 0
            assert log.read_text().count("took a full copy") == copies_before

    trio.run(scenario)


GROWN_PUTS = 120
GROWN_BODY_BYTES = 32 << 10
"""3.75 MiB of DQF on maps that start at 1 MiB: each instance grows its map twice."""


def test_every_instance_grows_a_map_that_starts_small(etcd, tmp_path) -> None:
    """journal_bytes_initial below journal_bytes_max: the active grows its map as it
    fills, and so does each replica, which applies the same commits (a replica's map
    that stayed at its start would fail those commits MAP_FULL and fall out of sync)."""
    queues = STANDARD_QUEUES + "\n[group.ops]\njournal_bytes_initial = 1048576\n"
    config = write_replicated_config(tmp_path / f"grow_{tmp_path.name}", etcd.endpoint, queues)
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    addresses = instance_addresses(config, "NYC")
    body = b"g" * GROWN_BODY_BYTES

    async def scenario() -> None:
        async with connect(addresses, "ORDERS") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            for i in range(GROWN_PUTS):
                psb = await put_once(client, b"%04d" % i + body, "ORDERS", f"g-{i}")
                assert psb.status == Status.SUCCESS, psb
            await wait_caught_up(client, {"a", "b", "c"})  # every record applied
            for i in range(GROWN_PUTS):
                message = await client.get(timeout=10)
                assert message.body[:4] == b"%04d" % i
                await client.confirm(message.seq)

    try:
        for process in processes.values():
            process.start()
        wait_active(processes, 30)
        trio.run(scenario)
    finally:
        for process in processes.values():
            process.terminate()
    for name in processes:
        assert "journal map grown from 1048576" in (config.parent / f"{name}.log").read_text()


FILL_MESSAGES = 800
FILL_BODY_BYTES = 32 << 10
"""25 MiB of journals: a full copy of 25 slices (REPLICATION_COPY_SLICE_BYTES)."""
STALL_S_MAX = 1.0
"""A put is answered within this while a replica takes a full copy (a third of the
3 s lease: an event loop stalled longer would also miss its renewal)."""


def test_the_active_keeps_answering_while_a_wiped_replica_takes_a_full_copy(
    instances,
) -> None:
    """25 MiB of journals; a replica is killed and its data directory deleted, then
    started again: it takes a full copy, streamed in slices read as they are sent
    (mrs.replication.active `_full_copy`), while a client goes on putting: every put
    is answered, none waits a stall, and the replica is in sync again, holding every
    message (it becomes the active and delivers them all)."""
    active = wait_active(instances, 30)
    wiped = next(name for name in ("a", "b", "c") if name != active)
    addresses = instance_addresses(instances["a"].config_path, "NYC")
    log = instances[wiped].config_path.parent / f"{wiped}.log"
    body = b"f" * FILL_BODY_BYTES

    async def scenario() -> tuple[int, float, float]:
        async with connect(addresses, "ORDERS") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            for start in range(0, FILL_MESSAGES, 100):
                items = [PutItem(body, "ORDERS") for _ in range(start, start + 100)]
                assert all(isinstance(r, Psb) for r in await client.put_many(items))
            instances[wiped].kill()
            shutil.rmtree(instances[wiped].config_path.parent / wiped)
            await put_once(client, b"dropped", "ORDERS", "dropped", within_s=15)  # a majority
            await wait_dropped(client, wiped)
            copies_before = log.read_text().count("took a full copy")
            latencies: list[float] = []
            rejoined = trio.Event()

            async def putter() -> None:
                while not rejoined.is_set():
                    sent_s = trio.current_time()
                    psb = await client.put(b"during", "ORDERS")
                    assert psb.status == Status.SUCCESS
                    latencies.append(trio.current_time() - sent_s)

            started_s = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(putter)
                instances[wiped].start()
                await wait_in_sync(client, {"a", "b", "c"}, timeout_s=60)
                rejoined.set()
            rejoin_s = trio.current_time() - started_s
            assert log.read_text().count("took a full copy") == copies_before + 1
            return len(latencies), max(latencies), rejoin_s

    answered, stall_s, rejoin_s = trio.run(scenario)
    print(
        f"rejoin with a full copy: {rejoin_s:.2f} s, {answered} puts answered meanwhile, "
        f"the longest {stall_s * 1000:.0f} ms"
    )
    assert answered >= 10 and stall_s < STALL_S_MAX
    # the rejoined replica holds everything: made the active, it delivers it all, once
    config = instances["a"].config_path
    switched = run_mrs("failover", "--config", str(config), "NYC", "--to", wiped)
    assert switched.returncode == 0, switched.stderr
    assert wait_active({wiped: instances[wiped]}, 15) == wiped

    async def drain() -> collections.Counter:
        bodies: collections.Counter = collections.Counter()
        async with connect(addresses, "ORDERS") as client:
            assert (await client.status())["replication"]["instance"] == wiped
            while True:
                try:
                    message = await client.get(timeout=2)
                except MrsError:
                    return bodies
                bodies[message.body[:8]] += 1
                await client.confirm(message.seq)

    assert trio.run(drain) == {b"f" * 8: FILL_MESSAGES, b"dropped": 1, b"during": answered}


def test_serve_names_the_instance_or_refuses_in_one_line(tmp_path) -> None:
    """A replicated group is served one instance at a time, by name; an unreplicated
    one has no instances to name. Refused before etcd is asked (none runs here)."""
    config = write_replicated_config(tmp_path, "http://127.0.0.1:9", STANDARD_QUEUES)
    for extra, expected in (
        ([], "--instance: missing: group 1 is replicated (a, b, c)"),
        (["--instance", "z"], "--instance: no instance 'z': group 1 is replicated (a, b, c)"),
    ):
        refused = run_mrs("serve", "--config", str(config), "--group", "1", *extra)
        assert refused.returncode == 2, refused.stderr
        assert expected in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    plain = tmp_path / "plain.toml"
    plain.write_text('[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g"\n')
    refused = run_mrs("serve", "--config", str(plain), "--group", "1", "--instance", "a")
    assert refused.returncode == 2 and "group 1 has no [[group.instance]]" in refused.stderr


def test_status_says_what_etcd_holds_when_no_instance_answers(etcd, tmp_path) -> None:
    """No instance of the group runs: `mrs status` says it is down and what etcd holds
    (nobody active: start the instances); with etcd unreachable too, that no instance
    can become active until it answers. Exit status 1 (a group down), no traceback."""
    config = write_replicated_config(tmp_path / "up", etcd.endpoint, STANDARD_QUEUES)
    unreachable = f"http://127.0.0.1:{free_port()}"
    lonely = write_replicated_config(tmp_path / "down", unreachable, STANDARD_QUEUES)
    for path, expected in (
        (config, "etcd names no active instance (term 0, in sync: none recorded)"),
        (lonely, f"etcd at {unreachable} does not answer (cannot connect); no instance"),
    ):
        result = run_mrs("status", "--config", str(path), "--json", "--timeout", "3")
        assert result.returncode == 1, result.stderr
        (view,) = json.loads(result.stdout)["groups"]
        assert view["error"].startswith("connection refused: nothing listens there; ")
        assert expected in view["error"], view["error"]


def test_a_link_from_another_group_follows_the_active(etcd, tmp_path) -> None:
    """Group 1 (unreplicated) dials replicated group 2 over their link: after group
    2's active is SIGKILLed the link redials the new active, and every put group 1
    answered reaches group 2's queue once, in order."""
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    text = config.read_text().replace('id = 1\nname = "NYC"', 'id = 2\nname = "LDN"')
    plain = '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n'
    config = config.with_name(f"link_{tmp_path.name}.toml")
    config.write_text(text + plain + STANDARD_QUEUES + "[[link]]\ngroups = [1, 2]\n")
    instances = {name: InstanceProcess(config, name, group_id=2) for name in ("a", "b", "c")}
    nyc = GroupProcess(config, 1)
    try:
        for process in instances.values():
            process.start()
        first = wait_active(instances, 30)
        nyc_address = nyc.start()

        async def scenario() -> list[bytes]:
            async with connect(nyc_address, "SENDER") as sender:
                for i in range(10):
                    if i == 5:
                        instances[first].kill()
                    psb = await put_once(
                        sender, b"x%d" % i, "2.10", f"x-{i}", within_s=60, uma=Uma.SAF
                    )
                    # stored at group 2, or in group 1's SAF while the link is down
                    assert psb.delivery_status in (Status.STORED, Status.SAF_FORCED) or (
                        psb.uma_status == Status.SAF_SUCCESS
                    ), psb
            others = {n: p for n, p in instances.items() if n != first}
            await trio.to_thread.run_sync(wait_active, others, FAILOVER_S_MAX)
            bodies = []
            async with connect(instance_addresses(config, "LDN"), "ORDERS") as receiver:
                for _ in range(10):
                    message = await receiver.get(timeout=30)
                    assert message.delivery_status != Status.POSSDUPL
                    bodies.append(message.body)
                    await receiver.confirm(message.seq)
                with pytest.raises(Exception):  # noqa: B017 - nothing more: NOMOREMSG
                    await receiver.get(timeout=1)
            return bodies

        assert trio.run(scenario) == [b"x%d" % i for i in range(10)]
    finally:
        nyc.terminate()
        for process in instances.values():
            process.terminate()


def test_metrics_show_each_replica(etcd, tmp_path) -> None:
    """The active's Prometheus endpoint has the term and each replica's in-sync
    state, link and backlog."""
    port = free_port()
    ops = f'[group.ops]\nmetrics_listen = "127.0.0.1:{port}"\n'
    config = write_replicated_config(tmp_path, etcd.endpoint, ops + STANDARD_QUEUES)
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    try:
        for process in processes.values():
            process.start()
        active = wait_active(processes, 30)

        async def in_sync() -> None:
            async with connect(instance_addresses(config, "NYC"), None) as client:
                await wait_in_sync(client, {"a", "b", "c"})

        trio.run(in_sync)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        assert re.search(r"^mrs_replication_term\{[^}]*\} 1\.0$", text, re.MULTILINE)
        for name in {"a", "b", "c"} - {active}:
            for metric, value in (("in_sync", "1.0"), ("link_up", "1.0")):
                line = rf'^mrs_replication_{metric}\{{[^}}]*instance="{name}"[^}}]*\}} {value}$'
                assert re.search(line, text, re.MULTILINE), (metric, name)
            assert re.search(
                rf'^mrs_replication_backlog_records\{{[^}}]*instance="{name}"', text, re.MULTILINE
            )
    finally:
        for process in processes.values():
            process.terminate()


CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)


def _web_status(url: str) -> dict:
    with urllib.request.urlopen(url + "api/status", timeout=10) as answer:
        return json.loads(answer.read())["groups"][0]["status"]["replication"]


def test_the_web_view_shows_each_instance(etcd, tmp_path) -> None:
    """The active's web view (`[group.ops] web_listen`) shows the Replication table of
    `mrs status`: each instance's role, term, in-sync state, link and backlog. A
    replica is killed and messages put without it: its JSON and its row show the
    link down and the records it has not acknowledged; the other is in sync, 0."""
    port = free_port()
    ops = f'[group.ops]\nweb_listen = "127.0.0.1:{port}"\n'
    config = write_replicated_config(tmp_path, etcd.endpoint, ops + STANDARD_QUEUES)
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    url = f"http://127.0.0.1:{port}/"
    try:
        for process in processes.values():
            process.start()
        active = wait_active(processes, 30)
        dead, live = sorted({"a", "b", "c"} - {active})

        async def kill_one_and_put() -> None:
            async with connect(instance_addresses(config, "NYC"), "ORDERS") as client:
                await wait_in_sync(client, {"a", "b", "c"})
                processes[dead].kill()
                for i in range(5):  # answered with the live replica after the lag bound
                    await put_once(client, b"w%d" % i, "ORDERS", f"w-{i}", within_s=15)

        trio.run(kill_one_and_put)
        deadline_s = time.monotonic() + 30
        while True:
            shown = _web_status(url)
            replicas = shown["replicas"]
            if not replicas[dead]["connected"] and not replicas[dead]["in_sync"]:
                break
            assert time.monotonic() < deadline_s, shown
            time.sleep(0.2)
        assert shown["instance"] == active and shown["term"] >= 1
        assert replicas[dead]["backlog_records"] >= 5 and replicas[dead]["backlog_bytes"] > 0
        assert replicas[live]["in_sync"] and replicas[live]["backlog_records"] == 0
        with urllib.request.urlopen(url, timeout=10) as answer:
            page = answer.read().decode()
        assert 'id="replication"' in page
        if CHROMIUM is None:  # CI installs it (.ci/system-packages --tests)
            (pytest.fail if os.environ.get("CI") else pytest.skip)("needs chromium")
        for _ in range(3):  # on a loaded host the page's first fetch may miss the budget
            dom = subprocess.run(
                [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu"]
                + ["--virtual-time-budget=5000", "--dump-dom", url],
                capture_output=True,
                text=True,
                timeout=120,
            ).stdout
            cells = dict(re.findall(r'data-key="1/([^"]+)"[^>]*>([^<]*)<', dom))
            if f"{active}.role" in cells:
                break
        term = str(shown["term"])
        assert (cells[f"{active}.role"], cells[f"{active}.term"]) == ("active", term)
        assert (cells[f"{live}.role"], cells[f"{live}.in_sync"]) == ("replica", "yes")
        assert (cells[f"{live}.link"], cells[f"{live}.backlog_records"]) == ("up", "0")
        assert (cells[f"{dead}.in_sync"], cells[f"{dead}.link"]) == ("no", "down")
        assert int(cells[f"{dead}.backlog_records"]) >= replicas[dead]["backlog_records"]
        assert cells[f"{dead}.term"] == term and cells[f"{dead}.backlog_bytes"].endswith("B")
        # the bus-wide view (`mrs web --config`) finds the active and shows the same
        bus_web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mrs",
                "web",
                "--config",
                str(config),
                "--listen",
                "127.0.0.1:0",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert bus_web.stdout is not None
            assert select.select([bus_web.stdout], [], [], 30)[0], "mrs web did not start"
            bus_url = bus_web.stdout.readline().split()[1]
            bus_shown = _web_status(bus_url)
            assert (bus_shown["instance"], bus_shown["term"]) == (active, shown["term"])
            assert set(bus_shown["replicas"]) == {dead, live}
        finally:
            bus_web.terminate()
            bus_web.wait(timeout=15)
    finally:
        for process in processes.values():
            process.terminate()


def test_an_instance_refuses_another_groups_data_dir_and_loses_nothing(etcd, tmp_path) -> None:
    """Each instance's data directory records its group (group.json: id, name, the
    group's coordinator key); an instance of another group pointed at it -- another
    group id, or the same id in another bus -- refuses to start with one line, before
    opening anything; the owner's messages are all still there afterwards."""
    own = write_replicated_config(tmp_path / "own", etcd.endpoint, STANDARD_QUEUES)
    processes = {name: InstanceProcess(own, name) for name in ("a", "b", "c")}
    try:
        for process in processes.values():
            process.start()
        wait_active(processes, 30)

        async def put_three() -> None:
            async with connect(instance_addresses(own, "NYC"), "ORDERS") as client:
                await wait_in_sync(client, {"a", "b", "c"})
                for i in range(3):
                    await put_once(client, b"kept%d" % i, "ORDERS", f"kept-{i}")
                await wait_in_sync(client, {"a", "b", "c"})

        trio.run(put_three)
    finally:
        for process in processes.values():
            process.terminate()
    data_dir = own.parent / "a"
    recorded = json.loads((data_dir / "group.json").read_text())
    assert recorded == {
        "group_id": 1,
        "group": "NYC",
        "coordinator": "/mrs/own/1",
        "instance": "a",
    }
    journal = data_dir / "journals" / "data.mdb"
    before = (journal.read_bytes(), (data_dir / "group.json").read_bytes())

    other = write_replicated_config(tmp_path / "other", "http://127.0.0.1:9", STANDARD_QUEUES)
    text = other.read_text().replace('data_dir = "a"', f'data_dir = "{data_dir}"')
    for config_text, expected in (
        (text.replace('id = 1\nname = "NYC"', 'id = 2\nname = "LDN"'), "group 2 (LDN"),
        (text, "instance a of group 1 (NYC, coordinator key /mrs/other/1)"),  # another bus
    ):
        other.write_text(config_text)
        group = "2" if "LDN" in config_text else "1"
        refused = run_mrs("serve", "--config", str(other), "--group", group, "--instance", "a")
        assert refused.returncode == 1, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert (
            len(lines) == 1 and "belongs to group 1 (NYC, coordinator key /mrs/own/1)" in lines[0]
        )
        assert expected in lines[0] and "nothing was opened" in lines[0]
    assert (journal.read_bytes(), (data_dir / "group.json").read_bytes()) == before

    processes = {name: InstanceProcess(own, name) for name in ("a", "b", "c")}
    try:
        for process in processes.values():
            process.start()
        wait_active(processes, 30)

        async def all_there() -> list[bytes]:
            async with connect(instance_addresses(own, "NYC"), "ORDERS") as client:
                bodies = []
                for _ in range(3):
                    message = await client.get(timeout=10)
                    bodies.append(message.body)
                    await client.confirm(message.seq)
                return bodies

        assert trio.run(all_there) == [b"kept0", b"kept1", b"kept2"]
    finally:
        for process in processes.values():
            process.terminate()


def instances_with_fault_files(
    etcd, tmp_path: Path, monkeypatch
) -> tuple[Path, dict[str, Path], dict[str, InstanceProcess]]:
    """Three started instances of a group of this test's own, each reading its own
    MRS_FAULT_FILE (mrs.storage.fault_file): the bus file, the fault files and the
    processes by name."""
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    named = config.rename(config.with_name(f"bus_{tmp_path.name}.toml"))
    faults = {name: tmp_path / f"fault-{name}" for name in ("a", "b", "c")}
    processes = {}
    for name in ("a", "b", "c"):
        monkeypatch.setenv("MRS_FAULT_FILE", str(faults[name]))  # each its own switch
        processes[name] = InstanceProcess(named, name)
        processes[name].start()
    return named, faults, processes


def test_an_active_whose_flush_fails_after_sending_steps_down_and_loses_nothing(
    etcd, tmp_path, monkeypatch
) -> None:
    """The active sends each commit to its replicas before its own fsync. When that
    fsync fails (EIO injected at the flush, as LMDB reports a device error), the
    replicas may hold a commit the active lacks: it answers nothing of it, steps down
    and stops (one line; as the term's writer it could otherwise win the next term and
    fail again), a replica takes over, and the put the client was waiting for is
    answered by the new active under its idempotency key, stored once, not POSSDUPL."""
    named, faults, processes = instances_with_fault_files(etcd, tmp_path, monkeypatch)
    try:
        first = wait_active(processes, 30)

        async def scenario() -> tuple[list, str]:
            async with connect(instance_addresses(named, "NYC"), "ORDERS") as client:
                await wait_in_sync(client, {"a", "b", "c"})
                for i in range(3):
                    await put_once(client, b"before%d" % i, "ORDERS", f"before-{i}")
                faults[first].write_text("EIO")
                psb = await put_once(client, b"during", "ORDERS", "during")
                assert psb.status == Status.SUCCESS
                active = (await client.status())["replication"]["instance"]
                taken: list[tuple[bytes, bool]] = []
                while len(taken) < 4:  # a loaded host's new active may answer late
                    try:
                        message = await client.get(timeout=15)
                    except MrsError:
                        return taken, active
                    taken.append((message.body, message.delivery_status == Status.POSSDUPL))
                    await client.confirm(message.seq)
                try:  # and no fifth: "during" stored once
                    extra = await client.get(timeout=1)
                    taken.append((extra.body, extra.delivery_status == Status.POSSDUPL))
                except MrsError:
                    pass
                return taken, active

        taken, active = trio.run(scenario)
        assert active != first
        assert taken == [(b"before0", False), (b"before1", False), (b"before2", False)] + [
            (b"during", False)
        ]
        assert processes[first].process.wait(timeout=30) == 1  # it stopped, in one line
    finally:
        for process in processes.values():
            process.terminate()
    lines = (named.parent / f"{first}.log").read_text().splitlines()
    assert "steps down from term 1: a commit sent to the replicas failed here" in "\n".join(lines)
    assert lines[-1].startswith(f"mrs: instance {first} stops: a commit sent to the replicas")
    assert lines[-1].endswith("start it again: it takes a copy from the active")


def test_a_replica_whose_disk_fails_is_dropped_says_why_once_and_rejoins(
    etcd, tmp_path, monkeypatch
) -> None:
    """A replica's journals refuse the records (ENOSPC injected at its flush, as a full
    disk reports it): the active keeps answering with the other replica, drops it from
    the in-sync set and shows why in its status; the replica logs one ERROR and the
    active one WARNING however many times the link is dialled again meanwhile (not one
    line and one resent backlog per retry); once the disk takes writes the replica
    catches up, and every put is delivered once, in order."""
    named, faults, processes = instances_with_fault_files(etcd, tmp_path, monkeypatch)
    try:
        active = wait_active(processes, 30)
        victim = min(set(processes) - {active})

        async def scenario() -> tuple[dict, list[bytes]]:
            async with connect(instance_addresses(named, "NYC"), "ORDERS") as client:
                await wait_in_sync(client, {"a", "b", "c"})
                await put_once(client, b"m0", "ORDERS", "m-0")
                faults[victim].write_text("ENOSPC")
                sent = 1
                with trio.fail_after(10 * REPLICATION_LAG_S_MAX):
                    while True:  # every put answered while the replica cannot store
                        psb = await put_once(client, b"m%d" % sent, "ORDERS", f"m-{sent}")
                        assert psb.status == Status.SUCCESS
                        sent += 1
                        replica = (await client.status())["replication"]["replicas"][victim]
                        if not replica["in_sync"] and replica["problem"]:
                            break
                faults[victim].write_text("")
                await wait_caught_up(client, {"a", "b", "c"})
                taken = []
                while len(taken) < sent:
                    message = await client.get(timeout=5)
                    taken.append(message.body)
                    await client.confirm(message.seq)
                return replica, taken

        replica, taken = trio.run(scenario)
    finally:
        for process in processes.values():
            process.terminate()
    assert "No space left on device" in replica["problem"]
    assert taken == [b"m%d" % index for index in range(len(taken))]
    victim_log = (named.parent / f"{victim}.log").read_text()
    active_log = (named.parent / f"{active}.log").read_text()
    assert victim_log.count("ERROR mrs.replication: replica") == 1
    assert f"replica {victim} cannot store the active's records: journal device" in victim_log
    assert f"replica {victim} stores the active's records again" in victim_log
    assert active_log.count(f"WARNING mrs.replication: replica {victim} cannot store") == 1
    assert f"replica {victim} stores and acknowledges records again" in active_log


def test_etcd_that_lost_its_data_does_not_promote_a_stale_replica(tmp_path) -> None:
    """etcd loses its data (its member's data directory wiped) while the group holds
    answered puts, and the replica that fell behind starts first: it does not become
    active on an empty etcd (it waits for a majority's census, which it does not top);
    once the others are back, the most advanced takes over in a term above every term
    the journals saw, and every answered put is delivered, in order. Before the census
    (mrs.replication.census), the stale replica won a new term 1 and the others took a
    full copy of it: 13 of 20 answered puts were lost."""
    (tmp_path / "etcd").mkdir()
    etcd_server = EtcdServer(tmp_path / "etcd")
    etcd_server.start()
    config = write_replicated_config(tmp_path, etcd_server.endpoint, STANDARD_QUEUES)
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    for process in processes.values():
        process.start()
    try:
        active = wait_active(processes, 30)
        stale, fresh = sorted(set(processes) - {active})

        async def put_range(first: int, last: int, caught_up: bool) -> None:
            async with connect(instance_addresses(config, "NYC"), "ORDERS") as client:
                if caught_up:
                    await wait_caught_up(client, {"a", "b", "c"})
                for index in range(first, last):
                    await put_once(client, b"m%d" % index, "ORDERS", f"m-{index}")

        trio.run(put_range, 0, 10, True)
        processes[stale].terminate()
        trio.run(put_range, 10, 20, False)  # answered by the active and `fresh`
        for name in (active, fresh):
            processes[name].terminate()
        etcd_server.stop()
        shutil.rmtree(etcd_server.directory / "etcd-data")
        etcd_server.start()
        processes[stale].start()
        processes[stale].wait_for("REPLICA")
        for name in (active, fresh):
            processes[name].start()
        new_active = wait_active(processes, 30)

        async def take_all() -> list[bytes]:
            async with connect(instance_addresses(config, "NYC"), "ORDERS") as client:
                taken = []
                while len(taken) < 20:
                    message = await client.get(timeout=10)
                    taken.append(message.body)
                    await client.confirm(message.seq)
                return taken

        taken = trio.run(take_all)
    finally:
        for process in processes.values():
            process.terminate()
        etcd_server.stop()
    assert new_active != stale
    assert taken == [b"m%d" % index for index in range(20)]
    stale_log = (config.parent / f"{stale}.log").read_text()
    assert "etcd holds no record of group 1's term 1 or later" in stale_log
    assert f"instance {stale} won" not in stale_log.split("etcd holds no record")[1]


def test_queues_changed_at_run_time_survive_a_failover_to_another_machine(etcd, tmp_path) -> None:
    """Each instance with its own copy of the bus file, as on three machines: `mrs
    admin add-queue` and `set-limits` on the active (not the first instance listed:
    the command finds it), three puts to the new queue, the active SIGKILLed. The new
    active brings its own file up to the change (journaled with the group's records,
    mrs.ops.bus_file_record) and delivers the three puts; before, it had no such
    queue and kept them undelivered. `mrs admin journal` on it shows both changes
    (they were in the old active's data directory only, mrs.ops.admin_log)."""
    first_dir = tmp_path / f"m_{tmp_path.name}"  # the etcd prefix: this test's own
    write_replicated_config(first_dir, etcd.endpoint, STANDARD_QUEUES)
    files = {}
    for name in ("a", "b", "c"):
        machine = tmp_path / f"m_{tmp_path.name}" if name == "a" else tmp_path / f"m_{name}"
        machine.mkdir(exist_ok=True)
        files[name] = machine / "bus.toml"
        if name != "a":
            shutil.copyfile(first_dir / "bus.toml", files[name])
    instances = {name: InstanceProcess(files[name], name) for name in files}
    for process in instances.values():
        process.start()
    try:
        first = wait_active(instances, 30)
        addresses = instance_addresses(files["a"], "NYC")

        async def all_in_sync() -> None:
            async with connect(addresses, None) as client:
                await wait_in_sync(client, {"a", "b", "c"})

        trio.run(all_in_sync)
        if first == "a":  # `mrs admin` must find the active, not dial the first listed
            moved = run_mrs("failover", "--config", str(files["a"]), "NYC", "--to", "b")
            assert moved.returncode == 0, moved.stderr
            first = wait_active({"b": instances["b"]}, FAILOVER_S_MAX)
        for command in (
            ["add-queue", "30", "RETRY"],
            ["set-limits", "RETRY", "--messages-max", "77"],
        ):
            done = run_mrs("admin", *command, "--config", str(files["a"]))
            assert done.returncode == 0, done.stderr

        async def put_three() -> None:
            async with connect(addresses, "ORDERS") as client:
                for i in range(3):
                    await put_once(client, b"r%d" % i, "1.30", f"retry-{i}")
                await wait_in_sync(client, {"a", "b", "c"})

        trio.run(put_three)
        instances[first].kill()
        others = {n: p for n, p in instances.items() if n != first}
        second = wait_active(others, FAILOVER_S_MAX)
        text = files[second].read_text()
        assert 'name = "RETRY"' in text and "messages_max = 77" in text

        async def take_three() -> list[bytes]:
            async with connect(addresses, "RETRY") as client:
                status = await client.status()
                assert status["queues"]["1.30"]["name"] == "RETRY"
                return await _take_all(client)

        assert trio.run(take_three) == [b"r0", b"r1", b"r2"]
        # who did what follows the group: the new active's admin journal has both
        shown = run_mrs("admin", "journal", "--config", str(files["a"]), "--json")
        assert shown.returncode == 0, shown.stderr
        actions = [r["action"] for r in json.loads(shown.stdout)["records"]]
        assert actions == ["add_queue", "set_limits"]
        unnamed = run_mrs("admin", "journal", "--offline", "--config", str(files["a"]))
        assert unnamed.returncode == 2 and "say whose journals with --instance" in unnamed.stderr
    finally:
        for process in instances.values():
            process.terminate()


def test_a_paused_active_is_passed_over_within_seconds(instances) -> None:
    """SIGSTOP the active: it keeps its connections open and its port takes new ones,
    but answers nothing. A replica takes over once the lease runs out, and the client
    (given the instances) notices the silence within seconds, passes the paused one
    over and re-sends its unanswered put there; before, it dialled the paused one
    again and again and the put was never answered. SIGCONT: the old active steps
    down; every answered put is delivered once, in order."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")
    paused = instances[first]

    async def scenario() -> tuple[float, list[bytes]]:
        async with connect(addresses, "ORDERS") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            for i in range(3):
                await put_once(client, b"m%d" % i, "ORDERS", f"paused-{i}")
            paused.pause()
            stopped_s = time.monotonic()
            try:
                with trio.fail_after(FAILOVER_S_MAX):
                    await put_once(client, b"m3", "ORDERS", "paused-3")
                answered_s = time.monotonic() - stopped_s
            finally:
                paused.resume()
            paused.wait_for("STEPPED DOWN", FAILOVER_S_MAX)
            return answered_s, await _take_all(client)

    answered_s, bodies = trio.run(scenario)
    assert bodies == [b"m0", b"m1", b"m2", b"m3"]
    print(f"a put across a paused active answered after {answered_s:.1f} s")


def test_a_failover_to_a_paused_replica_is_refused_and_never_carried_out_later(instances) -> None:
    """SIGSTOP a replica, then `mrs failover --to` it: it has every record (nothing was
    written since), so before, the active named it alone in sync and stopped, and the
    group had no active until the replica was resumed. Now the active first makes a
    record the replica must acknowledge; it does not, so the active refuses in one line,
    keeps answering, and the request is gone from etcd (not carried out at SIGCONT)."""
    first = wait_active(instances, 30)
    config = instances["a"].config_path
    addresses = instance_addresses(config, "NYC")
    target = "b" if first != "b" else "c"

    async def scenario() -> dict:
        async with connect(addresses, "ORDERS") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            term = (await client.status())["replication"]["term"]
            instances[target].pause()
            try:
                refused = await trio.to_thread.run_sync(
                    run_mrs, "failover", "--config", str(config), "NYC", "--to", target
                )
                await put_once(client, b"while-paused", "ORDERS", "paused-target")
            finally:
                instances[target].resume()
            assert refused.returncode == 1, refused.stdout
            assert len(refused.stderr.strip().splitlines()) == 1
            assert f"{first} refused the failover: {target} did not acknowledge" in refused.stderr
            status = await wait_in_sync(client, {"a", "b", "c"})
            assert (status["instance"], status["term"]) == (first, term)
            assert (await client.get(timeout=10)).body == b"while-paused"
        bus = load_config(config)
        assert bus.coordinator is not None
        coordinator = EtcdCoordinator(
            EtcdClient(bus.coordinator.etcd),
            etcd_prefix(bus.coordinator.prefix, 1),
            "test",
            bus.coordinator.lease_ttl_s,
        )
        try:
            assert await coordinator.failover_requested() is None
        finally:
            await coordinator.aclose()
        return status

    trio.run(scenario)


def test_calls_made_while_the_client_reconnects_wait_for_the_new_active(instances) -> None:
    """The active is SIGKILLed with a message handed out. A get and a status call made
    after the client saw the loss, before it reached the new active, wait for it
    within their timeout (before, each raised NOTACTIVE at once, and an application
    looping on get spun on that error until the client had reconnected); the message
    comes again, POSSDUPL, and its confirm is taken by the new active."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def scenario() -> None:
        async with connect(addresses, "ORDERS") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            await put_once(client, b"w0", "ORDERS", "wait-0")
            handed = await client.get(timeout=10)
            assert handed.delivery_status == Status.CONFIRMREQ
            instances[first].kill()
            with trio.fail_after(10):
                while client.connected:
                    await trio.sleep(0.01)
            with trio.fail_after(FAILOVER_S_MAX):
                status = await client.status()
            assert status["replication"]["instance"] != first
            again = await client.get(timeout=FAILOVER_S_MAX)
            assert (again.body, again.delivery_status) == (b"w0", Status.POSSDUPL)
            await client.confirm(again.seq)
            with pytest.raises(MrsError) as none_left:
                await client.get(timeout=0)
            assert none_left.value.status == Status.NOMOREMSG

    trio.run(scenario)


def test_a_client_started_during_a_failover_waits_for_the_new_active(instances) -> None:
    """`connect` with the instances, made just after a SIGKILL of the active, when no
    instance listens for clients (the lease has 3 s to run): it waits for the new
    active (clients.dialing `Dialer.open_first`) and gets what the old one stored;
    before, it raised LINK_DOWN at once, so an application started during a failover
    failed where one started a moment earlier waited."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def scenario() -> float:
        async with connect(addresses, "ORDERS") as client:
            await wait_in_sync(client, {"a", "b", "c"})
            await put_once(client, b"before", "ORDERS", "started-0")
        instances[first].kill()
        killed_s = time.monotonic()
        async with connect(addresses, "ORDERS") as client:
            waited_s = time.monotonic() - killed_s
            assert (await client.status())["replication"]["instance"] != first
            message = await client.get(timeout=10)
            assert (message.body, message.delivery_status) == (b"before", Status.CONFIRMREQ)
            await client.confirm(message.seq)
        return waited_s

    waited_s = trio.run(scenario)
    assert waited_s < FAILOVER_S_MAX
    print(f"connect made during a failover answered after {waited_s:.1f} s")


SAF_TASKS = 4
JOURNALED_PUTS = 20


def test_the_client_saf_journal_keeps_every_put_across_a_kill_of_the_active(
    instances, tmp_path
) -> None:
    """A client with its own SAF journal (docs/client-saf.md) and the group's
    addresses: SIGKILL the active while four tasks put. Puts made while no instance
    answers go to the client's journal (JOURNAL_ON, STORED), puts in flight are re-sent
    to the new active, the journal drains there (LINK_UP) and puts go straight on:
    every put answered SUCCESS or JOURNAL_ON is delivered once, each task's in order,
    none marked POSSDUPL (none was handed out)."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")
    statuses: collections.Counter = collections.Counter()

    async def scenario() -> tuple[list[bytes], dict[int, int], list[Status]]:
        answered = trio.Semaphore(0)
        put_by_task: dict[int, int] = {}
        stop = trio.Event()
        async with connect(addresses, "ORDERS", saf_journal=tmp_path / "client.saf") as client:
            await wait_in_sync(client, {"a", "b", "c"})

            async def putter(task: int) -> None:
                i = 0
                while not stop.is_set():
                    psb = await client.put(b"t%d:%d" % (task, i), "ORDERS")  # WF_DQF
                    assert psb.status in (Status.SUCCESS, Status.JOURNAL_ON), psb
                    statuses[Status(psb.status).name] += 1
                    i += 1
                    answered.release()
                    await trio.sleep(0.002)
                put_by_task[task] = i

            async with trio.open_nursery() as nursery:
                for task in range(SAF_TASKS):
                    nursery.start_soon(putter, task)
                for _ in range(40):
                    await answered.acquire()
                instances[first].kill()
                with trio.fail_after(10):
                    await client.wait_journal_status(Status.JOURNAL_ON)
                own = SAF_TASKS  # this task's puts: journaled, then after the drain
                own_statuses = [  # no instance answers before the lease (3 s) runs out
                    (await client.put(b"t%d:%d" % (own, i), "ORDERS")).status
                    for i in range(JOURNALED_PUTS)
                ]
                with trio.fail_after(FAILOVER_S_MAX + 30):
                    await client.wait_journal_status(Status.LINK_UP)
                own_statuses += [  # straight to the new active once the journal drained
                    (await client.put(b"t%d:%d" % (own, i), "ORDERS")).status
                    for i in range(JOURNALED_PUTS, 2 * JOURNALED_PUTS)
                ]
                put_by_task[own] = 2 * JOURNALED_PUTS
                stop.set()
            bodies = await _take_all(client)
            assert client.journal_backlog == 0
        return bodies, put_by_task, own_statuses

    bodies, put_by_task, own_statuses = trio.run(scenario)
    assert own_statuses == [Status.JOURNAL_ON] * JOURNALED_PUTS + [Status.SUCCESS] * JOURNALED_PUTS
    assert statuses["SUCCESS"] >= 40, statuses  # the tasks' puts before the kill
    assert len(bodies) == len(set(bodies)) == sum(put_by_task.values())
    for task, count in put_by_task.items():
        mine = [int(body.split(b":")[1]) for body in bodies if body.startswith(b"t%d:" % task)]
        assert mine == list(range(count)), task


def test_the_pcj_is_archived_on_the_active_and_the_deletes_reach_every_instance(
    etcd, tmp_path
) -> None:
    """`pcj_archive_after_s` on a replicated group (it was refused at load): the active
    writes the confirmed messages' PCJ records to Parquet in its archive directory and
    deletes them through its writer, so the deletes are on the replicas too. After a
    SIGKILL of the active, the new one's PCJ is empty and it archives nothing again."""
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    text = config.read_text().replace('name = "NYC"\n', 'name = "NYC"\npcj_default = true\n')
    config.write_text(text + "[group.ops]\npcj_archive_after_s = 0\npcj_archive_interval_s = 1\n")
    named = config.rename(config.with_name(f"bus_{tmp_path.name}.toml"))
    processes = {name: InstanceProcess(named, name) for name in ("a", "b", "c")}
    for process in processes.values():
        process.start()
    try:
        first = wait_active(processes, 30)

        async def pcj_archived(client, archived_min: int) -> dict:
            with trio.fail_after(30):
                while True:
                    status = await client.status()
                    archive = status.get("pcj_archive")
                    pcj = status["journal"]["records"]["pcj"]
                    if archive is not None and archive["archived"] >= archived_min and not pcj:
                        return archive
                    await trio.sleep(0.1)

        async def scenario() -> tuple[dict, dict]:
            async with connect(instance_addresses(named, "NYC"), "ORDERS") as client:
                await wait_in_sync(client, {"a", "b", "c"})
                for i in range(20):
                    await put_once(client, b"audited %d" % i, "ORDERS", f"audited-{i}")
                for _ in range(20):
                    await client.confirm((await client.get(timeout=10)).seq)
                archive = await pcj_archived(client, 20)
                await wait_caught_up(client, {"a", "b", "c"})  # the deletes are on both
                processes[first].kill()
                with trio.fail_after(10):
                    while client.connected:  # a status call in flight would be lost with it
                        await trio.sleep(0.01)
                after = await pcj_archived(client, 0)
                assert (await client.status())["replication"]["instance"] != first
                return archive, after

        archive, after = trio.run(scenario)
    finally:
        for process in processes.values():
            process.terminate()
    assert archive["archived"] == 20 and archive["pcj_remaining"] == 0
    rows = [
        seq
        for path in (tmp_path / first / "pcj-archive").rglob("*.parquet")
        for seq in pq.read_table(path, columns=["seq"]).column("seq").to_pylist()
    ]
    assert len(rows) == len(set(rows)) == 20
    assert (after["archived"], after["pcj_remaining"]) == (0, 0)


def test_a_grant_made_on_the_active_holds_on_the_next_one_on_another_machine(
    etcd, tmp_path
) -> None:
    """[auth] on, each instance with its own copy of the bus file and the credentials
    file, as on three machines: `mrs admin grant` on the active writes its machine's
    file, and commits the new text to the journals. After a SIGKILL of the active, the
    new one brings its own file up to that grant, and the granted principal attaches;
    before, the new active's older file refused it (docs said: copy the file by hand)."""
    home = tmp_path / f"m_{tmp_path.name}"  # the etcd prefix: this test's own
    write_replicated_config(home, etcd.endpoint, STANDARD_QUEUES)
    config = home / "bus.toml"
    config.write_text(
        config.read_text() + '[auth]\ncredentials = "creds.toml"\nlink_secrets = "secrets"\n'
    )
    add_principal(config, "owner", ["--admin", "config", "--admin", "status"])
    add_principal(config, "consumer", ["--admin", "status"])
    files = {"a": config}
    for name in ("b", "c"):
        machine = tmp_path / f"m_{name}"
        machine.mkdir()
        for each in ("bus.toml", "creds.toml", "secrets"):
            if (home / each).exists():
                shutil.copy2(home / each, machine / each)
        files[name] = machine / "bus.toml"
    instances = {name: InstanceProcess(files[name], name) for name in files}
    for process in instances.values():
        process.start()
    owner = creds("owner")
    try:
        first = wait_active(instances, 30)
        addresses = instance_addresses(config, "NYC")

        async def all_in_sync() -> None:
            async with connect(addresses, None, credentials=owner) as client:
                await wait_in_sync(client, {"a", "b", "c"})

        trio.run(all_in_sync)
        granted = run_mrs(
            "admin", "grant", "consumer", "--attach", "1.10", "--admin", "status",
            "--config", str(config),
            env={"MRS_AUTH_NAME": "owner", "MRS_AUTH_PASSWORD": password_of("owner")},
        )  # fmt: skip
        assert granted.returncode == 0, granted.stderr
        trio.run(all_in_sync)  # the grant's commit is on every instance
        instances[first].kill()
        second = wait_active({n: p for n, p in instances.items() if n != first}, FAILOVER_S_MAX)

        async def attach_as_consumer() -> dict:
            async with connect(addresses, "ORDERS", credentials=creds("consumer")) as client:
                return await client.status()

        status = trio.run(attach_as_consumer)
        assert status["replication"]["instance"] == second
        assert 'attach = ["1.10"]' in (files[second].parent / "creds.toml").read_text()
    finally:
        for process in instances.values():
            process.terminate()


def test_mrs_pcj_archive_on_a_replicated_group_is_run_by_the_active(etcd, tmp_path) -> None:
    """`mrs pcj archive --config` on a replicated group (refused before: a deletion in
    one instance's journals would reach no other): the command asks the active, which
    runs the archive itself, its deletes through its writer; the command prints the
    run's summary. After a SIGKILL of the active the new one's PCJ is empty."""
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    text = config.read_text().replace('name = "NYC"\n', 'name = "NYC"\npcj_default = true\n')
    named = config.with_name(f"bus_{tmp_path.name}.toml")
    named.write_text(text)
    processes = {name: InstanceProcess(named, name) for name in ("a", "b", "c")}
    for process in processes.values():
        process.start()
    try:
        first = wait_active(processes, 30)
        addresses = instance_addresses(named, "NYC")

        async def confirm_ten() -> None:
            async with connect(addresses, "ORDERS") as client:
                await wait_in_sync(client, {"a", "b", "c"})
                for i in range(10):
                    await put_once(client, b"kept %d" % i, "ORDERS", f"kept-{i}")
                for _ in range(10):
                    await client.confirm((await client.get(timeout=10)).seq)

        trio.run(confirm_ten)
        archived = run_mrs(
            "pcj", "archive", "--config", str(named), "--group", "1", "--until", "now", "--json"
        )
        assert archived.returncode == 0, archived.stderr
        summary = json.loads(archived.stdout)
        assert (summary["archived"], summary["pcj_remaining"]) == (10, 0)
        assert Path(summary["dir"]).is_relative_to(tmp_path / first)

        async def pcj_after_a_failover() -> int:
            async with connect(addresses, None) as client:
                await wait_caught_up(client, {"a", "b", "c"})
                processes[first].kill()
                with trio.fail_after(10):
                    while client.connected:
                        await trio.sleep(0.01)
                status = await client.status()
                assert status["replication"]["instance"] != first
                return status["journal"]["records"]["pcj"]

        assert trio.run(pcj_after_a_failover) == 0
    finally:
        for process in processes.values():
            process.terminate()


def test_a_replica_whose_data_directory_is_deleted_stops_in_one_line(instances) -> None:
    """A replica's data directory removed under it: it stops within seconds, exit 1,
    with one line saying so. Before, it logged that it stopped and went on, still
    counted in sync, and at the next election died with an `unexpected error` and a
    traceback (its journals could not close the term)."""
    first = wait_active(instances, 30)
    config = instances["a"].config_path
    gone = next(name for name in ("a", "b", "c") if name != first)
    shutil.rmtree(config.parent / gone)
    process = instances[gone].process
    assert process is not None
    assert process.wait(timeout=15) == 1
    log_text = (config.parent / f"{gone}.log").read_text()
    assert f"mrs: instance {gone} stops: " in log_text and "was deleted" in log_text
    assert "Traceback" not in log_text and "unexpected error" not in log_text

    async def still_answered() -> None:
        async with connect(instance_addresses(config, "NYC"), "ORDERS") as client:
            await put_once(client, b"after", "ORDERS", "after-the-wipe")
            assert (await client.get(timeout=10)).body == b"after"

    trio.run(still_answered)


def test_an_instance_that_cannot_take_its_client_port_does_not_take_the_term(instances) -> None:
    """An instance listens for clients only while active. One whose client port
    another process holds won a planned switch-over, then exited on the bind, and
    the group was left with a term and no active. It is no candidate while the port
    is taken (one line saying why); the active stays, or takes its term back."""
    first = wait_active(instances, 30)
    config = instances["a"].config_path
    target = next(name for name in ("a", "b", "c") if name != first)
    taken = load_config(config).group(1).instance(target)
    squatter = socket.socket()
    squatter.bind((taken.listen_host, taken.listen_port))
    squatter.listen()
    with squatter:
        switched = run_mrs(
            "failover", "--config", str(config), "NYC", "--to", target, "--wait", "5"
        )
        assert switched.returncode != 0, switched.stdout

        async def answered() -> None:
            # The handed-over term comes back to the old active after the fallback
            # (REPLICATION_HANDOVER_FALLBACK_S); until then no instance listens. The
            # squatter's port is left out (it takes connections and answers nothing).
            addresses = [a for a in instance_addresses(config, "NYC") if a != taken.listen]
            with trio.fail_after(60):
                while True:  # another process's state: nothing to await but a dial
                    try:
                        async with connect(addresses, "ORDERS") as client:
                            await put_once(client, b"still", "ORDERS", "squatted")
                            status = await client.status()
                        break
                    except ConnectionLost:
                        await trio.sleep(0.5)
            assert status["replication"]["instance"] != target

        trio.run(answered)
    assert instances[target].process is not None and instances[target].process.poll() is None
    log_text = (config.parent / f"{target}.log").read_text()
    assert f"instance {target} is not a candidate: " in log_text
    assert "the port is in use by another process" in log_text


def test_a_replication_port_in_use_is_named_in_one_line(etcd, tmp_path) -> None:
    """Another process holds an instance's replication address: it exits 1 with one
    line naming the setting and the address (before: `mrs: Address already in use`)."""
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    me = load_config(config).group(1).instance("a")
    squatter = socket.socket()
    squatter.bind((me.replication_host, me.replication_port))
    squatter.listen()
    with squatter:
        refused = run_mrs("serve", "--config", str(config), "--group", "1", "--instance", "a")
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"mrs: {config}: group 1 (NYC) instance a replication = "
        f"{me.replication_host}:{me.replication_port}: the port is in use by another "
        "process; stop it or change replication"
    ]


def test_status_finds_the_active_past_a_paused_instance_listed_first(instances) -> None:
    """The instance listed first is paused (it takes connections, answers nothing) and
    a replica has taken over: `mrs status` asks etcd's active first and shows the
    group UP. Before, the paused one took the whole --timeout and the group showed
    DOWN while the new active served."""
    first = wait_active(instances, 30)
    config = instances["a"].config_path
    if first != "a":
        moved = run_mrs("failover", "--config", str(config), "NYC", "--to", "a")
        assert moved.returncode == 0, moved.stderr
        assert wait_active({"a": instances["a"]}, FAILOVER_S_MAX) == "a"

    async def all_in_sync() -> None:  # else no replica may take over (nobody in sync)
        async with connect(instance_addresses(config, "NYC"), None) as client:
            await wait_in_sync(client, {"a", "b", "c"})

    trio.run(all_in_sync)
    instances["a"].pause()
    try:
        others = {name: process for name, process in instances.items() if name != "a"}
        taken_over = wait_active(others, FAILOVER_S_MAX)
        shown = run_mrs("status", "--config", str(config), "--json", "--timeout", "4")
    finally:
        instances["a"].resume()
    assert shown.returncode == 0, shown.stdout + shown.stderr
    (view,) = json.loads(shown.stdout)["groups"]
    assert view["up"], view["error"]
    assert view["status"]["replication"]["instance"] == taken_over
