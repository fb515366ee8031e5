"""`mrs jplay` (dmqjplay): resend selected PCJ or DLJ records through a running server.

The command around `mrs.tools.journal.replay`: it validates every argument before anything is
read or sent (exit 2), plans a `--dry-run` exactly as a real run (same selection,
same ledger) without sending or writing anything, shows a progress bar with rate
and ETA on a terminal (quiet with `--json` or without a TTY), and ends with a
summary: sent / skipped (already replayed) / failed, with statuses.

Exit status: 0 everything selected is replayed (now or before), 1 some failed or
were not attempted, 2 bad usage, 130 interrupted by Ctrl-C (143 by SIGTERM, 129 by
SIGHUP), with the summary; re-run to resume.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import math
import shlex
import signal
import sys
import time
from pathlib import Path

import lmdb
import trio
from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table

from clients import ConnectionLost, MrsError, connect
from journals import CorruptRecord, Journal, JournalError, JournalStore, Record
from mrs.config.bus import ConfigError
from mrs.dlq.sources import LOCK_FILE as DLJ_HANDLER_LOCK
from mrs.exit_status import EXIT_RUNTIME, CommandError
from mrs.limits import CLIENT_REQUESTS_IN_FLIGHT_MAX
from mrs.model import DEAD_LETTER_QUEUE, DeliveryMode, InterestPoint, Uma
from mrs.offline.journal_files import (
    GroupJournals,
    JournalsNotFound,
    locate,
    open_store,
    replicated_journals,
)
from mrs.offline.scalars import iso_utc
from mrs.offline.selection import (
    RecordFilter,
    SelectionError,
    filter_from_args,
    resolve_address,
)
from mrs.server.gc_tuning import tuned_for_throughput
from mrs.storage.journal_scan import scan
from mrs.tools.console import ToolConsole
from mrs.tools.journal.arguments import DEFAULT_SENDER_QUEUE
from mrs.tools.journal.ledger import LedgerBusy, LedgerDamaged, ReplayLedger
from mrs.tools.journal.pacing import parse_rate
from mrs.tools.journal.progress import progress_wanted, start_progress, stop_progress
from mrs.tools.journal.render import status_name
from mrs.tools.journal.replay import (
    REFUSED_UNTIL_FIXED,
    REPLAY_MODES,
    Options,
    Planner,
    Replayer,
    Tally,
    UsageError,
)


def _count_selected(store: JournalStore, journal: Journal, selection: RecordFilter) -> int | None:
    """The progress bar's total: every selected record. None under `--limit`, which
    counts the records this run replays, not those the ledger skips on the way."""
    if selection.limit is not None:
        return None
    total = 0
    for _key, record in scan(store, journal, selection):
        if not isinstance(record, CorruptRecord):
            total += 1
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
    if options.remove and replicated_journals(where, store):
        store.close()
        print(f"mrs jplay: {REMOVE_REPLICATED}", file=sys.stderr)
        return 2
    try:
        ledger = _open_ledger(where, options)
        try:
            if options.dry_run:
                _dry_run(store, selection, ledger, options, tally, target_of)
                _print_dry_run(options, tally)
                # the real run's status for what it met: a corrupt record is 1 (it
                # said 0, and `jplay --dry-run && jplay` went on past the damage)
                return EXIT_RUNTIME if tally.corrupt else 0
            return _replay(store, selection, ledger, options, tally, target_of, where)
        finally:
            ledger.close()
    except (LedgerDamaged, LedgerBusy) as error:  # no re-run now cures it
        print(f"mrs jplay: {error}", file=sys.stderr)
        return EXIT_RUNTIME
    finally:
        store.close()


def _open_ledger(where: GroupJournals, options: Options) -> ReplayLedger:
    """The group's replay ledger, its key secret checked before anything is sent
    (a damaged one raises LedgerDamaged: the run stops, nothing sent twice)."""
    try:
        ledger = ReplayLedger(where.data_dir, readonly=options.dry_run)
    except OSError as error:
        if error.errno != errno.EROFS:
            raise
        # Why: "mrs: .../replay-ledger: Read-only file system" named no way on, for a
        # replay from a backup mounted read-only
        raise CommandError(
            f"{where.data_dir} is on a read-only file system: a replay keeps its ledger "
            f"there (what it sent, so a re-run sends nothing twice); copy the data "
            "directory to a writable place and replay from the copy (--dry-run reads it "
            "as it is)"
        ) from None
    if options.dry_run:
        ledger.plan_again(options.again)  # as the real run would plan
    else:
        try:
            # one replay at a time per ledger, none beside a DLJ handler (LedgerBusy)
            dlj_lock = Path(where.data_dir) / DLJ_HANDLER_LOCK
            ledger.hold(dlj_lock if options.journal is Journal.DLJ else None)
            ledger.claim_scope(
                options.sender or "",
                options.to,
                again=options.again,
                journal=options.journal,
                selection=options.described,
            )
            ledger.key_secret()
        except BaseException:
            ledger.close()
            raise
    return ledger


KEEPS_A_COPY = {
    Uma.DLJ: "in the dlj",
    Uma.DLQ: "on the dead letter queue",
    Uma.RTS: "back on the queue jplay sends from",
}
"""UMAs that keep a replay the server could not store (what the put answers
DLJ_SUCCESS, DLQ_SUCCESS, RTS_SUCCESS). Why refused: the replay is reported failed and
its record stays to be sent again, as the summary advises, so every run left one more
copy there, and a redrive of those copies delivered each record once per run beside
the copy a later run stored. SAF's copy is the stored replay itself (and its key)."""

