"""`mrs status`: the whole bus (or one group) as a table, JSON for scripts, or live.

Why: an operator's first question is "is everything up, and is anything piling up?"
— across every group of the bus, not one group's JSON at a time. This asks each
group's server for its status concurrently (a group that does not answer is shown
DOWN with why, one that answered but refused us REFUSED with its reason; neither
stops the others), then shows groups, links (state, SAF
backlog, drain and why it waits), queues (depth, unconfirmed) and journal use.
Fields other engineers add to a group's status (e.g. DLQ handlers, draining clients,
a link's drain wait reason) are shown as they come, so the table never hides them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mrs.config.addresses import host_port
from mrs.config.instance_types import CoordinatorConfig
from mrs.offline.journal_files import group_id, operator_path
from mrs.security.tls import operator_connect_options
from mrs.tools.cli_support import (
    EXIT_RUNTIME,
    EXIT_USAGE,
    GROUP_ANSWER_S_MAX,
    GROUP_ANSWER_S_MIN,
    CommandError,
    seconds_in,
)
from mrs.tools.group_view import GroupView
from mrs.tools.status_render import render
from mrs.transport.dial_reason import dial_reason

CONNECT_TIMEOUT_S_DEFAULT = 3.0
WATCH_S_DEFAULT = 2.0
WATCH_S_MIN = 0.1
"""The shortest --watch: each refresh asks every group; less is a busy loop on them."""
WATCH_S_MAX = 86400.0
"""The longest --watch, a day: more (1e308) slept for good after one refresh."""
ADDRESS_WITH_GROUP = (
    "give --address HOST:PORT or --group N, not both: --address asks the server "
    "there, whatever group it is; --group picks a group of --config"
)
"""`mrs status` and `mrs admin` given both. Why: `mrs admin` ignored --group then (a
purge of --group 2's queue emptied the one of the group at --address), and `mrs
status` said "give --address (with --config to name it), or --group"."""
PIPED_WIDTH_DEFAULT = 160


def add_status_parser(commands: argparse._SubParsersAction, run) -> None:
    status = commands.add_parser(
        "status",
        help="the bus (or one group) as a table: groups, links, SAF backlog, queues, journals",
        description="Ask every group of the bus (--config), one group (--config --group) "
        "or one server (--address; with --config, named by the bus file: an instance of "
        "a replicated group that is a replica says so). Exit 0 when every group "
        "answered, 1 when one is down or the address is not the active, 2 for bad "
        "usage. See docs/operations.md.",
    )
    status.add_argument(
        "--config", type=operator_path, help="bus configuration (TOML): every group"
    )
    status.add_argument("--group", type=group_id, help="only this group of --config")
    status.add_argument(
        "--address",
        type=str.strip,  # pasted with a space, as `mrs admin --address` takes one
        help="HOST:PORT of one server (with --config: a group's or an instance's address)",
    )
    status.add_argument("--json", action="store_true", help="JSON for scripts instead of the table")
    status.add_argument(
        "--watch",
        type=seconds_in(WATCH_S_MIN, WATCH_S_MAX),
        nargs="?",
        const=WATCH_S_DEFAULT,
        default=None,
        metavar="SECONDS",
        help=f"refresh every SECONDS, {WATCH_S_MIN:g}..{WATCH_S_MAX:g} (default when given "
        f"alone: {WATCH_S_DEFAULT:g}) until Ctrl-C",
    )
    status.add_argument(
        "--times", type=int, default=None, help="with --watch: stop after this many refreshes"
    )
    status.add_argument(
        "--timeout",
        type=seconds_in(GROUP_ANSWER_S_MIN, GROUP_ANSWER_S_MAX),
        default=CONNECT_TIMEOUT_S_DEFAULT,
        help=f"seconds to wait for each group, {GROUP_ANSWER_S_MIN:g}..{GROUP_ANSWER_S_MAX:g}",
    )
    status.set_defaults(run=run)


def targets_from_args(args: argparse.Namespace) -> tuple[list[GroupView], Path | None]:
    """Which servers to ask; a usage mistake raises CommandError (exit 2)."""
    from mrs.config.addresses import parse_host_port
    from mrs.config.bus import load_config

    if args.address:
        if args.group is not None:
            raise CommandError(ADDRESS_WITH_GROUP, EXIT_USAGE)
        # Read as the bus file reads `listen` ('²' passed str.isdigit and broke int()).
        if isinstance(place := parse_host_port(args.address, port_min=1), str):
            raise CommandError(f"--address: {place} (e.g. 127.0.0.1:7001)", EXIT_USAGE)
        if args.config is None:
            return [GroupView(args.address)], None
        bus = load_config(args.config)
        return [_view_of_address(bus, args.address, place)], bus.path
    if args.config is None:
        raise CommandError(
            "give --config BUS.TOML (every group), --config with --group, or --address HOST:PORT",
            EXIT_USAGE,
        )
    bus = load_config(args.config)
    groups = list(bus.groups.values())
    if args.group is not None:
        if args.group not in bus.groups:
            known = ", ".join(str(g) for g in bus.groups)
            raise CommandError(f"no group {args.group} in {bus.path} (groups: {known})", EXIT_USAGE)
        groups = [bus.groups[args.group]]
    views = []
    for group in groups:
        if group.listen_port == 0 and not group.instances:  # instances listen on their own
            views.append(
                GroupView(
                    host_port(group.listen_host, 0),
                    group.id,
                    group.name,
                    error="listen port is 0 (chosen at start): use --address HOST:PORT",
                    links_configured=list(group.linked_group_ids),
                )
            )
            continue
        # a replicated group: its instances in turn (only the active answers)
        address = group.client_address
        views.append(
            GroupView(
                address,
                group.id,
                group.name,
                links_configured=list(group.linked_group_ids),
                connect_options=operator_connect_options(group),
                coordinator=bus.coordinator if group.instances else None,
                config_path=bus.path,
                instances={instance.name: instance.listen for instance in group.instances},
                ops_addresses=[] if group.instances else _ops_addresses(group),
            )
        )
    return views, bus.path


def _view_of_address(bus: Any, address: str, place: tuple[str, int]) -> GroupView:
    """The server of the bus file at `address` (a group's `listen`, an instance's
    `listen` or `replication`), asked alone with the file's TLS settings; a usage
    error when the file has none there. Why: an instance of a replicated group
    listens for clients only while it is the active, and asked by its address alone
    a replica read as a group down ("is it running?"); the file says what it is."""
    for group in bus.groups.values():
        options = operator_connect_options(group)
        if not group.instances and (group.listen_host, group.listen_port) == place:
            return GroupView(address, group.id, group.name, connect_options=options,
                             links_configured=list(group.linked_group_ids),
                             ops_addresses=_ops_addresses(group))  # fmt: skip
        for instance in group.instances:
            replication = (instance.replication_host, instance.replication_port)
            if place in ((instance.listen_host, instance.listen_port), replication):
                return GroupView(
                    instance.listen,
                    group.id,
                    group.name,
                    links_configured=list(group.linked_group_ids),
                    connect_options=options,
                    coordinator=bus.coordinator,
                    config_path=bus.path,
                    instance=instance.name,
                    instance_addresses={i.name: i.listen for i in group.instances},
                    replication_address=host_port(*replication),
                )
    raise CommandError(
        f"--address {address} is no group's listen and no instance's listen or "
        f"replication address in {bus.path}: give one of them, or --address alone",
        EXIT_USAGE,
    )


async def fetch_all(views: list[GroupView], timeout_s: float) -> None:
    """Fill in each view's status (or error), all groups at once."""
    import trio

    async with trio.open_nursery() as nursery:
        for view in views:
            if view.error is None:
                nursery.start_soon(_fetch_one, view, timeout_s)


async def _fetch_one(view: GroupView, timeout_s: float) -> None:
    import trio

    from clients import connect

    try:
        with trio.fail_after(timeout_s):
            address = await _leader_first(view, timeout_s)
            async with connect(
                address,
                queue=None,
                program="mrs status",
                connect_timeout_s=timeout_s / len(address.split(",")),
                reconnect=None,  # one look: no instance answering is shown, not waited for
                **view.connect_options,
            ) as client:
                view.status = await client.status()
    except trio.TooSlowError:
        view.error = f"no answer within {timeout_s:g} s"
    except Exception as error:  # noqa: BLE001 - one group's failure is shown, not raised
        view.error = down_reason(error)
        view.refused = refusal(error)
    if view.error is not None and view.refused is None and view.ops_addresses:
        view.recovering = await recovering_answer(view.ops_addresses, min(timeout_s, 1.0))
    coordinator, group_id = view.coordinator, view.group
    if view.error is None or view.refused is not None or not coordinator or group_id is None:
        return
    if view.instance is not None:
        view.not_active = await not_active_line(view, coordinator, group_id, timeout_s)
        return
    note = await leadership_note(coordinator, group_id, timeout_s, view.config_path)
    view.error += f"; {note}"


async def not_active_line(
    view: GroupView, coordinator: CoordinatorConfig, group_id: int, timeout_s: float
) -> str:
    """What the instance `view` names is, when its client address did not answer: a
    replica (its replication port takes a connection: it runs), not running (neither
    port does), or the active etcd names that clients cannot reach; with where the
    active is. A connection to the replication port that says nothing is closed
    by the replica without a log line (mrs.replication.replica `_handle`). A client
    address that takes the connection and does not answer is a process there that
    hangs: before, a paused old active (its replication port closed, as an active's
    is) was told "not running (nothing listens ...)", start it, and the start is
    refused by the data directory's lock while the hung process holds it."""
    name, address = view.instance, view.replication_address
    runs = await _takes_connections(address, min(timeout_s, 1.0))
    state = await _etcd_state(coordinator, group_id, timeout_s / 2)
    what = f"{view.address} is instance {name} of replicated group {group_id} ({view.name})"
    if isinstance(state, str):
        unknown = "which instance is active is unknown"
        active = etcd_silence(state, coordinator, view.config_path, unknown)
    elif state.leader is None:
        active = _no_leader(state)
    elif state.leader == name:
        return (
            f"{what}, which etcd names active in term {state.term}, and its client address "
            f"does not answer ({view.error}): it is starting, or clients cannot reach it"
        )
    else:
        at = view.instance_addresses.get(state.leader, "?")
        active = f"etcd names {state.leader} active in term {state.term}, at {at}"
    if runs:
        return (
            f"{what}: a replica (it runs, and only the active takes clients); {active}; "
            f"the group's status: `mrs status --config BUS.TOML --group {group_id}`"
        )
    if await _takes_connections(view.address, min(timeout_s, 1.0)):
        return (
            f"{what}: a process takes connections at its client address and does not "
            f"answer ({view.error}): a paused or hung process (SIGSTOP, a frozen VM), an "
            f"old active that has not stepped down yet, or another program on that port; "
            f"{active}; see which process holds the port (`ss -ltnp`) before starting "
            "the instance"
        )
    return (
        f"{what}: not running (nothing listens on its client address {view.address} or "
        f"its replication address {address}); {active}; start it with `mrs serve "
        f"--config BUS.TOML --group {group_id} --instance {name}`"
    )


