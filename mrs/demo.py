"""`mrs demo`: a group on an embedded config, a SIGKILL mid-stream, and the proof.

The story: a sender puts recoverable orders (WF_DQF) and nonrecoverable ticker
messages (NN_MEM) while a receiver gets and confirms orders. Half-way the server is
killed with SIGKILL. It restarts on the same journals; the sender re-sends what was
never acknowledged (same correlation id, so the receiver can spot a second copy);
the receiver drains. Every order acknowledged as stored arrives; those the server
had already handed out before the crash come back marked POSSDUPL; ticker messages
in memory at the crash are gone, as nonrecoverable messages are.
"""

from __future__ import annotations

import shutil
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import trio
from rich.console import Console
from rich.table import Table

from clients import DeliveryMode, MrsError, NoMoreMessages, Status, Uma, connect
from journals import Journal, JournalStore
from sim.processes import GroupProcess

DEMO_CONFIG = textwrap.dedent("""\
    # The demo's bus: one group, an in-order order queue, a sender, a ticker.
    [[group]]
    id = 1
    name = "NYC"
    listen = "127.0.0.1:0"
    data_dir = "g1"
    pcj_default = true
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
    """)

SENDER_TASKS = 8


@dataclass
class Tally:
    acknowledged: set[bytes] = field(default_factory=set)
    unacknowledged: set[bytes] = field(default_factory=set)
    deliveries: list[tuple[bytes, Status]] = field(default_factory=list)
    ticker_sent: int = 0
    ticker_received: int = 0


async def _send_orders(
    address: str, ids: list[bytes], tally: Tally, kill_at: int, half_way: trio.Event
) -> None:
    """Put every id with SENDER_TASKS puts in flight on one connection."""
    pending = list(reversed(ids))
    try:
        async with connect(address, queue="SENDER", program="demo sender") as client:

            async def worker() -> None:
                while pending:
                    order_id = pending.pop()
                    tally.unacknowledged.add(order_id)
                    psb = await client.put(
                        b"order " + order_id,
                        target="ORDERS",
                        delivery=DeliveryMode.WF_DQF,
                        uma=Uma.DLJ,
                        correlation_id=order_id,
                    )
                    if psb.delivery_status == Status.STORED:
                        tally.unacknowledged.discard(order_id)
                        tally.acknowledged.add(order_id)
                    await client.put(b"tick", target="TICKER", delivery=DeliveryMode.NN_MEM)
                    tally.ticker_sent += 1
                    if len(tally.acknowledged) >= kill_at:
                        half_way.set()

            async with trio.open_nursery() as nursery:
                for _ in range(SENDER_TASKS):
                    nursery.start_soon(worker)
    except (MrsError, BaseExceptionGroup):
        pass  # the server died under us: the unacknowledged ones are re-sent later


async def _receive_orders(address: str, tally: Tally, drain: bool) -> None:
    try:
        async with connect(address, queue="ORDERS", program="demo receiver") as client:
            while True:
                try:
                    message = await client.get(timeout=0 if drain else None)
                except NoMoreMessages:
                    return
                tally.deliveries.append((message.correlation_id, message.delivery_status))
                await client.confirm(message.seq)
    except MrsError:
        pass


async def _drain_ticker(address: str, tally: Tally) -> None:
    async with connect(address, queue="TICKER", program="demo ticker") as client:
        while True:
            try:
                await client.get(timeout=0)
            except NoMoreMessages:
                return
            tally.ticker_received += 1


async def _story(console: Console, server: GroupProcess, messages: int) -> Tally:
    tally = Tally()
    ids = [b"%06d" % index for index in range(messages)]
    half_way = trio.Event()
    console.print(
        f"[bold]1.[/] Sending {messages} recoverable orders (WF_DQF, UMA DLJ) and "
        f"as many nonrecoverable ticks (NN_MEM), {SENDER_TASKS} puts in flight."
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_send_orders, server.address, ids, tally, messages // 2, half_way)
        nursery.start_soon(_receive_orders, server.address, tally, False)
        await half_way.wait()
        server.kill()
        console.print(
            f"[bold red]2. SIGKILL[/] pid {server.process.pid} with "
            f"{len(tally.acknowledged)} orders acknowledged as stored, "
            f"{len(tally.deliveries)} delivered so far."
        )
    address = await trio.to_thread.run_sync(server.start)
    console.print(
        f"[bold]3.[/] Restarted on the same journals: pid {server.process.pid} at {address}."
    )
    in_flight = len(tally.unacknowledged)
    resend = sorted(set(ids) - tally.acknowledged)
    console.print(
        f"[bold]4.[/] Sending the {len(resend)} orders without an acknowledgement: "
        f"{in_flight} were in flight at the crash (they may be stored already; "
        "same correlation id, so a second copy can be spotted), the rest never sent."
    )
    tally.unacknowledged.clear()
    await _send_orders(address, resend, tally, messages + 1, trio.Event())
    await _receive_orders(address, tally, True)
    await _drain_ticker(address, tally)
    return tally


def _report(console: Console, tally: Tally, data_dir: Path) -> int:
    delivered = {order_id for order_id, _ in tally.deliveries}
    possdupl = sum(1 for _, status in tally.deliveries if status == Status.POSSDUPL)
    copies = len(tally.deliveries) - len(delivered)
    lost = tally.acknowledged - delivered
    store = JournalStore(data_dir / "journals", readonly=True)
    try:
        pcj, dqf = store.count(Journal.PCJ), store.count(Journal.DQF)
    finally:
        store.close()
    table = Table(title="What the crash did")
    table.add_column("measure")
    table.add_column("count", justify="right")
    table.add_column("meaning")
    table.add_row(
        "orders acknowledged as stored", str(len(tally.acknowledged)), "WF_DQF put returned STORED"
    )
    table.add_row("orders delivered (distinct)", str(len(delivered)), "got by the receiver")
    table.add_row("[bold]acknowledged but lost[/]", f"[bold]{len(lost)}[/]", "must be 0")
    table.add_row(
        "redelivered, marked POSSDUPL",
        str(possdupl),
        "handed out before the crash, not yet confirmed",
    )
    table.add_row(
        "second copies spotted by correlation id",
        str(copies),
        "re-sent after a lost acknowledgement",
    )
    table.add_row("PCJ records (confirmed, journaled)", str(pcj), "the audit trail")
    table.add_row("DQF records left", str(dqf), "all confirmed: 0")
    table.add_row(
        "ticks sent / received (NN_MEM)",
        f"{tally.ticker_sent} / {tally.ticker_received}",
        "memory only: those queued at the crash are gone",
    )
    console.print(table)
    if lost or dqf:
        console.print("[bold red]FAILED:[/] acknowledged messages were lost")
        return 1
    console.print("[bold green]Every message acknowledged as stored was delivered.[/]")
    return 0


def run_demo(messages: int = 2000, scratch: Path | None = None) -> int:
    console = Console()
    directory = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix="mrs-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    config_path = directory / "bus.toml"
    config_path.write_text(DEMO_CONFIG)
    server = GroupProcess(config_path, 1)
    console.rule("MRS demo: a recoverable stream through a SIGKILL")
    console.print(f"Scratch directory {directory}; config {config_path.name}")
    try:
        address = server.start()
        console.print(f"Group 1 (NYC) listening on {address}, pid {server.process.pid}")
        tally = trio.run(_story, console, server, messages)
        server.terminate()
        return _report(console, tally, directory / "g1")
    finally:
        server.kill()
        if scratch is None:
            shutil.rmtree(directory, ignore_errors=True)