REMOVE_REPLICATED = (
    "--remove: these are a replicated group's journals; a removal written here would "
    "not reach the other instances (their copies come back after a failover), so "
    "replay without --remove"
)


def _prepare(args: argparse.Namespace):
    journal = Journal(args.journal)
    _refuse_empty(args)
    where = locate(args)
    bus = where.bus
    started_ns = time.time_ns()
    selection = filter_from_args(args, journal, bus, where.group_id, started_ns)
    selects_all = selection.selects_all
    if selection.time_max_ns is None:
        # What the journal held when the run began. Why: without --until, a replay of
        # a live PCJ read on into the confirms made while it ran: new traffic re-sent
        # to --to, and a run that a PCJ growing faster than --rate never let end.
        selection = dataclasses.replace(selection, time_max_ns=started_ns)
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
    _check_uma(uma, delivery, journal)
    if args.remove and journal is not Journal.DLJ:
        raise UsageError("--remove applies to the dlj: the pcj is the audit trail and stays")
    if not 1 <= args.window <= CLIENT_REQUESTS_IN_FLIGHT_MAX:
        raise UsageError(
            f"--window must be from 1 to {CLIENT_REQUESTS_IN_FLIGHT_MAX} (the puts one "
            f"connection may have in flight), not {args.window}"
        )
    _check_timeout(args.timeout)
    rate = parse_rate(args.rate) if args.rate else None
    to = _replay_target(args.to, where) if args.to else None
    sender = None
    address = None
    if not args.dry_run:
        sender = _sender_queue(args, where)
        address = _server_address(args, where)
    elif args.as_queue is not None:  # a dry run plans the real one: the same refusals
        _sender_queue(args, where)
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
        selects_all=selects_all,
        started_ns=None if args.until else started_ns,
        described=describe_selection(args, selection),
    )

    def target_of(record: Record) -> str:
        return to or f"{record.target_group}.{record.target_queue}"

    return options, where, selection, target_of