async def _takes_connections(address: str, timeout_s: float) -> bool:
    """Whether a TCP connection to HOST:PORT `address` is taken within `timeout_s`
    (closed at once, nothing said)."""
    import trio

    with trio.move_on_after(timeout_s):
        try:
            host, port = address.rsplit(":", 1)
            await (await trio.open_tcp_stream(host.strip("[]"), int(port))).aclose()
            return True
        except (OSError, ValueError):
            return False
    return False


def _ops_addresses(group: Any) -> list[tuple[str, int]]:
    """Where to reach a group's metrics and web endpoints from here (a wildcard host
    by loopback)."""
    ops = group.ops
    found = []
    for host, port in ((ops.metrics_host, ops.metrics_port), (ops.web_host, ops.web_port)):
        if port:
            wildcard = host in (None, "", "0.0.0.0", "::")
            found.append(("127.0.0.1" if wildcard else str(host), port))
    return found


async def recovering_answer(addresses: list[tuple[str, int]], timeout_s: float) -> str | None:
    """The line a group's ops endpoint answers while the group recovers its journals
    (mrs.ops.recovering), or None. Why: its client port holds a connection unanswered
    until recovery ends, and "no answer within 3 s" read as a group that hangs."""
    import trio

    from mrs.ops.recovering import RECOVERING_WORD

    for host, port in addresses:
        data = b""
        with trio.move_on_after(timeout_s):
            try:
                async with await trio.open_tcp_stream(host, port) as stream:
                    await stream.send_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
                    while len(data) < 4096 and (chunk := await stream.receive_some(4096)):
                        data += chunk
            except OSError:
                continue
        head, _, body = data.partition(b"\r\n\r\n")
        if head.startswith(b"HTTP/1.1 503") and body.startswith(RECOVERING_WORD.encode()):
            return " ".join(body.decode(errors="replace").split())
    return None


