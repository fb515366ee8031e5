"""`mrs jplay` (dmqjplay): resend selected PCJ or DLJ records through a running server.

Why it is built this way — what an operator needs at 3 a.m.:

- **Look before acting.** `--dry-run` plans exactly as a real run does (same
  selection, same ledger) and prints what would be sent, by target and reason.
- **Never twice by accident.** A replay ledger (`mrs.ledger`) in the group's data
  directory records every record's replay generation and outcome. Each replayed
  put carries the idempotency key `replay:<journal>:<group>:<seq>:<gen>`, so a
  re-run after Ctrl-C, SIGKILL or a server outage resends only what was not
  acknowledged, and what was stored but never acknowledged (the answer was lost)
  is answered by the server as a duplicate instead of being stored twice. Only
  `--again` starts a new generation.
- **Intents before sends.** Records are planned in chunks; the chunk's intents
  (record, generation) are made durable before any of its puts leaves, so the
  ledger always knows which key a record may have been sent under.
- **Acknowledged means stored.** Only WF modes are accepted (the tool must know
  each outcome); the default is WF_DQF with UMA DISC: a replay that cannot be
  stored is reported failed and the journal record stays where it is (DLJ would
  make a second dead letter out of a failed redrive).
- **`--remove` (DLJ)** deletes a dead letter only after its replay was
  acknowledged as stored and that fact is in the ledger.
- **Fast when asked, gentle when told.** Many puts in flight on one connection
  (`--window`); `--rate N/s` caps the send rate (`mrs.pacing`).

Exit status: 0 everything selected is replayed (sent now or before), 1 some
failed or were not attempted, 2 bad usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import trio
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from clients import ConnectionLost, MrsError, MrsTimeout, connect
from journals import CorruptRecord, Journal, JournalStore, Record, WriteBatch
from mrs.config import ConfigError
from mrs.dump import status_name
from mrs.group import IDEMPOTENCY_HEADER
from mrs.journal_files import GroupJournals, JournalsNotFound, locate, open_store, scan
from mrs.ledger import FAILED, PENDING, STORED, ReplayLedger
from mrs.model import DeliveryMode, Status, Uma
from mrs.pacing import Pacer, parse_rate
from mrs.selection import (
    RecordFilter,
    SelectionError,
    filter_from_args,
    resolve_address,
)

DEFAULT_SENDER_QUEUE = "REPLAY"
DEFAULT_WINDOW = 64
PLAN_CHUNK = 1024
LEDGER_FLUSH_S = 0.25
PROGRESS_REFRESH_S = 0.1
FAILURES_LISTED = 20
REPLAY_MODES = (DeliveryMode.WF_DQF, DeliveryMode.WF_SAF, DeliveryMode.WF_CONF)


class UsageError(Exception):
    """Bad arguments: exit status 2, nothing read or sent."""


@dataclass(frozen=True)
class Options:
    journal: Journal
    group_id: int
    address: str | None
    sender: str | None
    to: str | None
    delivery: DeliveryMode
    uma: Uma
    timeout_s: float
    rate: float | None
    window: int
    again: bool
    remove: bool
    dry_run: bool
    json: bool


@dataclass(slots=True)
class Item:
    """One record to send under one generation."""

    key: bytes
    record: Record
    gen: int
    target: str


@dataclass
class Tally:
    """Everything the final summary says."""

    selected: int = 0
    sent: int = 0
    skipped: int = 0
    failed: int = 0
    in_doubt: int = 0
    not_attempted: int = 0
    removed: int = 0
    corrupt: int = 0
    statuses: Counter = field(default_factory=Counter)
    by_target: Counter = field(default_factory=Counter)
    by_reason: Counter = field(default_factory=Counter)
    by_pair: Counter = field(default_factory=Counter)
    failures: list[dict] = field(default_factory=list)
    elapsed_s: float = 0.0
    stopped: str = ""

    def fail(self, item: Item, status: str, message: str = "", *, in_doubt: bool) -> None:
        self.failed += 1
        self.in_doubt += in_doubt
        self.statuses[status] += 1
        if len(self.failures) < FAILURES_LISTED:
            self.failures.append(
                {
                    "seq": item.record.seq,
                    "target": item.target,
                    "status": status,
                    "message": message,
                }
            )

    @property
    def ok(self) -> bool:
        return not self.failed and not self.not_attempted and not self.stopped


# ---------------------------------------------------------------------- planning
class Planner:
    """Reads the selected records in chunks (short read transactions), drops what the
    ledger says was already replayed, and makes the intents of each chunk durable
    before handing it out."""

    def __init__(
        self,
        store: JournalStore,
        journal: Journal,
        selection: RecordFilter,
        ledger: ReplayLedger,
        options: Options,
        tally: Tally,
        target_of: Callable[[Record], str],
        on_skip: Callable[[bytes], None],
    ) -> None:
        self.store = store
        self.journal = journal
        self.selection = selection
        self.ledger = ledger
        self.options = options
        self.tally = tally
        self.target_of = target_of
        self.on_skip = on_skip
        self.after_seq: int | None = None
        self.done = False

    def next_chunk(self) -> list[Item]:
        items: list[Item] = []
        while not items and not self.done:
            records = self._read_chunk()
            entries = self.ledger.get_many(
                self.journal, [key_record[1].seq for key_record in records]
            )
            for key, record in records:
                entry = entries.get(record.seq)
                if entry is not None and entry.state == STORED and not self.options.again:
                    self.tally.skipped += 1
                    self.on_skip(key)
                    continue
                gen = entry.gen if entry is not None else 1
                if entry is not None and entry.state == STORED:
                    gen += 1  # --again: a new generation, a new idempotency key
                items.append(Item(key, record, gen, self.target_of(record)))
            if not self.options.dry_run:
                for item in items:
                    self.ledger.stage(
                        self.journal, item.record.seq, PENDING, item.gen, target=item.target
                    )
                self.ledger.flush()
        return items

    def _read_chunk(self) -> list[tuple[bytes, Record]]:
        records: list[tuple[bytes, Record]] = []
        limit = self.selection.limit
        read = 0
        for key, record in scan(
            self.store, self.journal, self.selection, after_seq=self.after_seq, chunk=PLAN_CHUNK
        ):
            read += 1
            self.after_seq = int.from_bytes(key[-8:], "big")
            if isinstance(record, CorruptRecord):
                self.tally.corrupt += 1
                print(f"mrs jplay: {record}; not replayed", file=sys.stderr)
                continue
            if limit is not None and self.tally.selected >= limit:
                self.done = True
                break
            self.tally.selected += 1
            records.append((key, record))
        if read < PLAN_CHUNK:
            self.done = True
        return records

    def count_rest(self) -> int:
        """Selected records not planned yet (after a stop): read only, no intents."""
        rest = 0
        while not self.done:
            before = self.tally.selected
            self._read_chunk()
            rest += self.tally.selected - before
        return rest


# ---------------------------------------------------------------------- sending
def replay_headers(record: Record, journal: Journal, group_id: int, gen: int) -> dict:
    """The original headers plus where the message comes from, so a receiver can tell
    a replay (and which one) from an original, and the idempotency key."""
    original = dict((record.extra or {}).get("headers") or {})
    replay = {
        "journal": journal.value,
        "group": group_id,
        "seq": record.seq,
        "source": f"{record.source_group}.{record.source_queue}",
        "target": f"{record.target_group}.{record.target_queue}",
        "put_time_ns": record.put_time_ns,
        "confirm_value": record.confirm_value,
        "confirm_time_ns": record.confirm_time_ns,
        "generation": gen,
    }
    if journal is Journal.DLJ:
        replay["reason"] = record.reason
        replay["reason_name"] = status_name(record.reason)
    if "replay" in original:
        replay["previous"] = original["replay"]
    original["replay"] = replay
    original[IDEMPOTENCY_HEADER] = f"replay:{journal.value}:{group_id}:{record.seq}:{gen}"
    return original


class Replayer:
    """Sends planned items through one client connection, `window` at a time."""

    def __init__(
        self,
        client,
        planner: Planner,
        ledger: ReplayLedger,
        store: JournalStore,
        options: Options,
        tally: Tally,
    ) -> None:
        self.client = client
        self.planner = planner
        self.ledger = ledger
        self.store = store
        self.options = options
        self.tally = tally
        self.pacer = Pacer(options.rate) if options.rate else None
        self.queue: deque[Item] = deque()
        self.removals: list[bytes] = []
        self.stop = False

    def next_item(self) -> Item | None:
        if self.stop:
            return None
        if not self.queue:
            self.queue.extend(self.planner.next_chunk())
        return self.queue.popleft() if self.queue else None

    async def run(self) -> None:
        async with trio.open_nursery() as workers:
            for _ in range(self.options.window):
                workers.start_soon(self._worker)
        self.flush()

    async def flusher(self) -> None:
        while True:
            await trio.sleep(LEDGER_FLUSH_S)
            self.flush()

    def flush(self) -> None:
        """Outcomes first, then removals: a dead letter is deleted only once the ledger
        durably says its replay was stored."""
        self.ledger.flush()
        if self.removals:
            batch = WriteBatch.empty()
            for key in self.removals:
                batch.delete(Journal.DLJ, key)
            self.store.commit_now(batch)
            self.tally.removed += len(self.removals)
            self.removals.clear()

    async def _worker(self) -> None:
        options = self.options
        while (item := self.next_item()) is not None:
            if self.pacer is not None:
                await self.pacer.wait()
            if self.stop:
                self.tally.not_attempted += 1
                continue
            await self._send(item, options)

    async def _send(self, item: Item, options: Options) -> None:
        record = item.record
        try:
            psb = await self.client.put(
                record.body,
                item.target,
                delivery=options.delivery,
                uma=options.uma,
                msg_class=record.msg_class,
                msg_type=record.msg_type,
                priority=record.priority,
                correlation_id=record.correlation_id,
                timeout=options.timeout_s,
                headers=replay_headers(record, options.journal, options.group_id, item.gen),
            )
        except MrsTimeout as error:
            self.tally.fail(item, "TIMEOUT", error.message, in_doubt=True)
            return
        except ConnectionLost as error:
            self.stop = True
            self.tally.stopped = f"connection lost: {error.message}"
            self.tally.fail(item, "LINK_DOWN", error.message, in_doubt=True)
            return
        except MrsError as error:
            name = status_name(int(error.status))
            self.ledger.stage(
                options.journal,
                record.seq,
                FAILED,
                item.gen,
                status=int(error.status),
                target=item.target,
            )
            self.tally.fail(item, name, error.message, in_doubt=False)
            return
        stored = psb.stored or psb.uma_status == Status.SAF_SUCCESS
        name = status_name(int(psb.delivery_status))
        if stored:
            self.ledger.stage(
                options.journal,
                record.seq,
                STORED,
                item.gen,
                replay_seq=psb.seq,
                status=int(psb.delivery_status),
                target=item.target,
            )
            self.tally.sent += 1
            self.tally.statuses[name] += 1
            if options.remove:
                self.removals.append(item.key)
        else:
            self.ledger.stage(
                options.journal,
                record.seq,
                FAILED,
                item.gen,
                status=int(psb.delivery_status),
                target=item.target,
            )
            uma = status_name(int(psb.uma_status))
            self.tally.fail(item, name, f"UMA {options.uma.name}: {uma}", in_doubt=False)


# ---------------------------------------------------------------------- progress
class _RateColumn(ProgressColumn):
    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-- msg/s" if speed is None else f"{speed:,.0f} msg/s")


def _progress_wanted(options: Options) -> bool:
    return not options.json and not options.dry_run and sys.stderr.isatty()


async def _show_progress(progress: Progress, task_id, tally: Tally) -> None:
    while True:
        progress.update(task_id, completed=tally.sent + tally.failed + tally.skipped)
        await trio.sleep(PROGRESS_REFRESH_S)


def _count_selected(store: JournalStore, journal: Journal, selection: RecordFilter) -> int:
    total = 0
    for _key, record in scan(store, journal, selection):
        if not isinstance(record, CorruptRecord):
            total += 1
            if selection.limit is not None and total >= selection.limit:
                break
    return total


# ---------------------------------------------------------------------- the command
def run_jplay(args: argparse.Namespace) -> int:
    try:
        options, where, selection, target_of = _prepare(args)
    except (UsageError, SelectionError, JournalsNotFound, ValueError) as error:
        print(f"mrs jplay: {error}", file=sys.stderr)
        return 2
    except ConfigError:
        raise
    tally = Tally()
    # One environment, opened once: py-lmdb refuses a second handle in one process,
    # and --remove needs it writable (LMDB lets a second process write safely).
    store = open_store(where, writable=options.remove and not options.dry_run)
    ledger = ReplayLedger(where.data_dir, readonly=options.dry_run)
    try:
        if options.dry_run:
            _dry_run(store, selection, ledger, options, tally, target_of)
            _print_dry_run(options, tally)
            return 0
        return _replay(store, selection, ledger, options, tally, target_of, where)
    finally:
        ledger.close()
        store.close()


def _prepare(args: argparse.Namespace):
    journal = Journal(args.journal)
    where = locate(args)
    bus = where.bus
    selection = filter_from_args(args, journal, bus, where.group_id, time.time_ns())
    try:
        delivery = DeliveryMode[args.delivery.upper()]
    except KeyError:
        raise UsageError(f"--delivery: no mode {args.delivery!r}") from None
    if delivery not in REPLAY_MODES:
        raise UsageError(
            f"--delivery {delivery.name}: jplay needs to know that each replay was stored, "
            f"so it takes a recoverable WF mode ({', '.join(m.name for m in REPLAY_MODES)})"
        )
    try:
        uma = Uma[args.uma.upper()]
    except KeyError:
        raise UsageError(f"--uma: no UMA {args.uma!r} (DISC, DISCL, RTS, DLQ, DLJ, SAF)") from None
    if uma is Uma.SAF and delivery.interest_point == "SAF":
        raise UsageError("--uma SAF is not supported with WF_SAF")
    if args.remove and journal is not Journal.DLJ:
        raise UsageError("--remove applies to the dlj: the pcj is the audit trail and stays")
    if args.window < 1:
        raise UsageError("--window must be at least 1")
    if args.timeout <= 0:
        raise UsageError("--timeout must be more than zero")
    rate = parse_rate(args.rate) if args.rate else None
    to = None
    if args.to:
        group, queue = resolve_address(args.to, bus, where.group_id, "--to")
        to = f"{group}.{queue}"
    sender = None
    address = None
    if not args.dry_run:
        sender = _sender_queue(args, where)
        address = _server_address(args, where)
    options = Options(
        journal=journal,
        group_id=where.group_id,
        address=address,
        sender=sender,
        to=to,
        delivery=delivery,
        uma=uma,
        timeout_s=args.timeout,
        rate=rate,
        window=args.window,
        again=args.again,
        remove=args.remove,
        dry_run=args.dry_run,
        json=args.json,
    )

    def target_of(record: Record) -> str:
        return to or f"{record.target_group}.{record.target_queue}"

    return options, where, selection, target_of


def _sender_queue(args: argparse.Namespace, where: GroupJournals) -> str:
    text = args.as_queue or DEFAULT_SENDER_QUEUE
    if where.bus is None:
        if args.as_queue is None:
            raise UsageError("give --as QUEUE (the queue jplay attaches to) or --config")
        group, queue = resolve_address(text, None, where.group_id, "--as")
    else:
        try:
            group, queue = resolve_address(text, where.bus, where.group_id, "--as")
        except SelectionError as error:
            if args.as_queue is None:
                raise UsageError(
                    f"group {where.group_id} has no queue named {DEFAULT_SENDER_QUEUE} for "
                    "jplay to attach to: configure one or give --as QUEUE"
                ) from None
            raise UsageError(str(error)) from None
    if group != where.group_id:
        raise UsageError(f"--as {text}: attach to a queue of group {where.group_id}")
    return f"{group}.{queue}"


def _server_address(args: argparse.Namespace, where: GroupJournals) -> str:
    if args.address:
        return args.address
    if where.group is None:
        raise UsageError("give --address HOST:PORT of the group's server (or --config)")
    if where.group.listen_port == 0:
        raise UsageError(
            f"group {where.group_id} listens on a port chosen at start (0 in the config): "
            "give --address HOST:PORT (the server printed it as READY HOST:PORT)"
        )
    return f"{where.group.listen_host}:{where.group.listen_port}"


def _dry_run(store, selection, ledger, options: Options, tally: Tally, target_of) -> None:
    skipped_keys: list[bytes] = []
    planner = Planner(
        store, options.journal, selection, ledger, options, tally, target_of, skipped_keys.append
    )
    while items := planner.next_chunk():
        for item in items:
            reason = status_name(item.record.reason) if item.record.reason else "-"
            tally.by_target[item.target] += 1
            tally.by_reason[reason] += 1
            tally.by_pair[item.target, reason] += 1
    tally.removed = (sum(tally.by_target.values()) + len(skipped_keys)) if options.remove else 0


def _print_dry_run(options: Options, tally: Tally) -> None:
    would_send = sum(tally.by_target.values())
    if options.json:
        print(
            json.dumps(
                {
                    "dry_run": True,
                    "journal": options.journal.value,
                    "group": options.group_id,
                    "selected": tally.selected,
                    "would_send": would_send,
                    "would_skip": tally.skipped,
                    "would_remove": tally.removed,
                    "corrupt": tally.corrupt,
                    "by_target": dict(tally.by_target),
                    "by_reason": dict(tally.by_reason),
                    "by_target_and_reason": [
                        {"target": target, "reason": reason, "records": count}
                        for (target, reason), count in sorted(tally.by_pair.items())
                    ],
                }
            )
        )
        return
    console = Console()
    table = Table(title=f"dry run: {options.journal.value} of group {options.group_id}")
    table.add_column("target")
    table.add_column("reason")
    table.add_column("records", justify="right")
    for (target, reason), count in sorted(tally.by_pair.items()):
        table.add_row(target, reason, str(count))
    if would_send:
        console.print(table)
    line = (
        f"dry run: would send {would_send} of {tally.selected} selected, skip {tally.skipped} "
        "(already replayed)"
    )
    if options.remove:
        line += f", remove {tally.removed} from the dlj once stored"
    if tally.corrupt:
        line += f"; {tally.corrupt} corrupt records (never replayed)"
    console.print(line + "; nothing sent", highlight=False)


def _replay(store, selection, ledger, options, tally, target_of, where) -> int:
    skipped_removals: list[bytes] = []
    planner = Planner(
        store,
        options.journal,
        selection,
        ledger,
        options,
        tally,
        target_of,
        skipped_removals.append if options.remove else (lambda key: None),
    )
    replayer: Replayer | None = None
    show_progress = _progress_wanted(options)
    total = _count_selected(store, options.journal, selection) if show_progress else None
    started = time.perf_counter()

    async def main() -> None:
        nonlocal replayer
        async with connect(options.address, queue=options.sender, program="mrs jplay") as client:
            replayer = Replayer(client, planner, ledger, store, options, tally)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(replayer.flusher)
                progress = None
                if show_progress:
                    progress = Progress(
                        TextColumn(f"replay {options.journal.value}"),
                        BarColumn(),
                        MofNCompleteColumn(),
                        _RateColumn(),
                        TextColumn("ETA"),
                        TimeRemainingColumn(),
                        TimeElapsedColumn(),
                        console=Console(stderr=True),
                    )
                    progress.start()
                    task_id = progress.add_task("replay", total=total)
                    nursery.start_soon(_show_progress, progress, task_id, tally)
                try:
                    await replayer.run()
                    replayer.removals.extend(skipped_removals)
                    skipped_removals.clear()
                    replayer.flush()
                finally:
                    if progress is not None:
                        progress.update(
                            task_id, completed=tally.sent + tally.failed + tally.skipped
                        )
                        progress.stop()
                nursery.cancel_scope.cancel()

    code = 0
    try:
        trio.run(main)
    except KeyboardInterrupt:
        tally.stopped = "interrupted (Ctrl-C)"
        code = 130
    except ConnectionLost as error:
        tally.stopped = f"cannot reach the server: {error.message}"
    except MrsError as error:
        tally.stopped = f"{status_name(int(error.status))}: {error.message}"
    finally:
        tally.elapsed_s = time.perf_counter() - started
        if replayer is not None:
            tally.not_attempted += len(replayer.queue)
            replayer.queue.clear()
            replayer.flush()
        else:
            ledger.flush()
    if tally.stopped:
        tally.not_attempted += planner.count_rest()
    _print_summary(options, tally)
    if code:
        return code
    return 0 if tally.ok else 1


def _print_summary(options: Options, tally: Tally) -> None:
    rate = tally.sent / tally.elapsed_s if tally.elapsed_s > 0 else 0.0
    if options.json:
        print(
            json.dumps(
                {
                    "journal": options.journal.value,
                    "group": options.group_id,
                    "selected": tally.selected,
                    "sent": tally.sent,
                    "skipped": tally.skipped,
                    "failed": tally.failed,
                    "in_doubt": tally.in_doubt,
                    "not_attempted": tally.not_attempted,
                    "removed": tally.removed,
                    "corrupt": tally.corrupt,
                    "statuses": dict(tally.statuses),
                    "failures": tally.failures,
                    "elapsed_s": round(tally.elapsed_s, 3),
                    "msgs_per_s": round(rate, 1),
                    "stopped": tally.stopped or None,
                }
            )
        )
        return
    console = Console(stderr=True)
    line = (
        f"jplay {options.journal.value} of group {options.group_id}: selected {tally.selected}, "
        f"sent {tally.sent}, skipped {tally.skipped} (already replayed), failed {tally.failed}"
    )
    if tally.not_attempted:
        line += f", not attempted {tally.not_attempted}"
    if options.remove:
        line += f", removed {tally.removed} from the dlj"
    if tally.corrupt:
        line += f", corrupt {tally.corrupt} (never replayed)"
    line += f" in {tally.elapsed_s:.2f} s ({rate:,.0f} msgs/s)"
    console.print(line, highlight=False)
    if tally.statuses:
        statuses = ", ".join(f"{name} {count}" for name, count in tally.statuses.most_common())
        console.print(f"statuses: {statuses}", highlight=False)
    for failure in tally.failures:
        console.print(
            f"  failed seq {failure['seq']} -> {failure['target']}: {failure['status']} "
            f"{failure['message']}",
            highlight=False,
            markup=False,
        )
    if tally.stopped:
        console.print(f"stopped: {tally.stopped}", highlight=False, markup=False)
    if not tally.ok:
        console.print(
            "Run the same command again to resume: records stored are skipped, the rest are "
            "sent; any whose outcome was unknown go under the same idempotency key, so the "
            "server stores each at most once.",
            highlight=False,
        )


def add_jplay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("journal", choices=[Journal.PCJ.value, Journal.DLJ.value])
    parser.add_argument(
        "--address", help="HOST:PORT of the group's server (default: its listen from --config)"
    )
    parser.add_argument(
        "--as",
        dest="as_queue",
        metavar="QUEUE",
        help=f"queue of the group jplay attaches to (default: {DEFAULT_SENDER_QUEUE})",
    )
    parser.add_argument("--to", metavar="QUEUE", help="send everything here, not to each target")
    parser.add_argument(
        "--delivery",
        default="WF_DQF",
        help=f"delivery mode: {', '.join(m.name for m in REPLAY_MODES)} (default WF_DQF)",
    )
    parser.add_argument(
        "--uma",
        default="DISC",
        help="undeliverable message action (default DISC: a failed replay is reported and "
        "the journal record stays)",
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds a put may wait (default 30)"
    )
    parser.add_argument("--rate", metavar="N/s", help="at most N messages per second")
    parser.add_argument(
        "--window", type=int, default=DEFAULT_WINDOW, help="puts in flight (default 64)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would be sent; send nothing"
    )
    parser.add_argument(
        "--again", action="store_true", help="replay records already replayed (a new generation)"
    )
    parser.add_argument(
        "--remove",
        action="store_true",
        help="DLJ: remove each dead letter once its replay was acknowledged as stored",
    )
    parser.add_argument("--json", action="store_true", help="the summary as one JSON object")