def describe_selection(args: argparse.Namespace, selection: RecordFilter) -> dict:
    """What a run selects, as the replay ledger keeps it while the run's records may be
    in doubt (`ReplayLedger.claim_scope`, `ledger.covers`): its criteria as typed, its
    seq and time ranges as they resolved (the end of a run without `--until` is its
    start), and the flags that select it again. Why: the ledger has no entry for a
    record sent with no answer, so a killed run's doubt was settled only by a run over
    the whole journal: the same narrow command run again to its end (as the summary
    advises) left the scope in doubt, and the refusal's way out (`run mrs jplay dlj
    again with --as 1.16`) replayed every dead letter the operator had kept out."""
    criteria = {
        "target": sorted(args.target),
        "source": sorted(args.source),
        "class": sorted(selection.classes or ()),
        "type": sorted(selection.types or ()),
        "contains": sorted(pattern.hex() for pattern in selection.contains),
        "not_contains": sorted(pattern.hex() for pattern in selection.not_contains),
        "reason": sorted(selection.reasons or ()),
        "confirm": [selection.confirm_min, selection.confirm_max],
    }
    flags = [f"--target {shlex.quote(name)}" for name in args.target]
    flags += [f"--source {shlex.quote(name)}" for name in args.source]
    flags += [f"--class {','.join(map(str, criteria['class']))}"] if criteria["class"] else []
    flags += [f"--type {','.join(map(str, criteria['type']))}"] if criteria["type"] else []
    flags += [f"--contains {shlex.quote(text)}" for text in args.contains]
    flags += [f"--not-contains {shlex.quote(text)}" for text in args.not_contains]
    flags += [f"--reason={status_name(reason)}" for reason in criteria["reason"]]
    if args.confirm_value is not None:
        flags.append(f"--confirm-value={shlex.quote(args.confirm_value)}")
    seq = [selection.seq_min, selection.seq_max]
    if seq != [None, None]:
        flags.append(
            f"--seq {'' if seq[0] is None else seq[0]}..{'' if seq[1] is None else seq[1]}"
        )
    time_range = [selection.time_min_ns, selection.time_max_ns]
    for option, end in zip(("--since", "--until"), time_range, strict=True):
        if end is not None:
            flags.append(f"{option} {iso_utc(end) or end}")
    given = {name: value for name, value in criteria.items() if value not in ([], [None, None])}
    journal = selection.journal.value
    return {
        "journal": journal,
        "criteria": given,
        "seq": seq,
        "time": time_range,
        "flags": " ".join(flags),
    }


def _check_uma(uma: Uma, delivery: DeliveryMode, journal: Journal) -> None:
    """The UMAs a replay may take: none that keeps a copy of a failed replay."""
    if uma is Uma.SAF and delivery.interest_point is InterestPoint.SAF:
        raise UsageError("--uma SAF is not supported with WF_SAF")
    if uma is Uma.DLJ and journal is Journal.DLJ:
        raise UsageError(
            "--uma DLJ with the dlj: a redrive that fails would become a second dead letter "
            "beside the one replayed, and each run would double them; keep --uma DISC (the "
            "default: the dead letter stays) or send them --to a queue that takes them"
        )
    if uma in KEEPS_A_COPY:
        raise UsageError(
            f"--uma {uma.name}: a replay that cannot be stored would be put {KEEPS_A_COPY[uma]} "
            f"while its {journal.value} record stays to be replayed again, so each run would "
            "add another copy of it there; keep --uma DISC (the default: the failure is "
            "reported and the next run sends it again) or send the records --to a queue "
            "that takes them"
        )


def _refuse_empty(args: argparse.Namespace) -> None:
    """An empty `--to`, `--as` or `--address` (`--to "$RESTORE"` with the variable
    unset) refused. Why: each was read as not given, so `--to ''` replayed every record
    to its original target, the production queue, instead of the one meant."""
    for option, value in (("--to", args.to), ("--as", args.as_queue), ("--address", args.address)):
        if value is not None and not value.strip():
            raise UsageError(f"{option} is empty: give a value, or leave {option} out")


def _check_timeout(timeout_s: float) -> None:
    """`--timeout` a finite number of seconds above zero: a NaN, infinite, negative
    or zero one is refused here, once, not by every put of the run (a longer one than
    the wire carries waits as long as it can, as any client's put). Said as an option's
    error: the client library's words ("(None: the group's default), got -1.0") named
    a value no command line can give."""
    if not 0 < timeout_s < math.inf:
        raise UsageError(
            f"--timeout must be a finite number of seconds more than zero, not {timeout_s:g}"
        )