async def _leader_first(view: GroupView, timeout_s: float) -> str:
    """The addresses to try: a replicated group's instance etcd names active first,
    then the others in the config's order, each with its share of the time. Why: a
    paused instance takes the connection and never answers, and one listed first
    took the whole time, so a group a replica had taken over showed DOWN."""
    coordinator, group_id = view.coordinator, view.group
    if coordinator is None or group_id is None or not view.instances:
        return view.address
    state = await _etcd_state(coordinator, group_id, timeout_s / 4)
    leader = None if isinstance(state, str) else state.leader  # unanswered: config's order
    if leader not in view.instances:
        return view.address
    rest = [address for name, address in view.instances.items() if name != leader]
    return ",".join([view.instances[leader], *rest])


async def _etcd_state(coordinator: CoordinatorConfig, group_id: int, timeout_s: float) -> Any:
    """What etcd holds for the group (a GroupState), or why it did not say within
    `timeout_s` (a str)."""
    import trio

    from mrs.replication.coordinator import CoordinatorUnavailable, EtcdCoordinator, etcd_prefix
    from mrs.replication.etcd import ETCD_UNREACHABLE, EtcdClient

    key = etcd_prefix(coordinator.prefix, group_id)
    reader = EtcdCoordinator(EtcdClient(coordinator.etcd), key, "mrs-status", 0)
    try:
        with trio.fail_after(timeout_s):
            return await reader.read()
    except CoordinatorUnavailable as error:
        return str(error)
    except trio.TooSlowError:  # said as a silent endpoint is (etcd_silence)
        return f"{ETCD_UNREACHABLE}no answer within {timeout_s:g} s"
    finally:
        await reader.aclose()


