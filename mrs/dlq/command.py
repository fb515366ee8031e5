"""`mrs dlq-handler`: read and check the rules table, run the handler, exit with a code.

Exit codes: 0 the handler ended normally (WAIT(NO)/--once or WAIT(nnn) ran out, or
--check found the table valid); 2 usage, bad configuration or an invalid rules table
(every error printed with its line and column, nothing processed: FWDQ/FWDQM are
checked against the bus when --config and --group are given); 3 the group's
server could not be reached or the connection was lost (unfinished messages stay on
the DLQ, and go back to it by lease); 130 interrupted by Ctrl-C (143 by SIGTERM, 129
by SIGHUP: one line on stderr, then the summary).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mrs.dlq.table import DEAD_LETTER_QUEUE_NAMES
from mrs.transport.dial_reason import dial_reason

if TYPE_CHECKING:
    from mrs.dlq.table import RulesTable

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_CONNECTION = 3
DLQ_NAMES = ("", *DEAD_LETTER_QUEUE_NAMES)
"""What INPUTQ may say: blank or a name of the group's DLQ."""


def add_parser(commands: argparse._SubParsersAction, run) -> None:
    from mrs.limits import DLQ_HANDLER_HELD_BYTES_MAX_DEFAULT
    from mrs.offline.journal_files import operator_path

    parser = commands.add_parser(
        "dlq-handler", help="runmqdlq-style dead-letter handler driven by a rules table"
    )
    parser.add_argument("rules", nargs="?", type=operator_path, help="rules table (default: stdin)")
    parser.add_argument("--config", type=operator_path, help="bus configuration (TOML)")
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
    parser.add_argument(
        "--held-bytes-max",
        type=int,
        default=DLQ_HANDLER_HELD_BYTES_MAX_DEFAULT,
        help="bytes of bodies of the letters being worked at most (default 64 MiB)",
    )
    parser.set_defaults(run=run)


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"mrs dlq-handler: {message}", file=sys.stderr)
    return code


def _window_refusal(window: int) -> str:
    """The refusal of a `--window` below 1 or above the gets one connection may have
    waiting (below 1 was "--window and --seen-max must be ...", naming both). Why the cap:
    each of the window's takers keeps a get waiting, and the client library holds at
    most HELD_MESSAGES_MAX messages got or coming; a larger window (3000) was refused
    mid-run, told as "group 1 refused: EXCEEDQUOTA", exit 3, as if the group were at
    fault, and 99999999999 started that many takers until the kernel killed the
    handler for its memory."""
    from mrs.limits import HELD_MESSAGES_MAX

    return (
        f"--window must be from 1 to {HELD_MESSAGES_MAX} (the gets one connection may "
        f"have waiting), not {window}"
    )


def run(args: argparse.Namespace) -> int:
    """Every check the handler makes (the table's syntax, its control data, its FWDQ
    targets against the bus, the options), all reported together; then --check
    stops, else the handler runs."""
    from mrs.dlq.parser import RulesError, decode_table, parse_table
    from mrs.limits import DLQ_TABLE_BYTES_MAX, HELD_MESSAGES_MAX

    if not 1 <= args.window <= HELD_MESSAGES_MAX:  # the option given, not both
        return _fail(_window_refusal(args.window))
    if args.seen_max < 1:
        return _fail(f"--seen-max must be at least 1, not {args.seen_max}")
    if args.held_bytes_max < 1:
        return _fail("--held-bytes-max must be at least 1")
    if args.address is not None and (problem := _address_problem(args.address)) is not None:
        return _fail(problem)
    source = str(args.rules) if args.rules else "stdin"
    try:  # at most one byte more than a table may have: /dev/zero is refused, not read
        if args.rules:
            with args.rules.open("rb") as file:
                data = file.read(DLQ_TABLE_BYTES_MAX + 1)
        else:
            _hint_terminal_input()
            data = sys.stdin.buffer.read(DLQ_TABLE_BYTES_MAX + 1)
    except OSError as error:  # its strerror: str() repeated the path, "[Errno 2] ...: '/x'"
        return _fail(f"cannot read the rules table {source}: {error.strerror or error}")
    table: RulesTable | None
    try:
        table, problems = parse_table(decode_table(data), strict=args.strict), []
    except RulesError as error:
        table, problems = error.partial, [str(problem) for problem in error.problems]
    for warning in table.warnings if table is not None else ():
        print(f"mrs dlq-handler: {source}: {warning}", file=sys.stderr)
    bus = None
    if args.config is not None and args.group is not None:
        from mrs.config.bus import load_config

        bus = load_config(args.config)
        try:
            bus.group(args.group)
        except LookupError as error:
            return _fail(f"--group {args.group}: {error}")
    control_problems: list[str] = []
    dlj = None
    if table is not None:
        from mrs.dlq.actions import target_problems

        control_problems, dlj = _input_problems(table, bus, args)
        if bus is not None:  # one error per rule: a place the parser reported is not repeated
            placed = {_place(problem) for problem in problems}
            more = [p for p in target_problems(table, bus, args.group) if _place(p) not in placed]
            problems = sorted([*problems, *more], key=_place)
    if problems or control_problems:
        return _refuse(source, control_problems, problems)
    assert table is not None  # parse_table returns a table or raises with problems
    if args.check:
        count = len(table.rules)
        print(f"{source}: rules table valid: {count} rule{'' if count == 1 else 's'}")
        return EXIT_OK
    if bus is None:
        return _fail("give --config and --group")
    group = bus.group(args.group)
    if args.address is None and group.listen_port == 0 and not group.instances:
        return _fail(
            f"group {group.id} listens on a port chosen at start (0 in the config): give "
            "--address HOST:PORT (the server printed it as READY HOST:PORT)"
        )
    return _run_handler(args, table, bus, dlj)


