"""`mrs admin`: an operator acts on a running group (browse, purge, move, connections).

    mrs admin browse ORDERS --config bus.toml --limit 10
    mrs admin purge ORDERS --config bus.toml                # to the DLJ, with the reason
    mrs admin move ORDERS --to ORDERS_RETRY --config bus.toml
    mrs admin set-limits ORDERS --unconfirmed-max 50 --config bus.toml
    mrs admin add-queue 30 ORDERS_RETRY --config bus.toml --group 1
    mrs admin connections --config bus.toml --group 1
    mrs admin reset-link 1 --config bus.toml --group 2     # group 1 was rebuilt
    mrs admin journal --config bus.toml --group 1           # who did what

Each is one AdminRequest to the group's server (mrs.ops.admin_actions), under [auth]
with the credentials of MRS_AUTH_NAME (the manage grant on the queue, the status right
for connections and the journal). Tables fit 80 columns; `--json` prints the group's
answer as is. A mistake (unknown queue, no right, a limit the config refuses) is one
line and exit status 1; a usage mistake, exit 2, is caught before the group is asked
(a value out of its range: a limit, a seq, a group id, a correlation id; text that
is not UTF-8; a queue that is no queue's shape; an address that is no HOST:PORT;
--address with --group). A move repeats its request until the
source is empty (or it took as many as the source held at the first answer), each
message in one transaction on the server: run it again after a crash to finish it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from mrs.address import id_number
from mrs.config.schema import QUEUE_FORMS, queue_shape_problem
from mrs.errors import ConnectionLost, MrsError, NotAuthorized
from mrs.limits import (
    ADMIN_BROWSE_DEFAULT,
    ADMIN_BROWSE_MESSAGES_MAX,
    ADMIN_LOG_RECORDS_MAX,
    CORRELATION_ID_BYTES_MAX,
)
from mrs.offline.journal_files import group_id, operator_path
from mrs.offline.selection import SEQ_MAX
from mrs.security.permissions import GRANT_KINDS
from mrs.tools.cli_support import (
    EXIT_OK,
    EXIT_RUNTIME,
    EXIT_USAGE,
    CommandError,
    int64,
    positive_int,
    walk_errors,
    whole_in,
)

CONNECT_TIMEOUT_S = 10.0
"""Seconds to reach the group's server."""
TABLE_COLUMNS = 80
"""Width the tables are laid out for, whatever the terminal says."""