def etcd_silence(reason: str, coordinator: CoordinatorConfig, config_path: Any, done: str) -> str:
    """The line for an etcd `_etcd_state` could not read (`reason`), with what that
    means for the group (`done`). Why: `mrs status` and `mrs admin` showed the etcd
    client's words, `etcd does not answer either (etcd unreachable: http://...:
    cannot connect)`, where `mrs failover` and `mrs serve --instance` name the
    endpoints and the config key to check (silent_etcd_line): one wording for all."""
    from mrs.replication.etcd import silent_etcd_line

    where = ", ".join(coordinator.etcd)
    line = silent_etcd_line(reason, coordinator.etcd, config_path or "the bus file", done)
    return line or f"etcd at {where} answered with an error ({reason}); {done}"


async def leadership_note(
    coordinator: CoordinatorConfig, group_id: int, timeout_s: float, config_path: Any
) -> str:
    """What etcd says of a replicated group no instance of which answered: whether an
    instance holds the lease (starting, or cut off from clients), none does (a
    failover under way, or the in-sync instances down), or etcd does not answer
    either (no instance can become active until it does; `config_path`, the bus
    file, is named with the key to check)."""
    state = await _etcd_state(coordinator, group_id, timeout_s)
    if isinstance(state, str):
        done = "no instance can become active until it does"
        return etcd_silence(state, coordinator, config_path, done)
    if state.leader is not None:
        return (
            f"etcd names {state.leader} active in term {state.term}: it is starting, "
            "clients cannot reach it, or it was lost and its lease (lease_ttl_s) has not "
            "run out yet (a failover follows)"
        )
    return _no_leader(state)


def _no_leader(state: Any) -> str:
    """etcd's word on a group none of whose instances holds the lease. Why one text:
    asked by an instance's address it said "a failover is under way" alone, while the
    group waited for ever for its only in-sync instance to be started again."""
    in_sync = ", ".join(state.in_sync or ()) or "none recorded"
    return (
        f"etcd names no active instance (term {state.term}, in sync: {in_sync}): a failover "
        "is under way, or the in-sync instances are down (start them: `mrs serve "
        "--instance NAME`)"
    )