def _address_problem(text: str) -> str | None:
    """Why `--address` is not HOST:PORT (a port from 1 to 65535; a replicated group's
    instances comma-separated), or None. Why here: the client refused it only when the
    handler connected, and an operator's typo ended as exit 3, "group 1 refused", the
    code of a group that could not be reached; so did the port 0 of a config whose
    server picks its port at start (`run`)."""
    from mrs.config.addresses import parse_host_port

    for part in text.split(","):
        if isinstance(problem := parse_host_port(part, port_min=1), str):
            return f"--address {text!r}: {problem}"
    return None


def _place(problem: str) -> tuple[int, int]:
    """(line, column) of a "line L, column C: ..." problem, to list them in order."""
    found = re.match(r"line (\d+), column (\d+):", problem)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def _refuse(source: str, control_problems: list[str], problems: list[str]) -> int:
    """Every problem (the control data's, then each with its line and column), then
    one line: nothing was started. A control data problem alone is that one line."""
    for problem in control_problems:
        print(f"mrs dlq-handler: {problem}", file=sys.stderr)
    for problem in problems:
        print(f"mrs dlq-handler: {source}: {problem}", file=sys.stderr)
    if not problems:
        return EXIT_USAGE
    count = len(problems) + len(control_problems)
    return _fail(f"{count} error(s) in the rules table; not started")


def _input_problems(table, bus, args: argparse.Namespace) -> tuple[list[str], object]:
    """What the control data's INPUTQ and INPUTQM say against --group (the DLQ, or
    the DLJ of an unreplicated group whose journals are here), and the DLJ to work;
    without a bus, only what needs none."""
    from mrs.dlq.parser import shown

    control = table.control
    input_q = (control.input_q or "").strip()
    if input_q.upper() != "DLJ" and input_q.upper() not in DLQ_NAMES:
        why = f"INPUTQ({shown(input_q)}): a handler works the group's DLQ (DLQ, 96) or its DLJ"
        return [why], None
    if bus is None:
        return [], None
    group = bus.group(args.group)
    problems = []
    input_qm = (control.input_qm or "").strip()
    if input_qm and input_qm not in (str(group.id), group.name):
        problems.append(
            f"INPUTQM({shown(input_qm)}) is not group {group.id} ({group.name}) of --group"
        )
    if input_q.upper() != "DLJ":
        if not group.dead_letter_queue:
            # Else --check called the table valid and the run ended with exit 3, "group
            # 1 refused: NOSUCHQUEUE": a lost connection by the docs, for a mistake
            # in the configuration.
            problems.append(
                f"INPUTQ({shown(input_q)}): group {group.id} ({group.name}) has no dead letter "
                "queue (dead_letter_queue = false in its config): work its DLJ "
                "(INPUTQ(DLJ)), or give the group its DLQ"
            )
        return problems, None
    if group.instances:  # the handler marks and deletes DLJ records in place
        problems.append(
            f"INPUTQ(DLJ): group {group.id} ({group.name}) is replicated: a handler "
            "would delete from one instance's DLJ, and the others would keep their "
            "copies; work its DLQ (INPUTQ(DLQ)), or replay the DLJ with mrs jplay"
        )
        return problems, None
    from mrs.offline.journal_files import JournalsNotFound, locate

    where = argparse.Namespace(config=args.config, group=args.group, data_dir=None)
    try:
        return problems, locate(where)
    except JournalsNotFound as error:
        return [*problems, f"INPUTQ(DLJ): {error}"], None