def _replay_target(text: str, where: GroupJournals) -> str:
    """`--to` as GROUP.QUEUE, checked against the bus config when there is one: a queue
    the bus does not have would refuse every record, and no re-run would change that."""
    bus = where.bus
    group, queue = resolve_address(text, bus, where.group_id, "--to")
    if queue == DEAD_LETTER_QUEUE:
        # A replay carries no dead-letter header: on a DLQ, mrs dlq-handler never
        # matches it ("no dead-letter header", left there for good, as runmqdlq leaves
        # a message without an MQDLH), and with --remove its DLJ record, the one
        # place that said why it was dead, was deleted.
        raise UsageError(
            f"--to {text}: {group}.{DEAD_LETTER_QUEUE} is a dead letter queue, and a replay "
            "carries no dead-letter header: mrs dlq-handler would never match it and it "
            "would stay there; work the DLJ by rules with mrs dlq-handler (INPUTQ(DLJ)), "
            "or replay --to a queue a program reads"
        )
    if bus is not None:
        if group not in bus.groups:
            known = ", ".join(str(g) for g in bus.groups)
            raise UsageError(f"--to {text}: no group {group} on this bus (groups: {known})")
        config = bus.groups[group]
        if queue not in config.queues:
            raise UsageError(
                f"--to {text}: group {group} ({config.name}) has no queue {queue} "
                f"(queues: {', '.join(str(q) for q in config.queues)})"
            )
    return f"{group}.{queue}"


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
    if queue == DEAD_LETTER_QUEUE:
        # Every replay would name the DLQ as its sender: a receiver's answer to it would
        # land there without a dead-letter header, where mrs dlq-handler never matches it.
        raise UsageError(
            f"--as {text}: {group}.{DEAD_LETTER_QUEUE} is the dead letter queue: replays "
            "would name it as their sender, and answers to them would land there without "
            "a dead-letter header; send from a queue of your own (REPLAY)"
        )
    if where.bus is not None and queue not in where.bus.groups[group].queues:
        # Why: `--as 1.999` was attached to only when the run began, and refused there as
        # a stop of the run (exit 1, every record "not attempted", advice to run the same
        # command again), which no re-run could change.
        config = where.bus.groups[group]
        raise UsageError(
            f"--as {text}: group {group} ({config.name}) has no queue {queue} "
            f"(queues: {', '.join(str(q) for q in config.queues)})"
        )
    return f"{group}.{queue}"


def _server_address(args: argparse.Namespace, where: GroupJournals) -> str:
    if args.address:
        return _checked_address(args.address)
    if where.group is None:
        raise UsageError("give --address HOST:PORT of the group's server (or --config)")
    if where.group.listen_port == 0 and not where.group.instances:  # instances: their own
        raise UsageError(
            f"group {where.group_id} listens on a port chosen at start (0 in the config): "
            "give --address HOST:PORT (the server printed it as READY HOST:PORT)"
        )
    return where.group.client_address


def _checked_address(text: str) -> str:
    """`--address` as the client will read it (HOST:PORT, a port from 1 to 65535). Why
    here: the client refused it only when the replay connected, as a stop of the run
    (exit 1, every record "not attempted", and advice to run the same command again)."""
    from mrs.config.addresses import parse_host_port

    for part in text.split(","):  # a replicated group's instances, comma-separated
        if isinstance(problem := parse_host_port(part, port_min=1), str):
            raise UsageError(f"--address {text!r}: {problem}")
    return text


def _dry_run(store, selection, ledger, options: Options, tally: Tally, target_of) -> None:
    planner = Planner(
        store, options.journal, selection, ledger, options, tally, target_of, lambda key: None
    )
    while items := planner.next_chunk():
        for item in items:
            reason = status_name(item.record.reason) if item.record.reason else "-"
            tally.by_target[item.target] += 1
            tally.by_reason[reason] += 1
            tally.by_pair[item.target, reason] += 1
    tally.removed = (sum(tally.by_target.values()) + tally.skipped) if options.remove else 0


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
                    "copies": tally.copies,  # after the fields of the release before
                    "later": tally.later,
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
    console = ToolConsole(soft_wrap=True)
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
    if tally.copies:
        line += f", pass over {tally.copies} {COPIES_SAID}"
    if options.remove:
        line += f", remove {tally.removed} from the dlj once stored"
    if tally.corrupt:
        line += f"; {tally.corrupt} corrupt records (never replayed)"
    console.print(line + "; nothing sent", highlight=False)