def refusal(error: BaseException) -> str | None:
    """Why the group refused us, when the failure is an answer from it: it is up, and
    starting it again would not help. None when nothing answered (down, unreachable,
    silent)."""
    from clients import ConnectionLost, MrsError, ReplyTimeout, TlsRefused

    if foreign_reason(error) is not None:  # not a group at all: nothing refused us
        return None
    for inner in _chain(error):
        if isinstance(inner, TlsRefused):
            return " ".join(inner.message.split())
        if isinstance(inner, MrsError) and not isinstance(inner, ConnectionLost | ReplyTimeout):
            name = inner.status.name if hasattr(inner.status, "name") else str(inner.status)
            text = " ".join(inner.message.split()).removeprefix("server closed the connection: ")
            return f"{name}: {text}"
    return None


def _chain(error: BaseException) -> list[BaseException]:
    """The error, the groups it holds and its causes, outermost first, each once."""
    seen: list[BaseException] = []
    stack = [error]
    while stack:
        current = stack.pop(0)
        if any(current is known for known in seen):
            continue
        seen.append(current)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return seen


def refusal_advice(reason: str) -> str:
    """What to do about a refusal, in the operator's words."""
    if "does not speak TLS" in reason:  # TLS to a group without [group.tls]
        return (
            "the group there has no [group.tls]: reach it without TLS (unset MRS_TLS_CA, "
            "MRS_TLS_CERT and MRS_TLS_KEY, or correct its [group.tls] in the config)"
        )
    if "TLS" in reason or "certificate" in reason or "handshake" in reason:
        return (
            "run it where the group's certificates are (--config), or set MRS_TLS_CA "
            "(and MRS_TLS_CERT, MRS_TLS_KEY) (docs/security.md)"
        )
    if reason.startswith("NOTAUTHORIZED"):
        return (
            "set MRS_AUTH_NAME and MRS_AUTH_PASSWORD_FILE to a principal with the "
            "'status' right (docs/security-auth.md)"
        )
    return "see the group's log"


NOT_MRS = "something listens there but does not speak MRS"
"""How a down reason starts when the address holds another program (`foreign_reason`)."""


def foreign_reason(error: BaseException) -> str | None:
    """Why the address is not an MRS group's, when what answered broke the protocol
    from its first bytes (an HTTP server such as a group's own metrics_listen or
    web_listen, an SSH banner), else None.

    Why: the client reads another program's first bytes as a frame length and fails
    on it (PROTOCOL_ERROR, "frame of 1213486160 bytes", which is b"HTTP"), and that
    error used to be shown as the group's answer: "is up but REFUSED the status
    request ... see the group's log", for an address where no group listens."""
    from mrs.protocol.errors import FrameRefused

    for inner in _chain(error):
        if not isinstance(inner, FrameRefused) or inner.named:
            continue  # a frame MRS reads, or a protocol its message names already
        head = inner.head
        if any(head) and all(32 <= byte < 127 for byte in head):
            http = " (an HTTP server: a group's metrics_listen or web_listen?)"
            kind = http if head == b"HTTP" else ""
            return f"{NOT_MRS}: it answered {head.decode()!r}...{kind}"
        return f"{NOT_MRS} ({' '.join(str(inner.message).split())})"
    return None


def down_reason(error: BaseException) -> str:
    """Why a group did not answer, in words: the OS error's meaning, not the text of
    the exception that carried it (which quotes the address as a Python tuple)."""
    if (foreign := foreign_reason(error)) is not None:
        return foreign
    if (reason := dial_reason(error)) is not None:
        return reason
    if any(getattr(inner, "closed_unanswered", False) for inner in _chain(error)):
        return "it took the connection and closed it without answering"  # not the chain's text
    return root_cause(error)


def root_cause(error: BaseException) -> str:
    """The innermost OS error's text (e.g. "Connection refused"), else the error's."""
    seen: list[BaseException] = []
    stack = [error]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.append(current)
        if isinstance(current, OSError) and current.strerror:
            return current.strerror
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)
    return " ".join(str(error).split()) or type(error).__name__


