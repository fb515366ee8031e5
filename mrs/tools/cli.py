"""The `mrs` command: one entry point, one subcommand per job (DESIGN.md §4)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from mrs.exit_status import EXIT_USAGE, CommandError
from mrs.limits import DEMO_MESSAGES_MAX
from mrs.offline.journal_files import operator_path
from mrs.tools.cli_support import (
    OneLineParser,
    finish_parser,
    parse_arguments,
    positive_float,
    positive_int,
    run_guarded,
    run_stoppable,
)
from mrs.tools.tool_env import tool_environment

if TYPE_CHECKING:
    from mrs.config.bus import GroupConfig


def _serve(args: argparse.Namespace) -> int:
    import trio

    from mrs.config.bus import ConfigError, load_config
    from mrs.server.group_server import serve
    from mrs.server.harness import serve_options_from
    from mrs.testing.broken_builds import broken_build_from
    from mrs.transport.open_files import raise_open_files_limit

    bus = load_config(args.config)
    _check_ready_file(args.ready_file)
    if args.group not in bus.groups:
        raise ConfigError(  # the file as given, as every other config error names it
            args.config,
            "--group",
            f"no group {args.group} (groups: {', '.join(str(g) for g in bus.groups)})",
        )
    undialable = bus.undialable_link(args.group)  # a link of port 0: never up
    if undialable is not None:
        raise ConfigError(args.config, *undialable)
    # the one place the environment is read; a broken build (harness only) is
    # resolved here, above the server's layer, and handed to it as a part
    options = serve_options_from(os.environ, broken_build_from(os.environ))
    raise_open_files_limit()  # connections are descriptors (mrs.transport.open_files)
    group = bus.group(args.group)
    if group.instances:  # its active archives its PCJ (automatic or `mrs pcj archive`)
        # the archive's steps live above the server's layer: handed to it as a part
        from mrs.tools.journal.pcj_archive import archive_pcj

        options = replace(options, pcj_archiver=archive_pcj)
    if group.instances or args.instance is not None:
        _check_instance(args.config, group, args.instance)
        # before its replication port is bound: the same instance started twice
        # would be told "the port is in use: stop it", naming itself, serving
        _check_not_running(group.instance(args.instance).data_dir)
        from mrs.server.instance import serve_instance

        with _refusal_counts_logged():
            trio.run(serve_instance, bus, args.group, args.instance, options)
        return 0
    _check_not_running(group.data_dir)
    with _refusal_counts_logged():
        trio.run(serve, bus, args.group, args.ready_file, options)
    return 0


@contextlib.contextmanager
def _refusal_counts_logged() -> Iterator[None]:
    """Log the refusal counts the server's logs still hold back (mrs.core.refusals)
    as it stops, however it stops. Why: each was told only at its key's next line or
    REFUSAL_LOG_INTERVAL_S later, so a flood in the last seconds before a restart left
    one line and its count was lost."""
    from mrs.core.refusals import flush_all_at_stop

    try:
        yield
    finally:
        flush_all_at_stop()


def _check_ready_file(path: Path | None) -> None:
    """Refuse a --ready-file that cannot be written before the server starts: it was
    written after the start, so the server committed a new epoch, printed READY to a
    harness that then saw it exit 1."""
    if path is None:
        return
    folder = path.parent
    if path.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        why = "a directory" if path.is_dir() else f"{folder} is not a writable directory"
        raise CommandError(f"--ready-file {path}: cannot write a file there ({why})", EXIT_USAGE)


def _check_not_running(data_dir: Path) -> None:
    """Refuse a second `mrs serve` of a running group in the words of the data
    directory's lock (mrs.storage.datadir): "in use by another mrs serve (pid N)".
    Why before anything: the server binds its ports before it takes the lock, so a
    second start with a fixed `listen` said "the port is in use by another process;
    stop it or change listen", and the process to stop was the group itself, serving.
    Asked with a shared lock tried and dropped at once; nothing is created or written."""
    import fcntl

    from mrs.storage.datadir import LOCK_FILE_NAME, data_dir_in_use

    try:
        fd = os.open(Path(data_dir) / LOCK_FILE_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return  # none yet, or unreadable: the server's own checks say so
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:  # held: the running server's exclusive lock
        raise data_dir_in_use(Path(data_dir)) from None
    except OSError:
        return  # cannot tell: the server's own lock says why when it starts
    finally:
        os.close(fd)  # closing drops the shared lock if it was taken


def _check_instance(config: Path, group: GroupConfig, name: str | None) -> None:
    """A replicated group is served one instance at a time, by name (one line if not),
    the file named as given (`bus.toml: --instance: ...`), like every config error."""
    from mrs.config.bus import ConfigError

    names = ", ".join(i.name for i in group.instances)
    if not group.instances:
        raise ConfigError(config, "--instance", f"group {group.id} has no [[group.instance]]")
    if name is None or name not in {i.name for i in group.instances}:
        shown = "missing" if name is None else f"no instance {name!r}"
        raise ConfigError(
            config, "--instance", f"{shown}: group {group.id} is replicated ({names})"
        )


def _demo(args: argparse.Namespace) -> int:
    from mrs.tools.demo import run_demo

    kept = (
        f"the bus stays in {args.scratch}" if args.scratch else "its scratch directory is removed"
    )
    return run_stoppable(
        "mrs demo",
        lambda: run_demo(args.messages, args.scratch),
        lambda: f"every process it started is stopped; {kept}",
    )


def _bench(args: argparse.Namespace) -> int:
    from mrs.tools.bench import run_bench

    return run_stoppable(
        "mrs bench",
        lambda: run_bench(args),
        lambda: "its servers are stopped and their data directories removed",
    )


def _failover(args: argparse.Namespace) -> int:
    from mrs.tools.failover import run_failover

    return run_failover(args)


def _status(args: argparse.Namespace) -> int:
    from mrs.tools.bus_status import run_status

    return run_status(args)


def _web(args: argparse.Namespace) -> int:
    from mrs.tools.web import run_web

    return run_web(args)


def _pcj_archive(args: argparse.Namespace) -> int:
    from mrs.tools.journal.pcj_archive import run_pcj_archive

    return run_pcj_archive(args)


def _dump(args: argparse.Namespace) -> int:
    from mrs.tools.journal.dump import run_dump

    return run_dump(args)


def _jplay(args: argparse.Namespace) -> int:
    from mrs.tools.journal.jplay import run_jplay

    return run_jplay(args)


def _dlq_handler(args: argparse.Namespace) -> int:
    from mrs.dlq.command import run
    from mrs.server.harness import FAULT_FILE_ENV

    # the harness's fault file for its DLJ commits, as `mrs serve` takes it (read here:
    # the environment is read at the CLI edge only)
    args.fault_file = os.environ.get(FAULT_FILE_ENV) or None
    return run(args)


def _sim_swarm(args: argparse.Namespace) -> int:
    from sim.commands import run_swarm_command

    return run_swarm_command(args)


def _sim_run(args: argparse.Namespace) -> int:
    from sim.commands import run_scenario_command

    return run_scenario_command(args)


def _sim_replicated(args: argparse.Namespace) -> int:
    from sim.replicated_nemesis import run_replicated_command

    # no --scratch: the command makes a temporary directory once the arguments held
    return run_replicated_command(args.seconds, args.seed, args.scratch, args.figures)


SCENARIO_NAMES = ("crash-loop", "disk-full", "mixed", "partition-storm", "slow-consumer")


def _add_sim_parser(commands: argparse._SubParsersAction) -> None:
    sim = commands.add_parser("sim", help="fault-injection scenarios and the simulation swarm")
    kinds = sim.add_subparsers(dest="sim_command", required=True, metavar="KIND")
    swarm = kinds.add_parser("swarm", help="deterministic simulation over many seeds")
    swarm.add_argument(
        "--seeds", type=positive_int, default=None, help="how many seeds (200 if not given)"
    )
    swarm.add_argument("--first", type=int, default=None, help="first seed (0 if not given)")
    swarm.add_argument("--seed", type=int, default=None, help="run just this seed (replay)")
    swarm.add_argument("--unsafe", default="", help="broken-build switches (checker proof)")
    swarm.add_argument(
        "--workload",
        choices=("default", "quick", "map-full", "replication-proof"),
        default="default",
        help="what a seed does (quick: the broken-build proof; map-full: fill a journal map)",
    )
    swarm.add_argument(
        "--replicated",
        action="store_true",
        help="group 1 as three instances with failovers (docs/sim.md, the replicated group)",
    )
    swarm.add_argument(
        "--history",
        type=operator_path,
        default=None,
        help="write the history of --seed as JSON here",
    )
    swarm.set_defaults(run=_sim_swarm)
    run = kinds.add_parser("run", help="a scenario against real processes")
    run.add_argument("scenario", choices=SCENARIO_NAMES)
    run.add_argument(
        "--seconds", type=positive_float, default=60.0, help="length of the fault phase"
    )
    run.add_argument("--seed", type=int, default=1, help="seed of the fault schedule")
    run.add_argument(
        "--history", type=operator_path, default=None, help="write the history JSON here"
    )
    run.add_argument("--scratch", type=operator_path, default=None, help="keep the bus here")
    run.set_defaults(run=_sim_run)
    replicated = kinds.add_parser(
        "replicated", help="a replicated group (etcd, three instances) under real faults"
    )
    replicated.add_argument(
        "--seconds", type=positive_float, default=60.0, help="length of the faults"
    )
    replicated.add_argument("--seed", type=int, default=1, help="seed of the fault schedule")
    replicated.add_argument("--scratch", type=operator_path, default=None, help="keep the bus here")
    replicated.add_argument(
        "--figures", type=operator_path, default=None, help="write the figures here"
    )
    replicated.set_defaults(run=_sim_replicated)


def _demo_messages(text: str) -> int:
    """The demo keeps every order's id to check its delivery, and tells a story in
    minutes: a bound, with `mrs bench` named for a load."""
    value = positive_int(text)
    if value > DEMO_MESSAGES_MAX:
        raise argparse.ArgumentTypeError(
            f"at most {DEMO_MESSAGES_MAX:,} (got {value:,}); for load, use mrs bench"
        )
    return value


def _bench_body_bytes(text: str) -> int:
    """A body the bench's servers take (their message_bytes_max is the default): a
    larger one had every put refused, and the bench reported 0 puts/s and exit 0."""
    from mrs.config.schema import Limits

    most = Limits().message_bytes_max
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 0 <= value <= most:
        raise argparse.ArgumentTypeError(
            f"must be 0 to {most:,} (the servers' message_bytes_max), got {value:,}"
        )
    return value


def _add_demo_parser(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser(
        "demo",
        help="run a bus on an embedded config, crash it, and show that nothing stored is lost",
    )
    demo.add_argument(
        "--messages",
        type=_demo_messages,
        default=2000,
        help=f"recoverable messages to send (1 to {DEMO_MESSAGES_MAX:,})",
    )
    demo.add_argument(
        "--scratch",
        type=operator_path,
        default=None,
        help="scratch directory (default: a new temporary one)",
    )
    demo.set_defaults(run=_demo)


def _add_serve_parser(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="run one group's server")
    serve.add_argument(
        "--config", required=True, type=operator_path, help="bus configuration (TOML)"
    )
    serve.add_argument("--group", required=True, type=int, help="group id to run")
    serve.add_argument(
        "--ready-file", type=operator_path, default=None, help="write HOST:PORT here once listening"
    )
    serve.add_argument(
        "--instance", default=None, help="the instance of a replicated group to run (its name)"
    )
    serve.set_defaults(run=_serve)


def _add_bench_parser(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="durable throughput against the disk's fsync limit")
    bench.add_argument(
        "--seconds", type=positive_float, default=3.0, help="duration of each measurement"
    )
    bench.add_argument(
        "--body-bytes", type=_bench_body_bytes, default=1024, help="size of each message body"
    )
    bench.add_argument(
        "--clients",
        type=int,
        nargs="+",
        default=[1, 32],
        help="concurrent client counts to measure",
    )
    bench.add_argument(
        "--scratch",
        type=operator_path,
        default=None,
        help="directory on the disk to measure (default: ./.bench)",
    )
    bench.add_argument(
        "--skip-cross-group",
        action="store_true",
        help="leave out the runs that need a second group",
    )
    bench.set_defaults(run=_bench)


# Each subcommand's module is imported when its parser is added (COMMANDS, below).


def _add_status(commands: argparse._SubParsersAction) -> None:
    from mrs.tools.bus_status import add_status_parser

    add_status_parser(commands, run=_status)


def _add_web(commands: argparse._SubParsersAction) -> None:
    from mrs.tools.web import add_web_parser

    add_web_parser(commands, run=_web)


def _add_failover(commands: argparse._SubParsersAction) -> None:
    from mrs.tools.failover import add_failover_parser

    add_failover_parser(commands, run=_failover)


def _add_pcj(commands: argparse._SubParsersAction) -> None:
    from mrs.tools.journal.pcj_archive import add_pcj_parser

    add_pcj_parser(commands, run=_pcj_archive)


def _add_journal_tools(commands: argparse._SubParsersAction) -> None:
    from mrs.tools.journal.arguments import add_journal_tools

    add_journal_tools(commands, run_dump=_dump, run_jplay=_jplay)


def _add_journal_repair(commands: argparse._SubParsersAction) -> None:
    from mrs.tools.journal.repair import add_journal_repair

    add_journal_repair(commands)


def _add_dlq_handler(commands: argparse._SubParsersAction) -> None:
    from mrs.dlq.command import add_parser

    add_parser(commands, run=_dlq_handler)


def _add_audit(commands: argparse._SubParsersAction) -> None:
    from mrs.audit.command import add_parser

    add_parser(commands)


def _add_keys(commands: argparse._SubParsersAction) -> None:
    from mrs.tools.keys import add_keys_parser

    add_keys_parser(commands)


def _add_certs(commands: argparse._SubParsersAction) -> None:
    from mrs.tools.certs import add_certs_parser

    add_certs_parser(commands)


def _add_creds(commands: argparse._SubParsersAction) -> None:
    from mrs.tools.creds import add_parser

    add_parser(commands)


def _add_admin(commands: argparse._SubParsersAction) -> None:
    from mrs.tools.admin import add_admin_parser

    add_admin_parser(commands)


AddParser = Callable[[argparse._SubParsersAction], None]

COMMANDS: tuple[tuple[tuple[str, ...], AddParser], ...] = (
    (("serve",), _add_serve_parser),
    (("demo",), _add_demo_parser),
    (("bench",), _add_bench_parser),
    (("sim",), _add_sim_parser),
    (("status",), _add_status),
    (("web",), _add_web),
    (("failover",), _add_failover),
    (("pcj",), _add_pcj),
    (("dump", "jplay"), _add_journal_tools),
    (("journal",), _add_journal_repair),
    (("dlq-handler",), _add_dlq_handler),
    (("audit",), _add_audit),
    (("keys",), _add_keys),
    (("certs",), _add_certs),
    (("creds",), _add_creds),
    (("admin",), _add_admin),
)
"""Each subcommand's names and what adds its parser, in `mrs --help`'s order.