def _replay(store, selection, ledger, options, tally, target_of, where) -> int:
    """Send the selected records (see Planner and Replayer), then flush the ledger and
    print the summary, whatever stopped the run; the exit code."""
    removals: list[bytes] = []
    """Dead letters to delete (--remove), flushed with the ledger every LEDGER_FLUSH_S:
    those replayed now, and those an earlier run replayed (skipped), which once waited
    for the end of the run in a list as long as the journal."""
    planner = Planner(
        store,
        options.journal,
        selection,
        ledger,
        options,
        tally,
        target_of,
        removals.append if options.remove else (lambda key: None),
    )
    replayers: list[Replayer] = []
    """The replayer, once connected (the finally flushes what it holds)."""
    show_progress = progress_wanted(options)
    total = _count_selected(store, options.journal, selection) if show_progress else None
    started = time.perf_counter()

    async def main() -> None:
        async with connect(options.address, queue=options.sender, program="mrs jplay") as client:
            replayer = Replayer(client, planner, ledger, store, options, tally, removals)
            replayers.append(replayer)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(replayer.flusher)
                progress: tuple[Progress, TaskID] | None = None
                if show_progress:
                    progress = start_progress(nursery, options, total, tally)
                try:
                    await replayer.run()
                finally:
                    if progress is not None:
                        stop_progress(*progress, tally)
                nursery.cancel_scope.cancel()

    code = 0
    try:
        # A replay makes a few dicts per record that live until its answer: with
        # CPython's default thresholds the collector walked them again and again
        # (10.5% of jplay's CPU, py-spy --native).
        with tuned_for_throughput():
            code = _run_until_stopped(main, tally)
    finally:
        tally.elapsed_s = time.perf_counter() - started
        _flush_at_end(replayers[0] if replayers else None, ledger, tally)
    ledger.scope_settled(
        options.sender or "",
        options.to,
        in_doubt=tally.in_doubt > 0,
        again_done=options.again and tally.ok and not planner.cut_by_limit,
        covered_all=options.selects_all and selection.limit is None and not tally.stopped,
        finished=selection.limit is None and not tally.stopped,
    )
    if tally.stopped:
        tally.not_attempted += planner.count_rest()
    _print_summary(options, tally)
    if code:
        return code
    # A corrupt record met is one this run did not replay (and no re-run will): not 0,
    # which says every selected record is replayed (`mrs dump` exits 1 for it too).
    return 0 if tally.ok and not tally.corrupt else 1


def _run_until_stopped(main, tally: Tally) -> int:
    """Run the replay; what stopped it early goes into `tally.stopped`. After Ctrl-C,
    SIGTERM (`kill`, `timeout`, a CI job or a service stopped) or SIGHUP the shell's
    code for the signal (130, 143, 129), with the summary: SIGTERM's default ended
    jplay at once, with no summary, no word of records in doubt or not attempted,
    and the outcomes of its last quarter second unwritten."""
    from mrs.offline.stop_signals import run_stoppable, stop_signals_as_ctrl_c

    with stop_signals_as_ctrl_c() as caught:
        try:
            run_stoppable(main)
        except KeyboardInterrupt:
            signum = caught[0] if caught else signal.SIGINT
            name = "Ctrl-C" if signum == signal.SIGINT else signum.name
            tally.stopped = f"interrupted ({name})"
            return 128 + int(signum)
        except LedgerDamaged:
            raise  # not a stop a re-run resumes from (run_jplay says what to do)
        except ConnectionLost as error:
            tally.stopped = tally.stopped or f"cannot reach the server: {error.message}"
        except MrsError as error:
            tally.stopped = f"{status_name(int(error.status))}: {error.message}"
            tally.stopped_for_good = int(error.status) in REFUSED_UNTIL_FIXED
        except (lmdb.Error, JournalError) as error:
            tally.stopped = f"cannot write the ledger or the journal: {error}"
    return 0