def _run_handler(args: argparse.Namespace, table, bus, dlj) -> int:
    from clients import ConnectionLost, MrsError
    from mrs.dlq.engine import Engine
    from mrs.dlq.handler import Handler, HandlerOptions
    from mrs.dlq.report import Reporter

    group = bus.group(args.group)
    address = args.address or group.client_address
    wait_s = 0 if args.once else table.control.wait_s
    options = HandlerOptions(address, group.id, bus, wait_s, args.window, args.seen_max, dlj=dlj)
    options.held_bytes_max = args.held_bytes_max
    if dlj is not None and (fault_text := getattr(args, "fault_file", None)):
        options.fault_file = Path(fault_text)  # the harness's (mrs.tools.cli reads it)
    engine = Engine(table, names=_names(bus), seen_max=args.seen_max)
    reporter = Reporter(json_lines=args.json)
    handler = Handler(engine, options, reporter)
    from mrs.offline.stop_signals import run_stoppable, stop_signals_as_ctrl_c

    codes = [EXIT_OK]
    # except*: the handler's tasks fail together when the connection goes (every
    # taker sees it), so the error comes as a group; each kind is told once.
    # SIGTERM and SIGHUP stop it as Ctrl-C does: their default ended the handler at
    # once, with no summary and no word of what it left unfinished.
    with stop_signals_as_ctrl_c() as caught:
        try:
            run_stoppable(handler.run)
        except* KeyboardInterrupt:
            signum = caught[0] if caught else signal.SIGINT
            _interrupted(signum, dlj is not None)
            codes.append(128 + int(signum))
        except* BrokenPipeError:  # an OSError, but no connection lost: before that
            codes.append(_reader_gone(dlj is not None))
        except* (ConnectionLost, OSError) as lost:
            reporter.note(_lost_note(handler.connected, group, address, lost))
            codes.append(EXIT_CONNECTION)
        except* MrsError as refused:
            reporter.note(_refused_note(handler.connected, group, address, _first(refused)))
            codes.append(EXIT_CONNECTION)
    reporter.summary(handler.summary())
    return max(codes)


def _reader_gone(dlj: bool) -> int:
    """The report's reader went away (`| head`, a log shipper that died): the handler
    stops, since it can no longer say what it does; one line on stderr, stdout pointed
    at /dev/null (the summary and the interpreter's last flush go nowhere), and 141,
    128 + SIGPIPE, as a shell tells a command its pipe's reader ended. Why not 0, as
    `mrs dump | head` ends: the handler stopped with letters left to work, and 0 says
    it ended normally (a supervisor did not start it again, a script went on)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (a test's capture)
        pass
    finally:
        os.close(devnull)
    where = (
        "the DLJ records it had not finished stay in the DLJ"
        if dlj
        else "the letters it held and had not finished go back to the DLQ"
    )
    print(
        f"mrs dlq-handler: stopped: the reader of its report went away (stdout closed); "
        f"{where}, and the next run repeats any whose put was on its way marked as a "
        "possible duplicate",
        file=sys.stderr,
        flush=True,
    )
    return 128 + int(signal.SIGPIPE)


def _interrupted(signum: signal.Signals, dlj: bool) -> None:
    """One line on stderr: which signal stopped the handler, and where the letters it
    had not finished are (a put on its way may have been stored: its repeat is marked)."""
    where = (
        "the DLJ records it had not finished stay in the DLJ"
        if dlj
        else "the letters it held and had not finished go back to the DLQ"
    )
    print(
        f"mrs dlq-handler: interrupted by {signum.name}; {where}, and the next run "
        "repeats any whose put was on its way marked as a possible duplicate",
        file=sys.stderr,
        flush=True,
    )


def _lost_note(connected: bool, group, address: str, lost: BaseExceptionGroup) -> str:
    """The line for exit 3: a group never reached (nothing listens at the address, the
    host unknown) is told apart from a connection lost while the handler worked. Why:
    both read "connection to group 1 at ... lost", and an operator who mistyped the
    port looked for a crash of a group the handler had never reached."""
    named = f"group {group.id} ({group.name}) at {address}"
    if connected:
        return f"connection to {named} lost: {_first(lost)}"
    return (
        f"could not connect to {named}: {_os_reason(lost)}; is it running, and is "
        "that its address? (no dead letter was touched)"
    )


def _hint_terminal_input() -> None:
    """One line on stderr when the table is to come from a terminal. Why: an operator
    who left out RULES_FILE saw the command hang without a word (runmqdlq reads its
    table from standard input, and so does this), and took it for a stuck handler."""
    if sys.stdin is not None and sys.stdin.isatty():
        print(
            "mrs dlq-handler: reading the rules table from the terminal (end it with "
            "Ctrl-D; or give RULES_FILE, or < rules.txt)",
            file=sys.stderr,
            flush=True,
        )


def _refused_note(connected: bool, group, address: str, error: BaseException) -> str:
    """The line for a refusal that ends the handler. One of the attach (its DLQ is
    named `G.96`) is a server at the address that is not group G: said so, since the
    server's own words ("attach to a queue of group 2") read as a handler's bug to an
    operator who only gave --address."""
    from mrs.model import Status

    if not connected and getattr(error, "status", None) == Status.NOSUCHQUEUE:
        return (
            f"the server at {address} is not group {group.id} ({group.name}): {error}; "
            "is that its address? (no dead letter was touched)"
        )
    return f"group {group.id} refused: {error}"


def _os_reason(error: BaseException) -> str:
    """The operating system's reason a connect failed, in words ("connection
    refused: nothing listens there", "cannot resolve the host name ..."), else the
    error's own text."""
    found = dial_reason(error)
    if found is not None:
        return found
    return str(_first(error) if isinstance(error, BaseExceptionGroup) else error)


def _first(group: BaseExceptionGroup) -> BaseException:
    """The first error of an exception group (nested groups opened)."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


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