def _add_reset_link(actions: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """`mrs admin reset-link PEER [--force]` (mrs.server.links `PeerLinks.reset`)."""
    reset = actions.add_parser(
        "reset-link",
        help="accept a peer group's new journals on its link (after the peer was rebuilt)",
    )
    reset.add_argument("peer", type=group_id, help="the peer group's id")
    reset.add_argument(
        "--force",
        action="store_true",
        help="reset although the group has not refused the peer's link for its journals "
        "(a peer merely stopped may then have its resends stored twice)",
    )
    return reset


def add_admin_parser(commands: argparse._SubParsersAction) -> None:
    admin = commands.add_parser(
        "admin",
        help="act on a running group: browse, purge, move, connections, journal",
        description="An operator's actions on a running group, answered by its server "
        "(docs/operations.md, 'Acting on queues'). Under [auth] the credentials come from "
        "MRS_AUTH_NAME and MRS_AUTH_PASSWORD_FILE.",
    )
    actions = admin.add_subparsers(dest="admin_command", required=True, metavar="ACTION")
    browse = _add_browse(actions)
    purge = actions.add_parser("purge", help="empty a queue: journaled messages to the DLJ")
    purge.add_argument("queue", help="G.Q, GROUP.NAME or a queue name")
    purge.add_argument("--discard", action="store_true", help="delete instead of the DLJ")
    purge.add_argument("--reason", default="", help="why (kept with each DLJ record)")
    move = actions.add_parser("move", help="move what waits on a queue to another queue")
    move.add_argument("queue", help="G.Q, GROUP.NAME or a queue name (the source)")
    move.add_argument("--to", required=True, help="the target queue (same group)")
    limits = actions.add_parser(
        "set-limits", help="change a queue's limits now and in the config file"
    )
    limits.add_argument("queue", help="G.Q, GROUP.NAME or a queue name")
    limits.add_argument("--messages-max", type=int64, help="memory messages it may hold")
    limits.add_argument("--unconfirmed-max", type=int64, help="deliveries awaiting a confirm")
    add = actions.add_parser("add-queue", help="add a queue now and to the config file")
    add.add_argument("id", type=int64, help="the queue's id in its group")
    add.add_argument("name", help="the queue's name")
    add.add_argument("--confirm", help="confirm style (default explicit-in-order)")
    add.add_argument("--messages-max", type=int64, help="memory messages it may hold")
    add.add_argument("--unconfirmed-max", type=int64, help="deliveries awaiting a confirm")
    add.add_argument("--no-dqf", action="store_true", help="memory only (recoverable = false)")
    grant = actions.add_parser("grant", help="replace a principal's grants (credentials file)")
    grant.add_argument("principal", help="the principal's name")
    for kind in ("attach", "put", "confirm", "manage"):
        grant.add_argument(f"--{kind}", action="append", metavar="PATTERN", help="queue pattern")
    grant.add_argument("--admin", action="append", metavar="RIGHT", help="an admin right")
    grant.add_argument(
        "--none", action="store_true", help="take every grant away (no option given: refused)"
    )
    for selective in (browse, move):
        selective.add_argument("--class", dest="msg_class", type=int64, help="only this class")
        selective.add_argument("--type", dest="msg_type", type=int64, help="only this type")
        selective.add_argument(
            "--correlation-id",
            type=correlation_hex,
            metavar="HEX",
            help=f"only this correlation id (hex, at most {CORRELATION_ID_BYTES_MAX} bytes)",
        )
        selective.add_argument("--contains", metavar="TEXT", help="only bodies holding TEXT")
    reset = _add_reset_link(actions)
    connections = actions.add_parser("connections", help="the group's client connections")
    journal = actions.add_parser("journal", help="the group's admin journal: who did what")
    journal.add_argument(
        "--limit",
        type=positive_int,
        default=ADMIN_BROWSE_DEFAULT,
        help=f"the last N records (1..{ADMIN_LOG_RECORDS_MAX} from the group; "
        "--offline: any number)",
    )
    journal.add_argument(
        "--offline", action="store_true", help="read the file in the data directory (--config)"
    )
    journal.add_argument(
        "--instance", help="--offline on a replicated group: the instance whose file to read"
    )
    for parser in (browse, purge, move, limits, add, grant, reset, connections, journal):
        _add_where(parser)


def _add_browse(actions: argparse._SubParsersAction) -> argparse.ArgumentParser:
    browse = actions.add_parser("browse", help="look at a queue's messages without taking them")
    browse.add_argument("queue", help="G.Q, GROUP.NAME or a queue name")
    browse.add_argument(
        "--limit",
        type=whole_in(1, ADMIN_BROWSE_MESSAGES_MAX),
        default=ADMIN_BROWSE_DEFAULT,
        help=f"messages to show, 1..{ADMIN_BROWSE_MESSAGES_MAX}",
    )
    browse.add_argument(
        "--after",
        type=whole_in(0, SEQ_MAX, " (a message's seq)"),
        metavar="SEQ",
        help="the next page: the messages after this one (the seq the last page ends with)",
    )
    return browse


def _add_where(parser: argparse.ArgumentParser) -> None:
    """The options every action shares: which group's server to ask, and how to print."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", type=operator_path, help="bus configuration")
    where.add_argument("--address", help="HOST:PORT of the group's server instead")
    parser.add_argument(
        "--group",
        type=group_id,
        help="the group (default: the queue's; a name in several groups must say which)",
    )
    parser.add_argument("--json", action="store_true", help="JSON instead of a table")
    parser.set_defaults(run=run_admin)


def run_admin(args: argparse.Namespace) -> int:
    import trio

    return trio.run(_run, args)


async def _run(args: argparse.Namespace) -> int:
    from contextlib import AsyncExitStack

    from mrs.config.bus import load_config
    from mrs.config.tls import operator_connect_options
    from mrs.tools.bus_status import ADDRESS_WITH_GROUP

    address, options, group, coordinator, bus_path = args.address, {}, None, None, None
    _check_text(args)
    _check_queues(args)
    _check_address(args.address)
    if args.address is not None and args.group is not None:  # it was ignored
        raise CommandError(f"admin: {ADDRESS_WITH_GROUP}", EXIT_USAGE)
    if args.admin_command == "grant":  # before the server is asked
        _check_grants(args)
    if args.admin_command == "journal":
        _check_journal(args)
    if args.config is not None:
        bus = load_config(args.config)
        group = _group_of(args, bus)
        if getattr(args, "offline", False):  # the file, not the server
            try:
                data_dir = group.data_dir_of(args.instance)
            except LookupError as error:
                raise CommandError(f"admin: {error}", EXIT_USAGE) from None
            return _journal_offline(Path(data_dir), args)
        if not group.instances and group.listen_port == 0:  # dialled, it was "refused"
            raise CommandError(
                f"admin: group {group.id} ({group.name}) listens on port 0 in {args.config} "
                "(a port chosen at start): give --address HOST:PORT (its READY line)",
                EXIT_USAGE,
            )
        address = group.client_address
        options = operator_connect_options(group)
        coordinator = bus.coordinator if group.instances else None
        bus_path = bus.path
    try:
        async with AsyncExitStack() as stack:
            where = (group, coordinator, bus_path)
            client = await _open(stack, args, address, options, where)
            try:
                return await _act(client, args)
            except ConnectionLost as lost:
                raise CommandError(_lost_line(args.admin_command, lost), EXIT_RUNTIME) from None
    except CommandError:
        raise
    except Exception as error:  # noqa: BLE001 - the group's answer, as one line
        if any(isinstance(inner, BrokenPipeError) for inner in walk_errors(error)):
            raise  # our stdout's reader went away (`| head`), not the group
        message = getattr(error, "message", None) or str(error)
        message = _as_typed(message, args.admin_command)
        raise CommandError(f"admin: {_words(message)}", EXIT_RUNTIME) from None


def _as_typed(message: str, command: str) -> str:
    """`message` led by the command the operator typed (`set-limits`), not by the
    AdminRequest's action (`set_limits`). Why: an unanswered `mrs admin set-limits`
    (also `add-queue`, `reset-link`) said "admin: set_limits: no answer from ...", a
    word the operator never typed and no `mrs admin` command takes."""
    action = command.replace("-", "_")
    if action != command and message.startswith(f"{action}:"):
        return command + message[len(action) :]
    return message


def _words(message: str) -> str:
    """A refusal of the group (in the AdminRequest's terms) in this command's words."""
    from mrs.ops.admin_terms import rendered

    return rendered(message, "cli")


async def _open(
    stack: Any, args: argparse.Namespace, address: str, options: dict, where: tuple
) -> Any:
    """The client connected to the group's server (on a replicated group, to its
    active, waited for up to CONNECT_TIMEOUT_S during a failover), or CommandError
    with `mrs status`'s words for why none answered; `where`: the group, its
    coordinator and the bus file (None each with --address)."""
    from clients import connect
    from mrs.tools.reach_active import handshake_wait_s, open_active, unreachable_line

    instances = len(address.split(","))

    def dial() -> Any:
        return connect(
            address,
            queue=None,
            program=f"mrs admin {args.admin_command}",
            connect_timeout_s=handshake_wait_s(CONNECT_TIMEOUT_S, instances),
            reconnect=None,
            **options,
        )

    try:
        return await open_active(stack, dial, instances, CONNECT_TIMEOUT_S)
    except NotAuthorized as refused:
        raise CommandError(f"admin: {_refused_line(refused)}", EXIT_RUNTIME) from None
    except ConnectionLost as lost:
        group, coordinator, bus_path = where
        group_id = None if group is None else group.id
        line = await unreachable_line(
            lost, address, coordinator, group_id, CONNECT_TIMEOUT_S, bus_path
        )
        raise CommandError(f"admin: {line}", EXIT_RUNTIME) from None


def _refused_line(refused: Exception) -> str:
    """The group's refusal of the connection, and, when no principal was given, how to
    give one. Why: without MRS_AUTH_NAME the line was the client library's "group 2
    requires authentication: connect with credentials", and the command has no option
    for credentials: they come from the environment."""
    message = getattr(refused, "message", None) or str(refused)
    if os.environ.get("MRS_AUTH_NAME"):
        return message
    return (
        f"{message}: set MRS_AUTH_NAME and MRS_AUTH_PASSWORD_FILE to a principal with "
        "the action's right (docs/security-auth.md)"
    )


READ_ONLY_COMMANDS = frozenset({"browse", "connections", "journal"})
"""The actions that change nothing: a lost answer is only a lost answer."""


def _lost_line(command: str, lost: Exception) -> str:
    """The line for a connection lost before the group answered. Why not the bare
    client error: an action that changes the group may be done or not (its active
    was lost or stepped down after it acted and before its change was on a majority
    of a replicated group's instances), and the operator must know to look and ask
    again; every one of them may be asked again."""
    message = getattr(lost, "message", None) or str(lost)
    if command in READ_ONLY_COMMANDS:
        return f"admin: {message}"
    return (
        f"admin: {command}: the connection to the group was lost before its answer "
        f"({message}): it may or may not be done; see `mrs admin journal` and run it "
        "again once the group answers"
    )


def _group_of(args: argparse.Namespace, bus: Any) -> Any:
    """The group to ask: --group; else the group a `G.Q` queue names (by id or name);
    else the one group with a queue of that name; else the bus's only group. A queue
    name in several groups is refused: purging the wrong one cannot be undone."""
    queue = (getattr(args, "queue", None) or "").strip()
    try:
        if args.group is not None:
            return bus.group(args.group)
        if "." in queue:
            head = queue.partition(".")[0]
            return bus.group(int(head)) if id_number(head) else bus.group_by_name(head)
    except LookupError as error:
        raise CommandError(f"admin: {error}", EXIT_USAGE) from None
    if len(bus.groups) == 1:
        return next(iter(bus.groups.values()))
    groups = ", ".join(f"{g.id} ({g.name})" for g in bus.groups.values())
    if not queue or queue.isdigit():
        raise CommandError(
            f"admin: {args.config} has several groups ({groups}): say which with --group"
            + (f" or name the queue as GROUP.{queue}" if queue else ""),
            EXIT_USAGE,
        )
    owners = [g for g in bus.groups.values() if any(q.name == queue for q in g.queues.values())]
    if not owners:
        raise CommandError(
            f"admin: no queue {queue!r} in any group of {args.config} (groups: {groups})",
            EXIT_RUNTIME,
        )
    if len(owners) > 1:
        named = " and ".join(f"{g.id} ({g.name})" for g in owners)
        raise CommandError(
            f"admin: queue {queue!r} is in groups {named}: say which, e.g. "
            f"{owners[0].name}.{queue} or --group {owners[0].id}",
            EXIT_USAGE,
        )
    return owners[0]


async def _act(client: Any, args: argparse.Namespace) -> int:
    command = args.admin_command
    if command == "browse":
        # `after` only when given: a group of the release before does not know it
        page = {} if args.after is None else {"after": args.after}
        result = await client.admin(
            "browse", queue=args.queue, limit=args.limit, select=_select(args), **page
        )
    elif command == "purge":
        result = await _repeat(
            client, "purge", {"queue": args.queue, "discard": args.discard, "reason": args.reason}
        )
    elif command == "move":
        request = {"queue": args.queue, "to": args.to, "select": _select(args)}
        result = await _repeat(client, "move", request)
    elif command == "set-limits":
        result = await client.admin(
            "set_limits",
            queue=args.queue,
            messages_max=args.messages_max,
            unconfirmed_max=args.unconfirmed_max,
        )
    elif command == "add-queue":
        result = await client.admin(
            "add_queue",
            id=args.id,
            name=args.name,
            confirm=args.confirm,
            messages_max=args.messages_max,
            unconfirmed_max=args.unconfirmed_max,
            recoverable=False if args.no_dqf else None,
        )
    elif command == "grant":  # --none said as such (an earlier release's sent 5 empty)
        grants = {kind: getattr(args, kind) for kind in GRANT_KINDS if getattr(args, kind)}
        result = await client.admin(
            "grant", principal=args.principal, **({"none": True} if args.none else grants)
        )
    elif command == "reset-link":
        forced = {"force": True} if args.force else {}  # an earlier group knows no force
        result = await client.admin("reset_link", peer=args.peer, **forced)
    elif command == "connections":
        result = await client.admin("connections")
    else:
        result = await client.admin("journal", limit=args.limit)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        _print_table(command, result, getattr(args, "after", None))
    return EXIT_OK


def _check_grants(args: argparse.Namespace) -> None:
    """The group's grant rule (mrs.ops.admin_actions.grant_problem: no right given
    needs `--none`), asked before the group is: a usage mistake, nothing sent."""
    from mrs.ops.admin_actions import grant_problem
    from mrs.ops.admin_terms import rendered

    grants = {kind: getattr(args, kind) for kind in GRANT_KINDS if getattr(args, kind)}
    problem = grant_problem(args.principal, {**grants, "none": args.none})
    if problem is not None:
        raise CommandError(f"admin: {rendered(problem, 'cli')}", EXIT_USAGE)


POSITIONAL = frozenset({"queue", "name", "principal"})
"""The text arguments given without an option name."""


def _check_text(args: argparse.Namespace) -> None:
    """Every text argument is text the group can be sent (UTF-8). Why: a byte the
    terminal's encoding does not hold (`--contains $'\\xff'`, a queue name pasted from
    a Latin-1 file) reached the encoder, and the operator read "cannot encode
    AdminRequest: UnicodeEncodeError: 'utf-8' codec can't encode character '\\udcff'
    ...: surrogates not allowed", exit 1."""
    for key, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if not isinstance(text, str):
                continue
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                name = key if key in POSITIONAL else "--" + key.replace("_", "-")
                given = os.fsencode(text)  # the bytes typed, not Python's escapes of them
                raise CommandError(
                    f"admin: {name} {given!r} is not UTF-8 text: type it again as text",
                    EXIT_USAGE,
                ) from None


