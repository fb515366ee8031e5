"""A replicated group broken on purpose, one small scenario at a time: a real etcd,
three real `mrs serve --instance` processes, real signals.

What they prove: with two instances of three lost, the active answers no WF put from
its own disk (the put times out, outcome unknown) and `mrs status` says in one note
that answers are held (before, it showed the group UP with a dump of the whole
replication status in its notes, and nothing said why every put timed out); one
instance back, the group answers again and the put that timed out is stored once.
An active paused past its lease and resumed answers nothing of what a client sent it
meanwhile (each put reported outcome unknown, none stored). etcd paused past the
lease: the active steps down, a put across it is answered once etcd is back, and
every answered put is delivered once, in order. The active SIGKILLed while a
`confirm_many` is in flight: no confirmed message comes again, and each message the
batch named comes again at most once, marked POSSDUPL.
"""

from __future__ import annotations

import signal

import trio

from clients import MrsError, connect, instance_addresses, put_once
from mrs.model import DeliveryMode, Status
from mrs.tools.status_render import replication_held
from sim.etcd import EtcdServer, wait_active
from tests.cli_helpers import run_mrs
from tests.etcd_helpers import InstanceProcess, etcd
from tests.process.test_replication import FAILOVER_S_MAX, instances, wait_caught_up

__all__ = ["etcd", "instances"]  # the fixtures, used by name

WAIT_S = 30.0


async def _take_all(addresses: list[str]) -> list[tuple[bytes, int]]:
    """Every message of ORDERS, confirmed: (body, delivery status) in delivery order."""
    taken: list[tuple[bytes, int]] = []
    async with connect(addresses, "ORDERS") as client:
        while True:
            try:
                message = await client.get(timeout=3)
            except MrsError:
                return taken
            taken.append((message.body, message.delivery_status))
            await client.confirm(message.seq)


def test_two_instances_lost_hold_every_answer_and_status_says_so(
    instances: dict[str, InstanceProcess],
) -> None:
    first = wait_active(instances, WAIT_S)
    config = instances[first].config_path
    addresses = instance_addresses(config, "NYC")
    lost = sorted(name for name in instances if name != first)

    async def scenario() -> tuple[str, str]:
        async with connect(addresses, "ORDERS") as client:
            await wait_caught_up(client, {"a", "b", "c"})
            assert (await put_once(client, b"before", "ORDERS", "two-0")).status == Status.SUCCESS
            assert replication_held((await client.status())["replication"]) is None
            for name in lost:
                await trio.to_thread.run_sync(instances[name].kill)
            with trio.fail_after(WAIT_S):  # the links' ends seen
                while replication_held((await client.status())["replication"]) is None:
                    await trio.sleep(0.1)
            try:
                await client.put(b"alone", "ORDERS", delivery=DeliveryMode.WF_DQF, timeout=2)
                raise AssertionError("a put answered from one disk of three")
            except MrsError as error:
                assert error.status == Status.TIMEOUT, error
            held = await trio.to_thread.run_sync(run_mrs, "status", "--config", str(config))
            instances[lost[0]].start()
            with trio.fail_after(WAIT_S):
                while replication_held((await client.status())["replication"]) is not None:
                    await trio.sleep(0.1)
            assert (await put_once(client, b"after", "ORDERS", "two-2")).status == Status.SUCCESS
            back = await trio.to_thread.run_sync(run_mrs, "status", "--config", str(config))
            return held.stdout, back.stdout

    held, back = (" ".join(text.split()) for text in trio.run(scenario))  # unwrapped
    assert "ANSWERS HELD" in held and "ANSWERS HELD" not in back, held + back
    assert "acks needed" not in held + back  # the raw replication dump is gone
    assert [body for body, _ in trio.run(_take_all, addresses)] == [b"before", b"alone", b"after"]


