"""`mrs dlq-handler`: read and check the rules table, run the handler, exit with a code.

Exit codes: 0 the handler ended normally (WAIT(NO)/--once or WAIT(nnn) ran out, or
--check found the table valid); 2 usage, bad configuration or an invalid rules table
(every error printed with its line and column, nothing processed: FWDQ/FWDQM are
checked against the bus when --config and --group are given); 3 the group's
server could not be reached or the connection was lost (unfinished messages stay on
the DLQ, and go back to it by lease); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_CONNECTION = 3
DLQ_NAMES = ("", "DLQ", "96", "PAMS_DEAD_LETTER_QUEUE", "SYSTEM.DEAD.LETTER.QUEUE")


def add_parser(commands: argparse._SubParsersAction, run) -> None:
    parser = commands.add_parser(
        "dlq-handler", help="runmqdlq-style dead-letter handler driven by a rules table"
    )
    parser.add_argument("rules", nargs="?", type=Path, help="rules table (default: stdin)")
    parser.add_argument("--config", type=Path, help="bus configuration (TOML)")
    parser.add_argument("--group", type=int, help="the group whose DLQ to work")
    parser.add_argument("--address", help="HOST:PORT of the group (default: from --config)")
    parser.add_argument("--once", action="store_true", help="process what is there, then exit")
    parser.add_argument("--check", action="store_true", help="validate the table and exit")
    parser.add_argument("--json", action="store_true", help="report as JSON lines")
    parser.add_argument(
        "--strict", action="store_true", help="refuse lines beyond column 72 (else: a warning)"
    )
    parser.add_argument("--window", type=int, default=32, help="actions in flight at most")
    parser.add_argument(
        "--seen-max", type=int, default=10_000, help="messages held but not removed at most"
    )
    parser.set_defaults(run=run)


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"mrs dlq-handler: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    from mrs.dlq.parser import RulesError, parse_table

    source = str(args.rules) if args.rules else "stdin"
    try:
        text = args.rules.read_text(encoding="utf-8") if args.rules else sys.stdin.read()
    except (OSError, UnicodeDecodeError) as error:
        return _fail(f"cannot read the rules table {source}: {error}")
    try:
        table = parse_table(text, strict=args.strict)
    except RulesError as error:
        return _refuse(source, [str(problem) for problem in error.problems])
    for warning in table.warnings:
        print(f"mrs dlq-handler: {source}: {warning}", file=sys.stderr)
    bus = None
    if args.config is not None and args.group is not None:
        from mrs.config.bus import load_config
        from mrs.dlq.actions import target_problems

        bus = load_config(args.config)
        try:
            bus.group(args.group)
        except LookupError as error:
            return _fail(f"--group {args.group}: {error}")
        if problems := target_problems(table, bus, args.group):
            return _refuse(source, problems)
    if args.check:
        count = len(table.rules)
        print(f"{source}: rules table valid: {count} rule{'' if count == 1 else 's'}")
        return EXIT_OK
    if bus is None:
        return _fail("give --config and --group")
    return _run_handler(args, table, bus)


def _refuse(source: str, problems: list[str]) -> int:
    """Every problem with its line and column, then one line: nothing was started."""
    for problem in problems:
        print(f"mrs dlq-handler: {source}: {problem}", file=sys.stderr)
    return _fail(f"{len(problems)} error(s) in the rules table; not started")


def _run_handler(args: argparse.Namespace, table, bus) -> int:
    import trio

    from clients import ConnectionLost, MrsError
    from mrs.dlq.engine import Engine
    from mrs.dlq.handler import Handler, HandlerOptions
    from mrs.dlq.report import Reporter

    if args.window < 1 or args.seen_max < 1:
        return _fail("--window and --seen-max must be at least 1")
    group = bus.group(args.group)
    control = table.control
    input_q = (control.input_q or "").strip()
    dlj = None
    if input_q.upper() == "DLJ":
        from mrs.offline.journal_files import JournalsNotFound, locate

        if group.instances:  # the handler marks and deletes DLJ records in place
            return _fail(
                f"INPUTQ(DLJ): group {group.id} ({group.name}) is replicated: a handler "
                "would delete from one instance's DLJ, and the others would keep their "
                "copies; work its DLQ (INPUTQ(DLQ)), or replay the DLJ with mrs jplay"
            )
        where = argparse.Namespace(config=args.config, group=args.group, data_dir=None)
        try:
            dlj = locate(where)
        except JournalsNotFound as error:
            return _fail(f"INPUTQ(DLJ): {error}")
    elif input_q.upper() not in DLQ_NAMES:
        return _fail(f"INPUTQ({input_q}): a handler works the group's DLQ (DLQ, 96) or its DLJ")
    input_qm = (control.input_qm or "").strip()
    if input_qm and input_qm not in (str(group.id), group.name):
        return _fail(f"INPUTQM({input_qm}) is not group {group.id} ({group.name}) of --group")
    address = args.address or group.client_address
    wait_s = 0 if args.once else control.wait_s
    options = HandlerOptions(address, group.id, bus, wait_s, args.window, args.seen_max, dlj=dlj)
    engine = Engine(table, names=_names(bus), seen_max=args.seen_max)
    reporter = Reporter(json_lines=args.json)
    handler = Handler(engine, options, reporter)
    code = EXIT_OK
    try:
        trio.run(handler.run)
    except (ConnectionLost, OSError) as error:
        reporter.note(f"connection to group {group.id} at {address} lost: {error}")
        code = EXIT_CONNECTION
    except MrsError as error:
        reporter.note(f"group {group.id} refused: {error}")
        code = EXIT_CONNECTION
    except KeyboardInterrupt:
        code = 130
    reporter.summary(handler.summary())
    return code


def _names(bus):
    def names(group_id: int, queue_id: int | None) -> str | None:
        group = bus.groups.get(group_id)
        if group is None:
            return None
        if queue_id is None:
            return group.name
        queue = group.queues.get(queue_id)
        return queue.name if queue else None

    return names