def _check_queues(args: argparse.Namespace) -> None:
    """The queue (and move's --to) is a queue's shape: not empty, a group before its
    one dot and a queue after it. Why: `mrs admin browse .` was answered "no group
    named ''", `browse ''` "several groups: say which with --group" and `browse 1.`
    went to the group: none said what was wrong with the argument."""
    for name, text in (
        ("queue", getattr(args, "queue", None)),
        ("--to", getattr(args, "to", None)),
    ):
        if text is None:
            continue
        if (wrong := queue_shape_problem(text)) is not None:
            raise CommandError(f"admin: {name} {text!r} {wrong}: {QUEUE_FORMS}", EXIT_USAGE)


def _check_address(address: str | None) -> None:
    """Each HOST:PORT of --address (a replicated group's instances: several, comma
    separated), read as `mrs status --address` and the bus file read one. Why: a
    mistyped one was the client's refusal at connect, exit 1, where `mrs status`
    says the same mistake is one of usage, exit 2."""
    from mrs.config.addresses import parse_host_port

    if address is None:  # --config names it
        return
    for part in address.split(","):
        if isinstance(place := parse_host_port(part.strip(), port_min=1), str):
            raise CommandError(f"admin: --address: {place} (e.g. 127.0.0.1:7001)", EXIT_USAGE)