Why adders and not parsers: a subcommand's module imports what it runs (the
clients, the journals, Spark's glue, cryptography), and building every parser made
each command pay for every other's imports before it said anything (figures in
benchmarks/README.md, "The command line's imports"). A command line that names a
subcommand builds that one alone (`build_parser`)."""


class _VersionAction(argparse.Action):
    """`--version`: the version looked up when asked for. Why not argparse's own
    action: its string is made with the parser, and `mrs.__version__` imports
    importlib.metadata, in every `mrs serve` a test or an operator starts
    (benchmarks/README.md, "a test server's start-up")."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from mrs import __version__

        print(f"mrs {__version__}")  # to stdout, as argparse's own action
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `mrs` parser; with `command` (a subcommand's name), only that subcommand's.
    A name no subcommand has builds them all, so argparse's one line lists them."""
    parser = OneLineParser(prog="mrs", description="MRS: MessageQ-style message recovery service.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action=_VersionAction, help="show the version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    known = any(command in names for names, _add in COMMANDS)
    for names, add in COMMANDS:
        if not known or command in names:
            add(commands)
    return finish_parser(parser)


def _command_named(argv: list[str]) -> str | None:
    """The subcommand `argv` names: its first word that is no option (`mrs`'s own
    options, -v and --version, take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(_command_named(sys.argv[1:] if argv is None else argv))
    args = parse_arguments(parser, argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )

    def run() -> int:
        tool_environment(os.environ)
        return args.run(args)

    return run_guarded(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
