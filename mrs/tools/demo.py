"""`mrs demo`: two groups on an embedded config, a cut link, a SIGKILL, and the proof.

The story: in group 1 (NYC) a sender puts recoverable orders for group 2's ORDERS
queue (WF_DQF, UMA SAF) and nonrecoverable ticks (NN_MEM) to its own TICKER queue;
in group 2 (LDN) a receiver gets and confirms orders. The link between the groups
runs through a fault proxy. The demo cuts the link (orders pile up in NYC's SAF),
SIGKILLs NYC with that backlog on disk, restarts it, heals the link, and watches the
backlog drain in order. Every order acknowledged as stored arrives, in order; those
handed out twice are marked POSSDUPL; ticks queued in memory at the crash are gone,
as nonrecoverable messages are. With etcd on the machine a chapter before the audit
(mrs.tools.demo_failover) runs LDN as a replicated group and loses its active
instance with its disk mid-stream.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trio
from rich.console import Console
from rich.table import Table

from clients import DeliveryMode, MrsError, NoMoreMessages, Status, Uma, connect
from journals import Journal, JournalStore
from mrs.exit_status import EXIT_USAGE, CommandError
from mrs.offline.stop_signals import run_stoppable
from mrs.tools.cli_support import made_scratch
from mrs.tools.console import ToolConsole
from mrs.tools.demo_failover import run_failover_chapter
from mrs.tools.server_log import first_warning
from sim.bus import LinkedBus
from sim.checker import check_delivered
from sim.processes import ServerStartError, first_start_failure

DEMO_QUEUES = """
[[group.queue]]
id = 10
name = "ORDERS"
confirm = "explicit-in-order"
[[group.queue]]
id = 11
name = "SENDER"
[[group.queue]]
id = 12
name = "TICKER"
messages_max = 100000
"""
SENDER_TASKS = 8
STORED = {Status.STORED, Status.SAF_FORCED}


@dataclass
class Tally:
    acknowledged: set[bytes] = field(default_factory=set)
    deliveries: list[tuple[bytes, int, Status]] = field(default_factory=list)
    """(correlation id, seq, delivery status) in delivery order."""
    ticks_sent: int = 0
    ticks_received: int = 0
    saf_backlog_max: int = 0
    resent_copies: int = 0
    """Second copies spotted by correlation id (the table's row; the audit checks it)."""
    refused: dict[str, int] = field(default_factory=dict)
    """Orders NYC answered but did not store, by status name."""
    sender_done: bool = False
    """The sender tried every order (or lost its server): no more will be acknowledged."""
    progress: trio.Event = field(default_factory=trio.Event)

    async def wait_acknowledged(self, count: int) -> None:
        """Until `count` orders are acknowledged; DemoStalled if the sender is done
        short of that (a disk short of space refuses every order: this waited forever)."""
        while len(self.acknowledged) < count:
            if self.sender_done:
                raise DemoStalled(len(self.acknowledged), dict(self.refused))
            self.progress = trio.Event()
            await self.progress.wait()


class DemoStalled(Exception):
    """NYC stopped acknowledging orders before the story could go on."""

    def __init__(self, acknowledged: int, refused: dict[str, int]) -> None:
        super().__init__(acknowledged, refused)
        self.acknowledged = acknowledged
        self.refused = refused


async def _send(address: str, ids: list[bytes], tally: Tally) -> None:
    """Put every id, SENDER_TASKS puts in flight on one connection, until all are
    acknowledged or the server dies (the caller then re-sends the rest)."""
    pending = list(reversed(ids))
    try:
        async with connect(address, queue="SENDER", program="demo sender") as client:

            async def worker() -> None:
                while pending:
                    order_id = pending.pop()
                    psb = await client.put(
                        b"order " + order_id,
                        target="2.ORDERS",
                        delivery=DeliveryMode.WF_DQF,
                        uma=Uma.SAF,
                        correlation_id=order_id,
                    )
                    if psb.delivery_status in STORED or psb.uma_status == Status.SAF_SUCCESS:
                        tally.acknowledged.add(order_id)
                        tally.progress.set()
                    else:
                        name = getattr(psb.delivery_status, "name", str(psb.delivery_status))
                        tally.refused[name] = tally.refused.get(name, 0) + 1
                    await client.put(b"tick", target="TICKER", delivery=DeliveryMode.NN_MEM)
                    tally.ticks_sent += 1

            async with trio.open_nursery() as nursery:
                for _ in range(SENDER_TASKS):
                    nursery.start_soon(worker)
    except (MrsError, BaseExceptionGroup):
        pass


async def _send_all(address: str, ids: list[bytes], tally: Tally) -> None:
    """`_send`, then tell whoever waits for acknowledgements that no more will come."""
    try:
        await _send(address, ids, tally)
    finally:
        tally.sender_done = True
        tally.progress.set()


async def _receive(address: str, tally: Tally, drain: bool = False) -> None:
    try:
        async with connect(address, queue="ORDERS", program="demo receiver") as client:
            while True:
                try:
                    message = await client.get(timeout=0 if drain else None)
                except NoMoreMessages:
                    return
                tally.deliveries.append(
                    (message.correlation_id, message.seq, message.delivery_status)
                )
                await client.confirm(message.seq)
    except MrsError:
        pass


async def _status(address: str) -> dict:
    async with connect(address, None, program="demo status") as client:
        return await client.status()


async def _watch_backlog(
    console: Console,
    bus: LinkedBus,
    tally: Tally,
    *,
    until_at_least: int | None = None,
    until_empty: bool = False,
) -> None:
    """Print NYC's SAF backlog for group 2 until it grows past / drains to a point."""
    shown = -1
    while True:
        link = (await _status(bus.address(1)))["links"]["2"]
        backlog = link["saf_backlog"]
        tally.saf_backlog_max = max(tally.saf_backlog_max, backlog)
        if backlog != shown:
            console.print(f"   link {link['state']:4}  SAF backlog for group 2: {backlog:6}")
            shown = backlog
        if until_at_least is not None and backlog >= until_at_least:
            return
        if until_empty and backlog == 0 and link["state"] == "up":
            return
        await trio.sleep(0.1)


async def _story(console: Console, bus: LinkedBus, messages: int) -> Tally:
    tally = Tally()
    ids = [b"%06d" % index for index in range(messages)]
    proxy = bus.proxy(1, 2)
    console.print(
        f"[bold]1.[/] NYC sends {messages} recoverable orders to LDN (WF_DQF, UMA "
        f"SAF) and as many NN_MEM ticks, {SENDER_TASKS} puts in flight; LDN confirms."
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_send_all, bus.address(1), ids, tally)
        nursery.start_soon(_receive, bus.address(2), tally)
        await tally.wait_acknowledged(messages // 4)
        proxy.cut()
        console.print(
            f"[bold yellow]2. Link cut[/] after {len(tally.acknowledged)} orders; "
            "NYC keeps accepting them into its SAF:"
        )
        await _watch_backlog(console, bus, tally, until_at_least=messages // 4)
        await tally.wait_acknowledged(messages // 2)
        bus.processes[1].kill()
        console.print(
            f"[bold red]3. SIGKILL[/] NYC with {len(tally.acknowledged)} orders "
            "acknowledged and the backlog on disk only."
        )
        nursery.cancel_scope.cancel()
    await trio.to_thread.run_sync(bus.processes[1].start)
    backlog = (await _status(bus.address(1)))["links"]["2"]["saf_backlog"]
    # orders stored between the watch's last look and the kill: the table's "largest
    # SAF backlog seen" said 520 under this line's 528
    tally.saf_backlog_max = max(tally.saf_backlog_max, backlog)
    console.print(f"[bold]4.[/] NYC restarted: SAF backlog recovered from its journal: {backlog}.")
    proxy.heal()
    console.print("[bold green]5. Link healed[/]: the backlog drains, oldest first.")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_receive, bus.address(2), tally)
        await _watch_backlog(console, bus, tally, until_empty=True)
        resend = sorted(set(ids) - tally.acknowledged)
        console.print(
            f"[bold]6.[/] NYC sends the {len(resend)} orders never acknowledged "
            "(same correlation id: a second copy would be visible)."
        )
        await _send(bus.address(1), resend, tally)
        nursery.cancel_scope.cancel()
    await _receive(bus.address(2), tally, drain=True)
    async with connect(bus.address(1), queue="TICKER", program="demo ticker") as client:
        while True:
            try:
                await client.get(timeout=0)
            except NoMoreMessages:
                break
            tally.ticks_received += 1
    return tally


def _report(console: Console, tally: Tally, bus: LinkedBus) -> int:
    verdict = check_delivered(
        (order_id.decode() for order_id in tally.acknowledged),
        ((order_id.decode(), status, seq) for order_id, seq, status in tally.deliveries),
        stream_of=lambda order_id: ("NYC", int(order_id)),
    )
    lost, unmarked = verdict.lost, len(verdict.unmarked_duplicates)
    tally.resent_copies = verdict.resent_copies
    order_violations = len(verdict.order_violations)
    store = JournalStore(bus.data_dir(2) / "journals", readonly=True)
    try:
        pcj, dqf = store.count(Journal.PCJ), store.count(Journal.DQF)
    finally:
        store.close()
    table = Table(title="What the cut link and the crash did")
    table.add_column("measure")
    table.add_column("count", justify="right")
    table.add_column("meaning")
    rows = [
        (
            "orders acknowledged as stored",
            len(tally.acknowledged),
            "STORED, SAF_FORCED, or LINK_DOWN + SAF_SUCCESS",
        ),
        ("orders delivered in LDN (distinct)", verdict.delivered, "got by the receiver"),
        ("[bold]acknowledged but lost[/]", len(lost), "must be 0"),
        (
            "redelivered, marked POSSDUPL",
            verdict.marked_redeliveries,
            "handed out before a failure, unconfirmed",
        ),
        ("[bold]redelivered without POSSDUPL[/]", unmarked, "must be 0"),
        (
            "second copies spotted by correlation id",
            verdict.resent_copies,
            "in flight at the crash, stored, then re-sent",
        ),
        ("[bold]order violations[/]", order_violations, "must be 0 (in-order queue)"),
        ("largest SAF backlog seen", tally.saf_backlog_max, "orders held in NYC while cut"),
        ("PCJ records in LDN", pcj, "confirmed and journaled (pcj_default)"),
        ("DQF records left in LDN", dqf, "all confirmed: 0"),
        (
            "ticks sent / received (NN_MEM)",
            f"{tally.ticks_sent} / {tally.ticks_received}",
            "memory only: those queued at the crash are gone",
        ),
    ]
    for name, count, meaning in rows:
        table.add_row(name, str(count), meaning)
    console.print(table)
    if lost or unmarked or order_violations or dqf:
        console.print("[bold red]FAILED[/]: a guarantee was broken")
        return 1
    console.print("[bold green]Every order acknowledged as stored was delivered, in order.[/]")
    return 0


async def _run(console: Console, bus: LinkedBus, messages: int) -> tuple[int, Tally]:
    async with trio.open_nursery() as nursery:
        await bus.start_proxies(nursery)
        await trio.to_thread.run_sync(bus.start)
        try:
            for group_id in (1, 2):
                name = bus.names[group_id]
                console.print(
                    f"Group {group_id} ({name}) listening on "
                    f"{bus.address(group_id)}, pid {bus.processes[group_id].process.pid}"
                )
            while (await _status(bus.address(1)))["links"]["2"]["state"] != "up":
                await trio.sleep(0.05)
            tally = await _story(console, bus, messages)
            return _report(console, tally, bus), tally
        finally:
            bus.stop()
            nursery.cancel_scope.cancel()


def _audit(console: Console, bus: LinkedBus, out_dir: Path | None, tally: Tally) -> int:
    from mrs.audit.demo import run_demo_audit

    pcj = 0
    for group_id in (1, 2):
        store = JournalStore(bus.data_dir(group_id) / "journals", readonly=True)
        try:
            pcj += store.count(Journal.PCJ)
        finally:
            store.close()
    return run_demo_audit(
        console, bus.config_path, out_dir, pcj, tally.ticks_sent, tally.resent_copies
    )


def _check_scratch(scratch: Path) -> None:
    """`--scratch` must be a new or empty directory: the story counts what the
    journals hold, so a second run there counted the first one's orders with its own
    (and a first run cut short would leave messages that read as duplicates). Made
    here (`made_scratch`), so a path that cannot be one is a usage line."""
    if scratch.is_dir() and any(scratch.iterdir()):
        raise CommandError(
            f"--scratch {scratch} is not empty: the demo starts from empty journals; "
            "give a new or empty directory (or none: a temporary one)",
            EXIT_USAGE,
        )
    made_scratch(scratch)


def run_demo(messages: int = 2000, scratch: Path | None = None) -> int:
    """The story, its table and the audit; 0 when every acknowledged order arrived."""
    if scratch is not None:
        _check_scratch(Path(scratch))
    console = ToolConsole()
    directory = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix="mrs-demo-"))
    try:
        bus = LinkedBus(
            directory,
            queues=DEMO_QUEUES,
            group_extra="pcj_default = true",
            names={1: "NYC", 2: "LDN"},
        )
    except BaseException:
        if scratch is None:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    console.rule("MRS demo: recoverable orders through a cut link and a SIGKILL")
    kept = "" if scratch else " (removed at the end; --scratch DIR keeps it)"
    console.print(f"Scratch directory {directory}{kept}; config {bus.config_path}")
    try:
        try:
            code, tally = run_stoppable(_run, console, bus, messages)
            code = code or run_failover_chapter(console, directory / "failover", messages)
        except* (ServerStartError, DemoStalled) as failed:
            raise CommandError(_failure_line(failed, bus, messages)) from None
        # the report outlives a temporary scratch directory (made when Spark runs)
        return code or _audit(console, bus, directory / "audit" if scratch else None, tally)
    finally:
        for process in bus.processes.values():
            process.kill()
        if scratch is None:
            shutil.rmtree(directory, ignore_errors=True)


def _failure_line(failed: BaseExceptionGroup, bus: LinkedBus, messages: int) -> str:
    """One line for a demo that could not go on: a server that did not start (its
    last words), or NYC no longer acknowledging orders (what it answered, and the
    first warning in its log: read now, the scratch directory may be removed next)."""
    started = first_start_failure(failed)
    if started is not None:
        return f"the demo stopped: {started.last_words()}"
    matched = failed.subgroup(DemoStalled)
    stalled = next(_leaves(matched)) if matched is not None else None
    assert isinstance(stalled, DemoStalled)
    answers = ", ".join(f"{count:,} {name}" for name, count in sorted(stalled.refused.items()))
    line = (
        f"the demo stopped: NYC acknowledged {stalled.acknowledged:,} of {messages:,} orders and "
        + (f"refused the rest ({answers})" if answers else "its sender lost its connection")
    )
    warning = first_warning(bus.directory / "group1.log", ("mrs.links", "mrs.forwarding"))
    return line + (f"; its log: {warning}" if warning else "")


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