def run_status(args: argparse.Namespace) -> int:
    import trio

    if args.times is not None and args.watch is None:
        raise CommandError(
            "--times counts the refreshes of --watch: give --watch too, e.g. --watch 2 --times 5",
            EXIT_USAGE,
        )
    if args.times is not None and args.times < 1:
        raise CommandError(f"--times must be 1 or more, got {args.times}", EXIT_USAGE)
    views, bus_path = targets_from_args(args)
    single = args.address is not None or args.group is not None

    def once(watching: bool = False) -> int:
        """One look at every group; the exit status it deserves. Asked for one group,
        an unanswered look raises its one line, except under --watch (`watching`):
        there it is that refresh's line on stderr and the watch goes on, so a group
        restarting is seen coming back instead of ending the watch."""
        for view in views:
            view.status = None
            view.refused = None
            if not view.error or "listen port is 0" not in view.error:
                view.error = None
        trio.run(fetch_all, views, args.timeout)
        down = [view for view in views if not view.up]
        if single and down:
            error = _single_down(down[0])
            if not watching or down[0].address.endswith(":0"):  # it can never answer
                raise error
            print(f"mrs: {error}", file=sys.stderr, flush=True)
        return EXIT_RUNTIME if down else 0

    if args.watch is None:
        code = once()
        if args.json:
            print(json.dumps(bus_json(views, bus_path, single), indent=2))
        else:
            _console().print(render(views, bus_path))
        return code
    return _watch(args, views, bus_path, single, once)


def _single_down(view: GroupView) -> CommandError:
    """The one line for the one group asked that did not answer, or refused us."""
    if view.recovering is not None:
        return CommandError(
            f"group at {view.address} is RECOVERING ({view.recovering}); its clients "
            "wait until then: ask again shortly",
            EXIT_RUNTIME,
        )
    if view.refused is not None:
        return CommandError(
            f"group at {view.address} is up but REFUSED the status request "
            f"({view.refused}): {refusal_advice(view.refused)}",
            EXIT_RUNTIME,
        )
    if view.not_active is not None:
        return CommandError(view.not_active, EXIT_RUNTIME)
    if (view.error or "").startswith(NOT_MRS):
        return CommandError(
            f"no group at {view.address}: {view.error}; check the address (a group's "
            "`listen`, or an instance's)",
            EXIT_RUNTIME,
        )
    replica = ""
    if view.group is None:  # asked by its address alone: it may be an instance's
        replica = (
            "; an instance of a replicated group listens for clients only while it is "
            f"the active: `mrs status --config BUS.TOML --address {view.address}` says "
            "what it is"
        )
    return CommandError(
        f"group at {view.address} did not answer ({view.error}); "
        f"is it running? (start it with `mrs serve`){replica}",
        EXIT_RUNTIME,
    )


def _watch(args, views, bus_path, single, once) -> int:
    """Refresh until Ctrl-C or --times; the exit status of the last refresh. With one
    group asked, a refresh it does not answer is one line on stderr (and, with
    --json, no line on stdout: every stdout line is a status) and the watch goes on."""
    import trio

    if args.watch <= 0:
        raise CommandError("--watch SECONDS must be > 0", EXIT_USAGE)
    code = 0
    refreshes = 0
    console = _console()
    try:
        if args.json:
            while args.times is None or refreshes < args.times:
                code = once(True)
                if not single or views[0].up:
                    print(json.dumps(bus_json(views, bus_path, single)), flush=True)
                refreshes += 1
                if args.times is None or refreshes < args.times:
                    trio.run(trio.sleep, args.watch)
            return code
        if not console.is_terminal:  # a pipe or a file: one table after the other
            while args.times is None or refreshes < args.times:
                code = once(True)
                console.print(render(views, bus_path))
                console.print(f"-- {time.strftime('%H:%M:%S')}, next in {args.watch:g} s --")
                console.file.flush()
                refreshes += 1
                if args.times is None or refreshes < args.times:
                    trio.run(trio.sleep, args.watch)
            return code
        from rich.live import Live

        with Live(console=console, auto_refresh=False, screen=False) as live:
            while args.times is None or refreshes < args.times:
                code = once(True)
                live.update(render(views, bus_path), refresh=True)
                refreshes += 1
                if args.times is None or refreshes < args.times:
                    trio.run(trio.sleep, args.watch)
    except KeyboardInterrupt:
        return code
    return code


def _console():
    """The terminal's width; piped, COLUMNS when set, else wide enough that a log or a
    `grep` keeps each row on one line."""
    from mrs.tools.console import ToolConsole

    piped_wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return ToolConsole(width=PIPED_WIDTH_DEFAULT if piped_wide else None)


def bus_json(views: list[GroupView], bus_path: Path | None, single: bool) -> dict:
    if single:
        return views[0].status or {}
    return {
        "bus": str(bus_path) if bus_path else None,
        "time_s": round(time.time(), 3),
        "groups": [view.as_dict() for view in views],
    }
