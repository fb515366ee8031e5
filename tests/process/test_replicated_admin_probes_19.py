"""Operator actions on a replicated group, and `mrs failover`'s edges, as real
processes: etcd, three `mrs serve --instance` processes, the real `mrs` commands.

What an operator depends on: an action the group answered as done is done on a
majority of its instances, like an answered WF put, so a SIGKILL of the active right
after the answer and the failover that follows lose none of it; an action the group
could not make durable is not answered as done. `mrs failover` says in one line why it
did nothing, and a switch-over loses nothing and marks nothing POSSDUPL that was not
handed out.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

from clients import DeliveryMode, MrsError, Status, Uma, connect, instance_addresses
from journals import JournalStore
from mrs.group.incarnation import PEER_INCARNATION_PREFIX
from sim.etcd import wait_active
from sim.ports import free_port
from sim.processes import GroupProcess
from sim.proxy import FaultProxy
from tests.cli_helpers import run_mrs
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config
from tests.process.test_replication import wait_caught_up, wait_dropped

__all__ = ["etcd"]  # the fixture, used by name

WAIT_S = 30.0
LEASE_TTL_S = 2
UNANSWERED_S = 2.0
"""How long an action that must wait for a replica is given to answer anyway."""


def _linked_config(etcd_endpoint: str, directory: Path) -> Path:
    """Plain group 1 (NYC) linked to replicated group 2 (LDN: instances a, b, c)."""
    config = write_replicated_config(directory, etcd_endpoint, STANDARD_QUEUES, LEASE_TTL_S)
    text = config.read_text().replace('id = 1\nname = "NYC"', 'id = 2\nname = "LDN"')
    plain = '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n'
    config.write_text(text + plain + STANDARD_QUEUES + "[[link]]\ngroups = [1, 2]\n")
    return config


def _peer_recorded(data_dir: Path, peer: int) -> bool:
    """Whether an instance's journals record `peer`'s journals' incarnation (read
    beside the running instance). The reset deletes the record last, after the dedupe
    keys: without it, the keys are gone too."""
    store = JournalStore(data_dir / "journals", readonly=True)
    try:
        return store.meta_get(f"{PEER_INCARNATION_PREFIX}{peer}") is not None
    finally:
        store.close()


def _wait_logged(log: Path, pattern: str, after_bytes: int) -> None:
    """Until `log` has a line matching `pattern` after byte `after_bytes`: the moment
    the active did the action has no other trace another process can await."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if re.search(pattern, log.read_text(errors="replace")[after_bytes:]):
            return
        time.sleep(0.005)
    raise AssertionError(f"no {pattern!r} in {log}")


async def _link_state(addresses: list[str], peer: int) -> str:
    async with connect(addresses, None) as client:
        return (await client.status())["links"][str(peer)]["state"]