def test_an_active_paused_past_its_lease_answers_nothing_it_was_sent_meanwhile(
    instances: dict[str, InstanceProcess],
) -> None:
    first = wait_active(instances, WAIT_S)
    addresses = instance_addresses(instances[first].config_path, "NYC")
    others = {name: process for name, process in instances.items() if name != first}
    outcomes: list[int] = []

    async def put(client, number: int) -> None:  # type: ignore[no-untyped-def]
        try:
            await client.put(b"p%d" % number, "ORDERS", delivery=DeliveryMode.WF_DQF, timeout=20)
            outcomes.append(Status.SUCCESS)
        except MrsError as error:
            outcomes.append(error.status)

    async def scenario() -> None:
        async with connect(addresses, "ORDERS") as client:
            await wait_caught_up(client, {"a", "b", "c"})
        async with connect([instances[first].address], "ORDERS") as lone:  # no re-sends
            instances[first].pause()
            try:
                async with trio.open_nursery() as nursery:
                    for number in range(5):
                        nursery.start_soon(put, lone, number)
                    await trio.to_thread.run_sync(wait_active, others, FAILOVER_S_MAX)
                    instances[first].resume()
            finally:
                instances[first].resume()

    trio.run(scenario)
    assert outcomes == [Status.LINK_DOWN] * 5  # outcome unknown, each
    instances[first].wait_for("STEPPED DOWN", WAIT_S)
    instances[first].wait_for("REPLICA", WAIT_S)
    assert trio.run(_take_all, addresses) == []


def test_etcd_paused_past_the_lease_loses_and_doubles_nothing(
    etcd: EtcdServer, instances: dict[str, InstanceProcess]
) -> None:
    first = wait_active(instances, WAIT_S)
    addresses = instance_addresses(instances[first].config_path, "NYC")
    answered: list[bytes] = []

    async def putter(client, stop: trio.Event) -> None:  # type: ignore[no-untyped-def]
        number = 0
        while not stop.is_set():
            body = b"e%d" % number
            psb = await client.put(body, "ORDERS", delivery=DeliveryMode.WF_DQF)
            assert psb.status == Status.SUCCESS, psb
            answered.append(body)
            number += 1
            await trio.sleep(0.05)

    async def scenario() -> None:
        assert etcd.process is not None
        async with connect(addresses, "ORDERS") as client:
            await wait_caught_up(client, {"a", "b", "c"})
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(putter, client, stop)
                await trio.sleep(0.5)
                etcd.process.send_signal(signal.SIGSTOP)
                try:
                    line = await trio.to_thread.run_sync(instances[first].wait_for, "STEPPED")
                finally:
                    etcd.process.send_signal(signal.SIGCONT)
                assert line == f"STEPPED DOWN {first}"
                await trio.to_thread.run_sync(wait_active, instances, WAIT_S)
                count = len(answered)
                with trio.fail_after(WAIT_S):
                    while len(answered) < count + 5:
                        await trio.sleep(0.05)
                stop.set()

    trio.run(scenario)
    taken = trio.run(_take_all, addresses)
    assert [body for body, _ in taken] == answered
    assert {status for _, status in taken} == {Status.CONFIRMREQ}


def test_a_kill_during_confirm_many_redelivers_no_confirmed_message(
    instances: dict[str, InstanceProcess],
) -> None:
    first = wait_active(instances, WAIT_S)
    addresses = instance_addresses(instances[first].config_path, "NYC")
    expected = {b"c%03d" % number for number in range(100)}
    seen: dict[bytes, list[tuple[int, bool]]] = {}

    async def take(client, kill: bool) -> bool:  # type: ignore[no-untyped-def]
        try:
            batch = await client.get_many(20, timeout=FAILOVER_S_MAX)
        except MrsError as error:
            return error.status != Status.TIMEOUT
        async with trio.open_nursery() as nursery:
            if kill:
                nursery.start_soon(trio.to_thread.run_sync, instances[first].kill)
            results = await client.confirm_many([message.seq for message in batch])
        for message, result in zip(batch, results, strict=True):
            seen.setdefault(message.body, []).append((message.delivery_status, result is None))
        return True

    async def scenario() -> None:
        async with connect(addresses, "ORDERS") as client:
            await wait_caught_up(client, {"a", "b", "c"})
            for body in sorted(expected):
                await put_once(client, body, "ORDERS", body.decode())
            rounds = 0
            while await take(client, kill=rounds == 2):
                rounds += 1

    trio.run(scenario)
    assert set(seen) == expected
    for body, deliveries in seen.items():
        assert sum(confirmed for _, confirmed in deliveries) <= 1, (body, deliveries)
        for (_, confirmed), (again, _) in zip(deliveries, deliveries[1:], strict=False):
            assert not confirmed and again == Status.POSSDUPL, (body, deliveries)
