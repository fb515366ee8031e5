"""A replicated group as an application sees it across a failover (real etcd, three
`mrs serve --instance` processes, the active SIGKILLed or switched over with `mrs
failover`), docs/replication.md "What the client does on a failover".

What it holds the client to: a consumer's messages got and not confirmed come again
POSSDUPL and nothing else comes twice; a confirm made across the failover is answered
with a clear status, a selective get waiting at the kill raises at once; an AK_CONF
put's MRS_ACK comes once, at the confirm on the new active; a WF_CONF put is answered
when its receiver confirms after the failover; a put re-sent under its key is stored
once. And the defect found here: a `status`, `pending` or `locate` in flight when the
active died raised ConnectionLost (LINK_DOWN), while one made a moment later waited
for the new active; such a query changes nothing and is now asked again there.
"""

from __future__ import annotations

import collections
import functools
import os
import signal
import threading
import time

import trio

from clients import (
    BadSequence,
    ConnectionLost,
    MrsError,
    connect,
    connect_sync,
    instance_addresses,
)
from mrs.core.selection import by_correlation_id
from mrs.model import Address, DeliveryMode, Psb, Status
from sim.etcd import wait_active
from tests.cli_helpers import run_mrs
from tests.etcd_helpers import InstanceProcess, etcd
from tests.process.test_replication import FAILOVER_S_MAX, instances, wait_caught_up

__all__ = ["etcd", "instances"]  # the fixtures, used by name

ANSWER_S_MAX = 20.0
"""Every call here is answered (or raises) within this: a hang fails the test."""
ALL = {"a", "b", "c"}


async def _drain(client, timeout_s: float = 5.0) -> list[tuple[bytes, int]]:
    """Every message left on the client's queue, confirmed: (body, delivery status)."""
    taken: list[tuple[bytes, int]] = []
    while True:
        try:
            message = await client.get(timeout=timeout_s)
        except MrsError as none:
            assert none.status in (Status.TIMEOUT, Status.NOMOREMSG), none
            return taken
        taken.append((message.body, message.delivery_status))
        if message.needs_confirm:
            await client.confirm(message.seq)


async def _outcome(call, *args, **kwargs) -> object:
    """What a call answered, or the MrsError it raised, within ANSWER_S_MAX."""
    with trio.fail_after(ANSWER_S_MAX):
        try:
            return await call(*args, **kwargs)
        except MrsError as error:
            return error


async def _mrs_acks(client) -> list[tuple[int, int]]:
    """(seq, delivery status) of every MRS_ACK waiting on the client's queue."""
    acks: list[tuple[int, int]] = []
    while True:
        try:
            ack = await client.get(timeout=3)
        except MrsError:
            return acks
        assert ack.is_mrs_ack, ack
        acks.append((ack.ack_psb().seq, ack.ack_psb().delivery_status))


def _written(client) -> int:
    """How many of the client's requests await their answer with every byte of them
    written to its connection (0 while bytes wait to be written). Read from another
    thread for a blocking client's: a count only, taken under the GIL."""
    requests = client._requests
    link = requests.link
    if link is None or link.unsent_bytes:
        return 0
    return len(requests.pending.keys() - link.unsent)