async def _store_from_peer_then_stop(config: Path, nyc: GroupProcess) -> None:
    """Group 1 stores one message in group 2 over their link (group 2 records its
    journals and keeps a dedupe key), every instance holds it, then group 1 stops."""
    ldn = instance_addresses(config, "LDN")
    nyc_address = nyc.start()
    with trio.fail_after(WAIT_S):
        while await _link_state([nyc_address], 2) != "up":
            await trio.sleep(0.05)
    async with connect(nyc_address, "SENDER") as sender:
        psb = await sender.put(b"m", "2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
        assert psb.status == Status.SUCCESS, psb
    async with connect(ldn, "ORDERS") as client:
        await wait_caught_up(client, {"a", "b", "c"})
    await trio.to_thread.run_sync(nyc.terminate)
    with trio.fail_after(WAIT_S):
        while await _link_state(ldn, 1) == "up":
            await trio.sleep(0.05)


def _reset_link(config: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mrs", "admin", "reset-link", "1", "--force"]
        + ["--config", str(config), "--group", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_reset_link_is_answered_only_once_a_majority_holds_it(etcd, tmp_path) -> None:
    """`mrs admin reset-link` on the active while both replicas are down: before, it
    answered "reset" at once from the active's disk alone; the active SIGKILLed, the
    replicas took over still holding the peer's old journals' record and dedupe keys
    (the link refused again, a rebuilt peer's messages dropped as resends). Now it is
    not answered as done (the command fails with one line), and run again on the new
    active it is answered once on a majority: the active SIGKILLed right after the
    answer, the next one has forgotten them too."""
    config = _linked_config(etcd.endpoint, tmp_path)
    instances = {name: InstanceProcess(config, name, group_id=2) for name in "abc"}
    nyc = GroupProcess(config, 1)
    try:
        for process in instances.values():
            process.start()
        first = wait_active(instances, WAIT_S)
        trio.run(_store_from_peer_then_stop, config, nyc)
        replicas = {name: p for name, p in instances.items() if name != first}
        for process in replicas.values():
            process.kill()
        log = tmp_path / f"{first}.log"
        size = log.stat().st_size
        command = _reset_link(config)
        _wait_logged(log, r"admin reset-link by", size)
        # answered at once before: the command ended; now it waits for a replica
        with contextlib.suppress(subprocess.TimeoutExpired):
            command.wait(timeout=UNANSWERED_S)
        instances[first].kill()
        out, err = command.communicate(timeout=WAIT_S)
        for process in replicas.values():
            process.start()
        second = wait_active(replicas, WAIT_S)
        if command.returncode == 0:  # answered as done: the new active must hold it
            assert not _peer_recorded(tmp_path / second, 1), out
        assert command.returncode == 1, out
        assert len(err.strip().splitlines()) == 1 and "may or may not be done" in err, err

        where = ("--config", str(config), "--group", "2")
        again = run_mrs("admin", "reset-link", "1", "--force", *where)
        assert again.returncode == 0, again.stderr
        assert "journals" in again.stdout and "forgotten" in again.stdout, again.stdout
        instances[second].kill()  # right after the answer
        instances[first].start()
        third = wait_active({n: p for n, p in instances.items() if n != second}, WAIT_S)
        assert third != first  # the old active has nothing of the second's term
        assert not _peer_recorded(tmp_path / third, 1)
    finally:
        nyc.terminate()
        for process in instances.values():
            process.terminate()


def _group(etcd_endpoint: str, directory: Path) -> dict[str, InstanceProcess]:
    """Three instances of a replicated group of this test's own (lease 2 s)."""
    config = write_replicated_config(directory, etcd_endpoint, STANDARD_QUEUES, LEASE_TTL_S)
    return {name: InstanceProcess(config, name) for name in "abc"}


CONSUMERS = 16
PRODUCERS = 8
PUTS_BEFORE = 200
ETCD_LATENCY_S = 0.01
"""Each way, per chunk, between every instance (and the command) and etcd."""


async def _consume_across_a_switch(config: Path) -> tuple[set[int], dict[int, int], list[int], str]:
    """PRODUCERS tasks put to ANYORDER while CONSUMERS tasks of one client get and
    confirm (most gets wait for the next put), and `mrs failover` runs once
    PUTS_BEFORE are answered; the puts go on until it is over: the messages answered,
    deliveries per message, those that came POSSDUPL without having been received
    before, and the command's output."""
    addresses = instance_addresses(config, "NYC")
    answered: set[int] = set()
    seen: dict[int, int] = {}
    unseen_marked: list[int] = []
    started = trio.Event()

    async def produce(client: Any, first: int) -> None:
        for number in itertools.count(first, PRODUCERS):  # until the switch is over
            psb = await client.put(b"%d" % number, "ANYORDER")  # re-sent across the switch
            assert psb.status == Status.SUCCESS, psb
            answered.add(number)
            if len(answered) >= PUTS_BEFORE:
                started.set()

    async def consume(client: Any) -> None:
        while True:
            try:
                message = await client.get(timeout=WAIT_S)
            except MrsError:
                continue  # lost with the old active: the message comes again
            number = int(message.body)
            if message.delivery_status == Status.POSSDUPL and number not in seen:
                unseen_marked.append(number)
            seen[number] = seen.get(number, 0) + 1
            with contextlib.suppress(MrsError):  # not confirmed: it comes again
                await client.confirm(message.seq)

    async with (
        connect(addresses, "SENDER") as producer,
        connect(addresses, "ANYORDER") as consumer,
        trio.open_nursery() as nursery,
    ):
        await wait_caught_up(producer, {"a", "b", "c"})
        for _ in range(CONSUMERS):
            nursery.start_soon(consume, consumer)
        async with trio.open_nursery() as producers:
            for index in range(PRODUCERS):
                producers.start_soon(produce, producer, index)
            await started.wait()
            switched = await trio.to_thread.run_sync(
                run_mrs, "failover", "--config", str(config), "NYC"
            )
            producers.cancel_scope.cancel()  # a put cut short was not answered
        with trio.fail_after(WAIT_S):
            while not answered <= set(seen):
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert switched.returncode == 0, switched.stderr
    return answered, seen, unseen_marked, switched.stdout


def test_a_planned_switch_marks_possdupl_only_what_was_handed_out(etcd, tmp_path) -> None:
    """Eight producers put and eight consumers get and confirm while `mrs failover`
    switches the active over, etcd 0.1 s away (a proxy's latency: the hand-over's
    last steps, written in etcd after the active stopped answering, take that long).
    Before, a request that reached the active in those steps was still committed, and
    the chosen replica took it: a put stored to a waiting get marked that message
    delivered, and the new active delivered it POSSDUPL though no consumer had had
    it (docs/replication.md promises none). Now nothing is committed once answers
    stop: every answered put arrives, and the only ones marked are ones a consumer
    had."""
    port = free_port()
    proxy = FaultProxy(port, int(etcd.endpoint.rsplit(":", 1)[1]), latency_s=ETCD_LATENCY_S)
    instances = _group(f"http://127.0.0.1:{port}", tmp_path)
    config = instances["a"].config_path

    async def scenario() -> tuple[set[int], dict[int, int], list[int], str]:
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.run)
            for process in instances.values():
                process.start()
            await trio.to_thread.run_sync(wait_active, instances, WAIT_S)
            outcome = await _consume_across_a_switch(config)
            nursery.cancel_scope.cancel()
        return outcome

    try:
        answered, seen, unseen_marked, switched = trio.run(scenario)
        assert " -> " in switched, switched
        assert len(answered) > PUTS_BEFORE
        assert answered <= set(seen)  # nothing answered lost
        assert unseen_marked == []
    finally:
        for process in instances.values():
            process.terminate()


def test_failover_edges_answer_in_one_line_and_leave_the_group_serving(etcd, tmp_path) -> None:
    """`mrs failover --to` the active, an unknown name, a replica dropped from the
    in-sync set, and with etcd unreachable: one line each (the dropped replica's used
    to print a Python tuple), nothing switched, and every put answered before is
    still delivered by the same active."""
    instances = _group(etcd.endpoint, tmp_path)
    config = instances["a"].config_path
    try:
        for process in instances.values():
            process.start()
        first = wait_active(instances, WAIT_S)
        dropped = next(name for name in "abc" if name != first)
        addresses = instance_addresses(config, "NYC")

        async def drop_one() -> None:
            async with connect(addresses, "SENDER") as client:
                await wait_caught_up(client, {"a", "b", "c"})
                await trio.to_thread.run_sync(instances[dropped].kill)
                psb = await client.put(b"kept", "ORDERS")  # a record it lacks
                assert psb.status == Status.SUCCESS, psb
                await wait_dropped(client, dropped)

        trio.run(drop_one)
        dead_etcd = config.with_name("dead-etcd.toml")
        unreachable = f"http://127.0.0.1:{free_port()}"
        dead_etcd.write_text(config.read_text().replace(etcd.endpoint, unreachable))
        cases = [
            (config, first, 0, f"{first} is already active"),
            (config, "zz", 2, "has no instance 'zz'"),
            (config, dropped, 1, f"{dropped} is not in sync (in sync: "),
            (dead_etcd, first, 1, "does not answer (cannot connect); no failover was asked for"),
        ]
        for path, to, code, text in cases:
            done = run_mrs("failover", "--config", str(path), "NYC", "--to", to)
            line = (done.stdout + done.stderr).strip()
            assert (done.returncode, len(line.splitlines())) == (code, 1), line
            assert text in line and "Traceback" not in line, line
        refused = run_mrs("failover", "--config", str(config), "NYC", "--to", dropped)
        assert "('" not in refused.stderr, refused.stderr  # no Python tuple

        async def still_served() -> None:
            async with connect(addresses, "ORDERS") as client:
                assert (await client.status())["replication"]["instance"] == first
                message = await client.get(timeout=WAIT_S)
                assert (message.body, message.delivery_status) == (b"kept", Status.CONFIRMREQ)
                await client.confirm(message.seq)

        trio.run(still_served)
    finally:
        for process in instances.values():
            process.terminate()