def _check_journal(args: argparse.Namespace) -> None:
    """`mrs admin journal`'s usage mistakes, before anything is read or asked. (A
    --limit below 1 is the parser's: lines[-0:] was every line of the file.)"""
    if args.offline and args.config is None:  # it asked a down server
        raise CommandError(
            "admin: journal --offline reads the data directory: give --config", EXIT_USAGE
        )
    if not args.offline and args.limit > ADMIN_LOG_RECORDS_MAX:  # else the group's exit 1
        raise CommandError(
            f"admin: journal: --limit must be 1..{ADMIN_LOG_RECORDS_MAX} (the lines a group "
            f"keeps; --offline reads its data directory's file, all of it), got {args.limit}",
            EXIT_USAGE,
        )


def correlation_hex(text: str) -> str:
    """argparse type of `--correlation-id`: hex digits of at most
    CORRELATION_ID_BYTES_MAX bytes, as the group compares them. Why: a longer one was
    sent and matched nothing (an empty page, as if no message had it), and an odd
    digit was answered "must be hex" by the group, exit 1, for what was hex."""
    try:
        value = bytes.fromhex(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be hex digits, two per byte (e.g. 0a1b), got {text!r}"
        ) from None
    if len(value) > CORRELATION_ID_BYTES_MAX:
        raise argparse.ArgumentTypeError(
            f"a correlation id is at most {CORRELATION_ID_BYTES_MAX} bytes "
            f"({2 * CORRELATION_ID_BYTES_MAX} hex digits), got {len(value)}"
        )
    return value.hex()