def test_a_consumer_and_its_senders_across_a_kill_of_the_active(instances) -> None:
    """Four messages got in one get_many, the first confirmed; an AK_CONF put whose
    MRS_ACK waits for the confirm; a WF_CONF put waiting for its receiver; a selective
    get waiting; then SIGKILL of the active. The selective get raises ConnectionLost
    at once (docs: not re-sent); a confirm_many made during the failover is answered
    BADSEQ naming the redelivery; the three unconfirmed messages come again POSSDUPL,
    the confirmed one never; the WF_CONF put is answered SUCCESS when the message is
    confirmed on the new active, and the AK_CONF put's MRS_ACK comes then, once; a
    put re-sent under its key is answered with the first copy's seq and stored once."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def scenario() -> dict[str, object]:
        seen: dict[str, object] = {}
        async with (
            connect(addresses, "SENDER") as producer,
            connect(addresses, "ANYORDER") as consumer,
        ):
            await wait_caught_up(producer, ALL)
            for i in range(4):
                await producer.put(b"c%d" % i, "ANYORDER", correlation_id=b"c%d" % i)
            got = await consumer.get_many(4, timeout=5)
            assert [m.delivery_status for m in got] == [Status.CONFIRMREQ] * 4
            await consumer.confirm(got[0].seq)
            akconf = await producer.put(b"akconf", "ANYORDER", delivery=DeliveryMode.AK_CONF)
            seen["akconf seq"] = akconf.seq
            keyed = {"idempotency_key": "order-26"}
            seen["keyed"] = await producer.put(b"keyed", "ANYORDER", headers=keyed)

            async def call(name: str, function, *args, **kwargs) -> None:
                started_s = time.monotonic()
                seen[name] = await _outcome(function, *args, **kwargs)
                seen[f"{name} s"] = time.monotonic() - started_s

            (waiting,) = await producer.pending(["ANYORDER"])
            async with trio.open_nursery() as nursery:
                wf_conf = functools.partial(producer.put, delivery=DeliveryMode.WF_CONF, timeout=60)
                nursery.start_soon(call, "wfconf", wf_conf, b"wfconf", "ANYORDER")
                nursery.start_soon(call, "selective", consumer.get, 30, by_correlation_id(b"no"))
                await wait_caught_up(producer, ALL)
                with trio.fail_after(ANSWER_S_MAX):  # the WF_CONF message is stored
                    while (await producer.pending(["ANYORDER"]))[0] == waiting:
                        await trio.sleep(0.05)
                instances[first].kill()
                with trio.fail_after(10):
                    while consumer.connected:
                        await trio.sleep(0.01)
                seen["confirm_many"] = await _outcome(consumer.confirm_many, [got[1].seq])
                seen["again"] = await _outcome(producer.put, b"keyed", "ANYORDER", headers=keyed)
                seen["drained"] = await _drain(consumer)
            seen["acks"] = await _mrs_acks(producer)
        return seen

    seen = trio.run(scenario)
    assert isinstance(seen["selective"], ConnectionLost), seen["selective"]
    assert seen["selective s"] < FAILOVER_S_MAX  # type: ignore[operator]
    (refused,) = seen["confirm_many"]  # type: ignore[misc]
    assert isinstance(refused, BadSequence) and "POSSDUPL" in refused.message, refused
    drained = seen["drained"]
    assert collections.Counter(body for body, _ in drained) == collections.Counter(  # type: ignore[attr-defined]
        [b"c1", b"c2", b"c3", b"akconf", b"wfconf", b"keyed"]
    ), drained
    marks = dict(drained)  # type: ignore[arg-type]
    assert [marks[b] for b in (b"c1", b"c2", b"c3")] == [Status.POSSDUPL] * 3, drained
    assert marks[b"akconf"] == marks[b"keyed"] == Status.CONFIRMREQ, drained
    wfconf = seen["wfconf"]
    assert isinstance(wfconf, Psb) and wfconf.status == Status.SUCCESS, wfconf
    assert wfconf.delivery_status == Status.SUCCESS, wfconf
    assert seen["acks"] == [(seen["akconf seq"], Status.SUCCESS)], seen["acks"]
    again = seen["again"]
    assert isinstance(again, Psb) and again.seq == seen["keyed"].seq, again  # type: ignore[attr-defined]


def test_queries_in_flight_when_the_active_dies_are_asked_again_on_the_new_one(
    instances: dict[str, InstanceProcess],
) -> None:
    """The active is stopped (SIGSTOP) so that a `status`, a `pending` and a `locate`
    wait for its answer on their connection, in the async client and the blocking one,
    then SIGKILLed: each is asked again on the new active and answered there within
    its timeout. Before, each raised ConnectionLost (LINK_DOWN, "server closed the
    connection") while the same call made a moment later waited for the new active."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")
    blocking = connect_sync(addresses, "ORDERS")
    answers: dict[str, object] = {}

    def blocking_pending() -> None:
        try:
            answers["sync pending"] = blocking.pending(["SENDER"], timeout=ANSWER_S_MAX)
        except MrsError as error:
            answers["sync pending"] = error

    async def scenario() -> None:
        async with connect(addresses, "ANYORDER", heartbeat_s=60) as client:
            await wait_caught_up(client, ALL)
            await client.put(b"waiting", "SENDER")
            os.kill(instances[first].process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
            thread = threading.Thread(target=blocking_pending)
            async with trio.open_nursery() as nursery:

                async def call(name: str, function, *args) -> None:
                    answers[name] = await _outcome(function, *args)

                within = {"timeout": ANSWER_S_MAX}
                nursery.start_soon(call, "status", functools.partial(client.status, **within))
                pending = functools.partial(client.pending, ["SENDER"], **within)
                nursery.start_soon(call, "pending", pending)
                locate = functools.partial(client.locate, "ANYORDER", **within)
                nursery.start_soon(call, "locate", locate)
                thread.start()
                with trio.fail_after(ANSWER_S_MAX):  # sent; a stopped process answers none
                    while _written(client) < 3 or _written(blocking._client) < 1:
                        await trio.sleep(0.01)
                instances[first].kill()
            await trio.to_thread.run_sync(thread.join, ANSWER_S_MAX)

    try:
        trio.run(scenario)
    finally:
        blocking.close()
    assert isinstance(answers["status"], dict), answers  # before: ConnectionLost
    assert answers["status"]["replication"]["instance"] != first, answers
    assert answers["pending"] == [1] and answers["sync pending"] == [1], answers
    assert answers["locate"] == Address(1, 11), answers


def test_a_planned_switch_over_under_a_blocking_consumer_and_an_ak_sender(instances) -> None:
    """`mrs failover` while a blocking client (connect_sync) puts, gets and confirms in
    a loop and an async client puts AK_DQF: the blocking client's calls go on on the
    new active, each message it put is got, and only a message it held at the switch
    comes again (POSSDUPL); the consumer holding messages gets them again POSSDUPL;
    no MRS_ACK comes twice."""
    first = wait_active(instances, 30)
    config = instances["a"].config_path
    addresses = instance_addresses(config, "NYC")
    target = "b" if first != "b" else "c"
    blocking = connect_sync(addresses, "ORDERS")
    stop = threading.Event()
    log: list[tuple[bytes, int]] = []
    errors: list[MrsError] = []

    def loop() -> None:
        for i in range(1000):
            if stop.is_set() and i % 10 == 0:
                return
            try:
                blocking.put(b"s%d" % i, "ORDERS")
                message = blocking.get(timeout=ANSWER_S_MAX)
                log.append((message.body, message.delivery_status))
                message.confirm(timeout=ANSWER_S_MAX)
            except MrsError as error:  # a call in flight at the switch: ConnectionLost
                errors.append(error)

    async def scenario() -> tuple[list, list, list]:
        async with (
            connect(addresses, "SENDER") as producer,
            connect(addresses, "ANYORDER") as consumer,
        ):
            await wait_caught_up(producer, ALL)
            for i in range(3):
                await producer.put(b"h%d" % i, "ANYORDER")
            held = await consumer.get_many(3, timeout=5)
            assert len(held) == 3
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, loop)
                for i in range(40):
                    await _outcome(
                        producer.put, b"ak%d" % i, "SENDER2", delivery=DeliveryMode.AK_DQF
                    )
                    if i == 20:
                        switched = await trio.to_thread.run_sync(
                            run_mrs, "failover", "--config", str(config), "NYC", "--to", target
                        )
                        assert switched.returncode == 0, switched.stderr
                        after = len(log)
                with trio.fail_after(ANSWER_S_MAX):  # the blocking client goes on
                    while len(log) < after + 10:
                        await trio.sleep(0.05)
                stop.set()
            drained = await _drain(consumer)
            acks = await _mrs_acks(producer)
            return drained, acks, [held_one.body for held_one in held]

    try:
        drained, acks, held = trio.run(scenario)
    finally:
        blocking.close()
    assert sorted(drained) == sorted((body, Status.POSSDUPL) for body in held), drained
    assert all(isinstance(error, ConnectionLost) for error in errors), errors
    assert len(errors) <= 1, errors
    bodies = [body for body, _ in log]
    twice = [body for body, count in collections.Counter(bodies).items() if count > 1]
    assert all((body, Status.POSSDUPL) in log for body in twice), log
    assert len(twice) <= 1, twice
    assert len({seq for seq, _ in acks}) == len(acks), acks
