"""A chapter of `mrs demo`, before the audit: the receiving group loses its machine.

LDN runs as a replicated group (docs/replication.md): three `mrs serve --instance`
processes, leadership in a local etcd. A sender client puts orders (WF_DQF) from a
few tasks to LDN's ORDERS queue while a receiver gets and confirms them; mid-stream the
active instance is SIGKILLed and its data directory deleted, as if its disk died with
it. A replica takes over within a few seconds; the clients follow it by themselves
(the sender re-sends the puts the kill left unanswered, under their idempotency keys:
clients.resend); every acknowledged order is delivered, in order per task, none twice
unmarked. Then the wiped instance is started again with an empty directory: it
rejoins with a full copy from the new active and counts as in sync.

Without etcd on the machine the chapter is skipped with one line saying why; when the
group stores no orders (a disk under the journal reserve) it stops with one line
saying what the group answered.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio
from rich.console import Console

from clients import Client, DeliveryMode, MrsError, NoMoreMessages, Status, connect
from mrs.exit_status import CommandError
from mrs.offline.stop_signals import run_stoppable
from mrs.tools.server_log import first_warning
from sim.delivery_check import check_delivered
from sim.etcd import EtcdServer, InstanceProcess, wait_active, write_replicated_config

T = TypeVar("T")
CHAPTER = 7
"""Its number in the demo: after the story's six, before the audit (mrs.audit.demo)."""
TASKS = 4
ORDERS_MAX = 600
"""Orders the chapter sends at most (it takes ~20 s on a loaded 2-core machine)."""
LEASE_TTL_S = 2
FAILOVER_S_MAX = 20.0
IN_SYNC_S_MAX = 60.0
NAMES = ("a", "b", "c")


class ChapterStalled(Exception):
    """The replicated group stopped storing orders before the chapter could go on."""

    def __init__(self, acknowledged: int, refused: dict[str, int]) -> None:
        super().__init__(acknowledged, refused)
        self.acknowledged = acknowledged
        self.refused = refused


@dataclass
class _Tally:
    acknowledged: set[str] = field(default_factory=set)
    """Orders whose put answered STORED: in LDN's DQF, replicated."""
    deliveries: list[tuple[str, Status | int, int]] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)
    """Orders answered but not stored, by delivery status (a put's status is
    SUCCESS also when its PSB says MRS_RES_EXH: counted as acknowledged, a disk
    under the journal reserve made the chapter print FAILED, lost 600)."""
    senders_left: int = TASKS
    resent: int = 0
    progress: trio.Event = field(default_factory=trio.Event)

    async def wait_acknowledged(self, count: int) -> None:
        """Until `count` orders are stored; ChapterStalled when every sender is done
        short of that (it waited forever for orders the group refused)."""
        while len(self.acknowledged) < count:
            if not self.senders_left:
                raise ChapterStalled(len(self.acknowledged), dict(self.refused))
            self.progress = trio.Event()
            await self.progress.wait()


def run_failover_chapter(console: Console, directory: Path, messages: int) -> int:
    """The chapter in `directory` (etcd, the three instances' data): 0 when every
    acknowledged order was delivered in order and the wiped instance is in sync again,
    1 when a guarantee broke; 0 with one line when etcd is not installed."""
    if shutil.which("etcd") is None:
        console.print(
            f"[yellow]{CHAPTER}. Failover chapter skipped[/]: etcd is not installed "
            "(bash .ci/system-packages installs etcd-server)"
        )
        return 0
    console.rule("A replicated group loses its active instance and its disk")
    directory.mkdir(parents=True, exist_ok=True)
    etcd = EtcdServer(directory)
    instances: dict[str, InstanceProcess] = {}
    try:  # etcd's start too: Ctrl-C while it comes up must not leave it running
        etcd.start()
        config = write_replicated_config(directory, etcd.endpoint, _QUEUES, ttl_s=LEASE_TTL_S)
        text = config.read_text().replace('id = 1\nname = "NYC"', 'id = 2\nname = "LDN"')
        config.write_text(text)
        instances = {name: InstanceProcess(config, name, group_id=2) for name in NAMES}
        for process in instances.values():
            process.start()
        return run_stoppable(_chapter, console, instances, min(messages, ORDERS_MAX))
    except* ChapterStalled as stalled:
        raise CommandError(_stalled_line(stalled, directory, min(messages, ORDERS_MAX))) from None
    finally:
        for process in instances.values():
            process.kill()
        etcd.stop()