def _flush_at_end(replayer: Replayer | None, ledger, tally: Tally) -> None:
    """Whatever stopped the run: records queued but not sent count as not attempted,
    and what the ledger and the journal still hold in memory is written."""
    try:
        if replayer is not None:
            tally.not_attempted += len(replayer.queue)
            replayer.queue.clear()
            replayer.flush()
        else:
            ledger.flush()
    except (lmdb.Error, JournalError) as error:
        tally.stopped = f"cannot write the ledger or the journal: {error}"


COPIES_SAID = "(copies earlier replays made, confirmed here: --again replays their originals)"


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
                    "copies": tally.copies,  # after the fields of the release before
                    "later": tally.later,
                    "statuses": dict(tally.statuses),
                    "failures": tally.failures,
                    "elapsed_s": round(tally.elapsed_s, 3),
                    "msgs_per_s": round(rate, 1),
                    "stopped": tally.stopped or None,
                    "resumable": tally.resumable,
                }
            )
        )
        return
    console = Console(stderr=True, soft_wrap=True)
    line = (
        f"jplay {options.journal.value} of group {options.group_id}: selected {tally.selected}, "
        f"sent {tally.sent}, skipped {tally.skipped} (already replayed), failed {tally.failed}"
    )
    if tally.copies:
        line += f", passed over {tally.copies} {COPIES_SAID}"
    if tally.in_doubt:
        line += f" ({tally.in_doubt} in doubt: sent, no answer)"
    if tally.not_attempted:
        line += f", not attempted {tally.not_attempted}"
    if tally.later:
        line += f", left {tally.later} dated after the run began (the next run takes them)"
    if options.remove:
        line += f", removed {tally.removed} from the dlj"
    if tally.corrupt:
        line += f", corrupt {tally.corrupt} (never replayed)"
    line += f" in {tally.elapsed_s:.2f} s ({rate:,.0f} msgs/s)"
    console.print(line, highlight=False)
    if tally.statuses:
        statuses = ", ".join(f"{name} {count}" for name, count in tally.statuses.most_common())
        console.print(f"statuses: {statuses}", highlight=False)
    for failure in sorted(tally.failures, key=lambda f: f["seq"]):
        console.print(
            f"  failed seq {failure['seq']} -> {failure['target']}: {failure['status']} "
            f"{failure['message']}",
            highlight=False,
            markup=False,
        )
    if tally.stopped:
        console.print(f"stopped: {tally.stopped}", highlight=False, markup=False)
    _print_advice(console, tally)


def _print_advice(console: Console, tally: Tally) -> None:
    """What the operator does next: run again, fix a refusal, repair the journal."""
    if tally.resumable:
        console.print(
            "Run the same command again to resume: records stored are skipped, the rest are "
            "sent; any whose outcome was unknown go under the same idempotency key, so the "
            "server stores each at most once.",
            highlight=False,
        )
    elif tally.stopped_for_good:
        console.print(
            "The server refused the run itself (stopped, above), and refuses a re-run "
            "the same way: fix what it names first (--address reaching another group, "
            "--as, a right the principal lacks); nothing was sent.",
            highlight=False,
        )
    elif not tally.ok:
        console.print(
            "The failures above are refusals a re-run would get again: fix what they name "
            "(the target queue, --to, the configuration, a right the principal lacks) "
            "before replaying them.",
            highlight=False,
        )
    if tally.corrupt:
        console.print(
            f"{tally.corrupt} corrupt {'record was' if tally.corrupt == 1 else 'records were'} "
            "not replayed (each run meets them again): `mrs journal verify` names them, "
            "`mrs journal salvage` copies what can be read (docs/journal-repair.md).",
            highlight=False,
        )