def _journal_offline(data_dir: Path, args: argparse.Namespace) -> int:
    """The admin journal read from its file, without the server (it may be down)."""
    from mrs.ops.admin_actions import JOURNAL_FILE_NAME
    from mrs.ops.admin_log import read_file

    path = data_dir / JOURNAL_FILE_NAME
    try:
        records, unreadable = read_file(path, args.limit)
    except OSError as error:
        raise CommandError(
            f"admin: journal: {path}: {error.strerror or error}", EXIT_RUNTIME
        ) from None
    result: dict[str, Any] = {"records": records}
    if unreadable:
        result["unreadable_lines"] = unreadable
        print(
            f"mrs: admin: journal: {path}: {unreadable} line(s) that are not JSON skipped "
            "(a line cut short by a crash or a full disk)",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        _print_table("journal", result)
    return EXIT_OK


def _select(args: argparse.Namespace) -> dict:
    """The selection options given, as the AdminRequest's `select` table."""
    chosen = (
        ("class", args.msg_class),
        ("type", args.msg_type),
        ("correlation_id", args.correlation_id),
        ("contains", args.contains),
    )
    return {key: value for key, value in chosen if value is not None}


async def _repeat(client: Any, action: str, args: dict) -> dict:
    """Ask again until nothing is left: each request takes at most
    ADMIN_MOVE_MESSAGES_MAX, so a crash loses no more than one request's progress
    (and that never half: each message is one transaction). A request refused or
    lost after others were done says what they did: before, a purge stopped by
    dlj_messages_max after 500 messages printed the refusal alone, and the operator
    read that nothing was purged.

    It stops once it has done as many as the queue held at the first answer (done
    then plus left then): what a producer puts meanwhile is not chased. Why: under a
    producer faster than one request's 500 a round trip, a purge never ended."""
    total: dict = {}
    asked: int | None = None
    while True:
        try:
            result = await client.admin(action, **args)
        except KeyboardInterrupt:
            _say_interrupted(action, total)
            raise
        except MrsError as error:
            if not total:
                raise
            line = (
                _lost_line(action, error)
                if isinstance(error, ConnectionLost)
                else f"admin: {_words(getattr(error, 'message', None) or str(error))}"
            )
            raise CommandError(
                f"{line}; done before that: {_summary(action, total)}", EXIT_RUNTIME
            ) from None
        for key, value in result.items():
            if isinstance(value, int) and key != "left":
                total[key] = total.get(key, 0) + value
            else:
                total[key] = value
        done = sum(v for k, v in result.items() if isinstance(v, int) and k != "left")
        if asked is None:
            asked = _taken(result) + result.get("left", 0)
        finished = _taken(total)
        if result.get("left", 0) == 0 or done == 0 or finished >= asked:
            return total


def _say_interrupted(action: str, total: dict) -> None:
    """Ctrl-C during a purge or move: what the answered requests did, and that the
    one under way may be done or not (each message is one transaction, so never
    half). Why: it ended with 130 and nothing said, and the operator could not tell
    how much of the queue had gone."""
    done = f"done before that: {_summary(action, total)}" if total else "nothing answered yet"
    print(
        f"mrs: admin: {action} interrupted; {done}; the request under way may be done or "
        "not (`mrs admin journal` says)",
        file=sys.stderr,
    )


_TAKEN_KEYS = ("dead_lettered", "discarded", "memory_discarded", "moved")
"""The counts of a purge's or a move's answer that are messages taken off the queue
(not `senders_told`, nor `left`)."""


def _taken(result: dict) -> int:
    return sum(result.get(key, 0) for key in _TAKEN_KEYS)


def _print_table(command: str, result: dict, after: int | None = None) -> None:
    from rich.table import Table

    from mrs.offline.scalars import format_time_ns
    from mrs.tools.console import ToolConsole

    # markup off: a body, a program name, a reason or a header name is shown as sent;
    # with rich's markup on, "[/x]" in one stopped the table ("closing tag ... doesn't
    # match") and "[red]" was taken as a style, its brackets not shown.
    console = ToolConsole(
        width=TABLE_COLUMNS, file=sys.stdout, soft_wrap=False, markup=False, highlight=False
    )
    if command == "browse":
        title = _browse_title(result, after)
        table = Table(title=title, title_justify="left")
        for column in ("seq", "age s", "dlv", "dup", "cls/typ", "body"):
            table.add_column(column, overflow="ellipsis", no_wrap=column != "body")
        for message in result["messages"]:
            table.add_row(
                str(message["seq"]),
                f"{message['age_s']:.1f}",
                str(message["deliveries"]),
                "POSSDUPL" if message["possdupl"] else "",
                f"{message['class']}/{message['type']}",
                _body_cell(message),
            )
        console.print(table)
        if result.get("next_after") is not None:  # a group of the release before: absent
            console.print(f"next page: --after {result['next_after']}")
    elif command == "connections":
        table = Table(title="connections", title_justify="left")
        for column, width in (
            ("peer", 21),
            ("who", 10),
            ("program", 14),
            ("queue", 8),
            ("unc", 3),
            ("fly", 3),
            ("age s", 5),
        ):
            table.add_column(column, overflow="ellipsis", no_wrap=True, max_width=width)
        for row in result["connections"]:
            table.add_row(
                row["peer"] + (" *" if row["self"] else ""),
                row["principal"] or "-",
                row["program"] or "-",
                row["queue_name"] or row["queue"] or ("link" if row["kind"] == "link" else "-"),
                str(row["unconfirmed"]),
                str(row["in_flight"]),
                f"{row['age_s']:.0f}",
            )
        console.print(table)
    elif command == "journal":
        table = Table(title="admin journal", title_justify="left")
        table.add_column("time", no_wrap=True)  # whole, to paste into a --since
        for column in ("who", "action", "what"):
            table.add_column(column, overflow="fold")
        for record in result["records"]:
            table.add_row(
                format_time_ns(record["time_ns"]),
                record["principal"] or "-",
                record["action"],
                _words(_short(record["args"], record["result"])),
            )
        console.print(table)
    else:
        console.print(_summary(command, result))


def _browse_title(result: dict, after: int | None) -> str:
    count = len(result["messages"])
    shown = f"first {count}" if after is None else f"{count} after seq {after}"
    if result.get("after_gone"):
        shown = f"first {count} (seq {after} has left the queue)"
    return (
        f"{result['name']} ({result['queue']}): {result['waiting']} waiting, "
        f"{result['unconfirmed']} unconfirmed; {shown}"
    )


def _body_cell(message: dict) -> str:
    headers = ", ".join(sorted(message["headers"]))
    return f"{message['preview']} ({message['size']} B{'; ' + headers if headers else ''})"


def _short(args: dict, result: dict) -> str:
    shown = {key: value for key, value in {**args, **result}.items() if value not in (None, [])}
    return " ".join(f"{key}={value}" for key, value in shown.items())


def _summary(command: str, result: dict) -> str:
    if command == "set-limits":
        was = result.get("was", {})
        limits = []
        for key in ("messages_max", "unconfirmed_max"):
            now, before = result[key], was.get(key, result[key])
            limits.append(f"{key}={now}" + (f" (was {before})" if before != now else ""))
        return f"{result['queue']}: {' '.join(limits)} (now and in the config file)"
    if command == "grant":
        shown = ", ".join(f"{k}={v}" for k, v in result.items() if k != "principal" and v)
        return f"grants of {result['principal']} replaced: {shown or 'none'}"
    if command == "add-queue":
        added = f"added {result['name']} ({result['queue']}) now and to the config file"
        if result.get("kept_messages"):
            added += f"; {result['kept_messages']} kept messages wait on it"
        return added
    if command == "reset-link":
        return (
            f"link with group {result['peer']} reset: journals {result['forgotten'] or 'none'} "
            f"forgotten, {result['dedupe_keys_deleted']} dedupe keys deleted; its next link "
            "records the journals it brings"
        )
    if command == "purge":
        return (
            f"purged {result['queue']}: {result['dead_lettered']} to the DLJ, "
            f"{result['discarded']} discarded, {result['memory_discarded']} memory "
            f"messages discarded; {result['left']} left"
            + (
                f"; {told} waiting senders told MSGUNDEL"
                if (told := result.get("senders_told"))
                else ""
            )
        )
    return (
        f"moved {result['moved']} from {result['queue']} to {result['to']}; {result['left']} left"
    )