async def _chapter(console: Console, instances: dict[str, InstanceProcess], orders: int) -> int:
    first = await _in_thread(wait_active, instances, 60)
    addresses = _addresses(instances)
    console.print(
        f"[bold]{CHAPTER}.[/] LDN as three instances (etcd leadership, lease {LEASE_TTL_S} s): "
        f"{first} is active, the other two replicate every commit."
    )
    tally = _Tally()
    async with (
        connect(addresses, "SENDER", program="demo sender") as sender,
        connect(addresses, "ORDERS", program="demo receiver") as receiver,
    ):
        await _wait_in_sync(sender, set(NAMES))
        console.print(
            f"   a client sends {orders} orders (WF_DQF) from {TASKS} tasks; another gets "
            "and confirms them."
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_receive, receiver, tally)
            async with trio.open_nursery() as senders:
                for task in range(TASKS):
                    senders.start_soon(_send, sender, task, _task_orders(orders, task), tally)
                await tally.wait_acknowledged(orders // 3)
                second, failover_s = await _kill_and_wipe(console, instances, first, tally)
                console.print(
                    f"   [bold green]{second} took over[/] {failover_s:.1f} s after the kill; "
                    "both clients reconnected to it by themselves."
                )
            await _drained(receiver, tally)
            nursery.cancel_scope.cancel()
        tally.resent = sender.resent_puts
        code = _verdict(console, tally, orders)
        rejoined_s = await _rejoin(instances[first], sender)
    full_copy = (
        "took a full copy" in (instances[first].config_path.parent / f"{first}.log").read_text()
    )
    console.print(
        f"   {first} restarted on an empty directory: rejoined"
        f"{' with a full copy' if full_copy else ''}, in sync again in {rejoined_s:.1f} s."
    )
    return code


async def _in_thread(wait: Callable[..., T], *args: Any) -> T:
    """A blocking wait that only reads (an instance's lines), given up on Ctrl-C: the
    demo waited for the instance to come up before it stopped (2 to 4 s here, up to
    the wait's 60 s on a loaded machine), then printed "took over" after the Ctrl-C.
    The thread left behind ends with the wait's deadline; the processes it reads from
    are killed by `run_failover_chapter` (it starts none)."""
    return await trio.to_thread.run_sync(wait, *args, abandon_on_cancel=True)


def _addresses(instances: dict[str, InstanceProcess]) -> list[str]:
    from clients import instance_addresses

    return instance_addresses(next(iter(instances.values())).config_path, "LDN")


def _stalled_line(failed: BaseExceptionGroup, directory: Path, orders: int) -> str:
    """One line: what the group answered instead of STORED, and the first warning
    of an instance's log (read now: the scratch directory may be removed next)."""
    stalled = _first_stalled(failed)
    answers = ", ".join(f"{count:,} {name}" for name, count in sorted(stalled.refused.items()))
    line = (
        f"the demo stopped in chapter {CHAPTER}: LDN acknowledged {stalled.acknowledged:,} "
        f"of {orders:,} orders as stored and refused the rest ({answers or 'no answer'})"
    )
    warnings = (first_warning(directory / f"{name}.log") for name in NAMES)
    warning = next((found for found in warnings if found), "")
    return line + (f"; its log: {warning}" if warning else "")


def _first_stalled(error: BaseException) -> ChapterStalled:
    if isinstance(error, BaseExceptionGroup):
        return _first_stalled(error.exceptions[0])
    assert isinstance(error, ChapterStalled)
    return error


async def _send(client: Client, task: int, count: int, tally: _Tally) -> None:
    """Put `count` orders in turn; each `put` returns its real answer across the
    failover (the client re-sends one the kill left unanswered). An order counts as
    acknowledged when its PSB says STORED; any other delivery status is a refusal."""
    try:
        for number in range(count):
            order_id = f"t{task}:{number}"
            psb = await client.put(
                b"order " + order_id.encode(),
                "ORDERS",
                delivery=DeliveryMode.WF_DQF,
                correlation_id=order_id.encode(),
            )
            if psb.status == Status.SUCCESS and psb.delivery_status == Status.STORED:
                tally.acknowledged.add(order_id)
            else:
                name = getattr(psb.delivery_status, "name", str(psb.delivery_status))
                tally.refused[name] = tally.refused.get(name, 0) + 1
            tally.progress.set()
    finally:
        tally.senders_left -= 1
        tally.progress.set()


async def _receive(client: Client, tally: _Tally) -> None:
    """Get and confirm until cancelled; across the failover a get or confirm that
    lost its connection waits for the next one (an unconfirmed message comes again,
    marked POSSDUPL)."""
    while True:
        try:
            message = await client.get(timeout=1)
        except NoMoreMessages:
            continue
        except MrsError:
            await client.wait_connected()
            continue
        tally.deliveries.append(
            (message.correlation_id.decode(), message.delivery_status, message.seq)
        )
        try:
            await client.confirm(message.seq)
        except MrsError:
            await client.wait_connected()


async def _drained(client: Client, tally: _Tally) -> None:
    """Every acknowledged order delivered (or a few seconds without one)."""
    delivered = {order_id for order_id, _, _ in tally.deliveries}
    quiet_s = time.monotonic()
    while not tally.acknowledged <= delivered and time.monotonic() - quiet_s < 10:
        before = len(delivered)
        await trio.sleep(0.1)
        delivered = {order_id for order_id, _, _ in tally.deliveries}
        if len(delivered) != before:
            quiet_s = time.monotonic()


async def _kill_and_wipe(
    console: Console, instances: dict[str, InstanceProcess], first: str, tally: _Tally
) -> tuple[str, float]:
    """SIGKILL the active, delete its data directory; the name of the instance that
    takes over and how long after the kill it answered."""
    instances[first].kill()
    killed_s = time.monotonic()
    data_dir = instances[first].config_path.parent / first
    shutil.rmtree(data_dir)
    console.print(
        f"   [bold red]SIGKILL[/] {first} with {len(tally.acknowledged)} orders acknowledged, "
        f"and [bold red]its data directory deleted[/] ({data_dir.name}/): its disk is gone."
    )
    others = {name: process for name, process in instances.items() if name != first}
    second = await _in_thread(wait_active, others, FAILOVER_S_MAX)
    return second, time.monotonic() - killed_s


async def _rejoin(process: InstanceProcess, client: Client) -> float:
    """Start the wiped instance again; seconds until the active counts it in sync."""
    started_s = time.monotonic()
    process.start()
    await _in_thread(process.wait_for, "REPLICA")
    await _wait_in_sync(client, set(NAMES))
    return time.monotonic() - started_s


async def _wait_in_sync(client: Client, names: set[str]) -> None:
    with trio.fail_after(IN_SYNC_S_MAX):
        while True:
            status = (await client.status())["replication"]
            replicas = status["replicas"]
            if all(replicas.get(n, {}).get("in_sync") for n in names - {status["instance"]}):
                return
            await trio.sleep(0.1)


def _task_orders(orders: int, task: int) -> int:
    """The orders task number `task` sends: together exactly `orders` (`orders //
    TASKS` each sent none at all for `--messages 3`, and 596 for 599 said)."""
    return orders // TASKS + (1 if task < orders % TASKS else 0)


def _verdict(console: Console, tally: _Tally, orders: int) -> int:
    verdict = check_delivered(tally.acknowledged, tally.deliveries)
    unmarked, violations = len(verdict.unmarked_duplicates), len(verdict.order_violations)
    refused = ", ".join(f"{count} {name}" for name, count in sorted(tally.refused.items()))
    console.print(
        f"   orders acknowledged {len(tally.acknowledged)} of {orders}"
        f"{f' (refused: {refused})' if refused else ''} "
        f"(re-sent by the client after the kill: {tally.resent}); delivered "
        f"{verdict.delivered}; lost {len(verdict.lost)}; redelivered marked POSSDUPL "
        f"{verdict.marked_redeliveries}; unmarked duplicates {unmarked}; order "
        f"violations {violations}"
    )
    if verdict.lost or unmarked or violations or verdict.resent_copies:
        console.print(f"[bold red]FAILED[/]: {verdict.failures() or 'an order stored twice'}")
        return 1
    console.print(
        "[bold green]The active and its disk were lost: every acknowledged order was "
        "delivered, in order.[/]"
    )
    return 0


_QUEUES = """
[[group.queue]]
id = 10
name = "ORDERS"
confirm = "explicit-in-order"
[[group.queue]]
id = 11
name = "SENDER"
"""
