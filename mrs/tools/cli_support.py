"""How every `mrs` subcommand talks to an operator: one-line errors, exit codes, help.

Why a module of its own: a mistake at the command line (a missing option, a config
typo, a server that is down, a port in use) is the first thing a new operator meets,
and a 50-line traceback hides the one fact they need. Every error therefore ends as
one line on stderr saying what is wrong and what to do, with exit status 2 for usage
and configuration mistakes and 1 for runtime failures; `-v` (before or after the
subcommand) adds the traceback of unexpected errors for a bug report. The parser
tweaks live here so `mrs/tools/cli.py` stays a flat list of subcommands others can add to.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import os
import select
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from mrs.exit_status import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, CommandError

__all__ = ["EXIT_OK", "EXIT_RUNTIME", "EXIT_USAGE", "CommandError"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line naming the command and its --help."""

    given: tuple[str, ...] = ()
    """The command line being parsed (`parse_arguments` sets it)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.startswith("the following arguments are required"):
            message += _misspelt_options(self, OneLineParser.given)
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _misspelt_options(parser: argparse.ArgumentParser, given: tuple[str, ...]) -> str:
    """A hint, `(--confg is not an option: did you mean --config?)`, for each `--word`
    given that `parser` does not know. Why: argparse reports a required option missing
    before it reports an unknown one, so `mrs serve --confg bus.toml --group 1` said
    only "required: --config", naming an option the operator believed they gave."""
    known = [option for action in parser._actions for option in action.option_strings]
    long_options = [option for option in known if option.startswith("--")]
    hints = []
    for token in given:
        if token == "--":
            break
        name = token.split("=", 1)[0]
        if not name.startswith("--") or any(o.startswith(name) for o in long_options):
            continue  # a value, or an option (argparse takes a unique prefix)
        close = difflib.get_close_matches(name, long_options, n=1)
        meant = f": did you mean {close[0]}?" if close else ""
        hints.append(f"{name} is not an option{meant}")
    return f" ({'; '.join(hints)})" if hints else ""


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Shows each option's default after its help, unless the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text.lower()
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or default in ([], (), "")
            or not action.option_strings
        ):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, list | tuple) else default
        return f"{text} (default: {shown})"


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1 (a count of seeds or messages: zero
    or fewer would run a vacuous check and report it passed)."""
    return _whole_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: a whole number of at least 0 (a count where none means "none")."""
    return _whole_at_least(text, 0)


def int64(text: str) -> int:
    """argparse type: a whole number the wire carries (signed 64 bits). Why: a larger
    one was refused by the frame encoder in its own words ("AdminRequest.args holds
    an int out of msgpack range"); what a value means is the server's to check."""
    value = _whole(text, "")
    if not -(1 << 63) <= value < 1 << 63:
        raise argparse.ArgumentTypeError(f"must be a whole number below 2**63, got {text}")
    return value


def whole_in(least: int, most: int, meaning: str = "") -> Callable[[str], int]:
    """argparse type: a whole number `least`..`most`, refused naming the range and
    what it is (`meaning`, e.g. " (a message's seq)"). Why: `mrs admin browse
    --limit -3` or `--after -5` went to the group, which answered exit 1 after a
    connection (the group down: "cannot connect", not the mistake); a usage mistake
    is the parser's, exit 2, before anything is asked."""

    def parse(text: str) -> int:
        rule = f" {least}..{most}{meaning}"
        value = _whole(text, rule)
        if not least <= value <= most:
            raise argparse.ArgumentTypeError(f"must be a whole number{rule}, got {text}")
        return value

    return parse


def _whole(text: str, rule: str) -> int:
    """`text` as a whole number, or argparse's refusal saying the `rule` it must keep."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number{rule}, got {text!r}") from None


def _whole_at_least(text: str, least: int) -> int:
    value = _whole(text, f" >= {least}")
    if value < least:
        raise argparse.ArgumentTypeError(f"must be a whole number >= {least}, got {value}")
    return value


def seconds_in(least: float, most: float) -> Callable[[str], float]:
    """argparse type: a number of seconds `least`..`most`, refused naming the range.
    Why: `mrs status --watch 1e308` was taken and slept for good after one refresh
    (saying `next in 1e+308 s`), and `--watch 1e-9` asked every group in a busy loop;
    a usage mistake is the parser's, exit 2."""

    def parse(text: str) -> float:
        rule = f"must be a number of seconds {least:g}..{most:g}"
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{rule}, got {text!r}") from None
        if not least <= value <= most:  # nan too: every comparison with it is False
            raise argparse.ArgumentTypeError(f"{rule}, got {text}")
        return value

    return parse


def positive_float(text: str) -> float:
    """argparse type: a number above 0 (a length in seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


GROUP_ANSWER_S_MIN = 0.01
"""The shortest `--timeout` of `mrs status` and `mrs web`: less (1e-300) showed every
serving group DOWN, as 0 did."""
GROUP_ANSWER_S_MAX = 600.0
"""The longest `--timeout` of `mrs status` and `mrs web`, ten minutes: a group that has
not answered its status by then is down for the operator; more (1e308) waited for
good on a group that accepted the connection and never answered (`seconds_in`)."""


def parse_arguments(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`parser.parse_args`, but arguments no parser took are reported by the subcommand
    that was given them (`mrs admin journal: unrecognized arguments: dqf (see mrs admin
    journal --help)`), not by `mrs`, whose help does not list them."""
    OneLineParser.given = tuple(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        chosen = parser
        for token in sys.argv[1:] if argv is None else argv:
            sub = _subcommand(chosen, token)
            if sub is not None:
                chosen = sub
        chosen.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]
    return None


def subparsers_of(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser below `parser` (subcommands, and their subcommands), once each."""
    seen: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
                yield sub
                yield from subparsers_of(sub)


def finish_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """After every subcommand is added: show defaults in each --help, accept -v after
    the subcommand too, and make each usage error one line."""
    for sub in [parser, *subparsers_of(parser)]:
        sub.formatter_class = DefaultsHelpFormatter
        if sub is parser:
            continue
        taken = {option for action in sub._actions for option in action.option_strings}
        if "-v" not in taken and "--verbose" not in taken:
            sub.add_argument(
                "-v",
                "--verbose",
                action="store_true",
                default=argparse.SUPPRESS,
                help="debug logging, and a traceback for unexpected errors",
            )
    return parser


def walk_errors(error: BaseException) -> Iterator[BaseException]:
    """`error` and, for an exception group (trio nurseries), every error inside it."""
    yield error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from walk_errors(inner)
    elif error.__cause__ is not None:
        yield from walk_errors(error.__cause__)


def one_line(error: BaseException) -> tuple[str, int] | None:
    """The one line and exit code an error deserves, or None for an unexpected error
    (a bug: shown as one line too, with the traceback under -v)."""
    from mrs.config.bus import ConfigError
    from mrs.security.creds import CredsError
    from mrs.storage.datadir import DataDirError

    errors = list(walk_errors(error))
    for inner in errors:
        if isinstance(inner, ConfigError):
            return f"config error: {inner}", EXIT_USAGE
    for inner in errors:
        if isinstance(inner, CommandError):
            return str(inner), inner.exit_code
    for inner in errors:
        if isinstance(inner, CredsError):
            # The file or the name given must change, as `mrs serve` says of the same
            # file (exit 2): `mrs creds grant group:1` exited 1 where `rotate group:1`
            # exited 2, an empty --password-file 1 where an empty stdin gave 2.
            return str(inner), EXIT_USAGE
        if isinstance(inner, DataDirError):
            return str(inner), EXIT_RUNTIME
    for inner in errors:
        if isinstance(inner, OSError) and inner.errno is not None:
            where = f"{inner.filename}: " if inner.filename else ""
            problem = inner.strerror or errno.errorcode.get(inner.errno, str(inner.errno))
            return f"{where}{problem}", EXIT_RUNTIME
    return None


def _stdout_closed() -> bool:
    """Whether stdout's reader went away (`| head`, a pager quit): its pipe polls as
    an error once no reader holds it. If so, stdout is pointed at /dev/null, so the
    interpreter's last flush does not complain too."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        closed = any(events & select.POLLERR for _, events in poller.poll(0))
        if closed:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
    except (OSError, ValueError):  # no real stdout (a test's capture)
        return False
    return closed


def run_guarded(run: Callable[[], int], *, prog: str = "mrs", verbose: bool = False) -> int:
    """Run a subcommand; turn whatever it raises into one line on stderr and an exit
    code (130 for Ctrl-C)."""
    try:
        code = run()
        sys.stdout.flush()  # here, not at exit: a reader gone is then seen below
        return code
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise
    except BaseException as error:  # noqa: BLE001 - the last line of defence
        if any(isinstance(inner, KeyboardInterrupt) for inner in walk_errors(error)):
            return 130
        pipe = any(isinstance(inner, BrokenPipeError) for inner in walk_errors(error))
        if pipe and _stdout_closed():
            return EXIT_OK  # `mrs dump ... | head`: the reader had enough, quietly
        known = one_line(error)
        if known is not None:
            message, code = known
            print(f"{prog}: {message}", file=sys.stderr)
            return code
        if verbose:
            import traceback

            traceback.print_exception(error)
        # the error itself, not the trio nursery's group that carried it
        leaf = next(e for e in walk_errors(error) if not isinstance(e, BaseExceptionGroup))
        detail = f"{type(leaf).__name__}: {' '.join(str(leaf).split())}"
        hint = "" if verbose else " (run with -v for the traceback)"
        print(f"{prog}: unexpected error: {detail[:300]}{hint}", file=sys.stderr)
        return EXIT_RUNTIME


def run_stoppable(prog: str, run: Callable[[], int], stopped: Callable[[], str]) -> int:
    """`run()` under `stop_signals_as_ctrl_c`; a stop by Ctrl-C, SIGTERM or SIGHUP is
    one line naming the signal and what `stopped()` says is left (the processes
    stopped, the directory kept or removed), and the shell's code for that signal
    (128 + its number: 130 for Ctrl-C), not a traceback or a silent 130."""
    from mrs.offline.stop_signals import stop_signals_as_ctrl_c

    with stop_signals_as_ctrl_c() as caught:
        try:
            return run()
        except KeyboardInterrupt:
            pass
        except BaseExceptionGroup as group:  # from a trio nursery
            if group.subgroup(KeyboardInterrupt) is None:
                raise
    signum = caught[0] if caught else signal.SIGINT
    print(f"{prog}: interrupted by {signum.name}; {stopped()}", file=sys.stderr, flush=True)
    return 128 + int(signum)


def made_scratch(path: Path) -> bool:
    """Make a `--scratch` directory (its parents too); True if it was not there. A path
    that cannot be a directory is a usage line naming the option: it was "mrs:
    /etc/passwd/x: Not a directory" or "mrs: /srv/bench.txt: File exists", exit 1,
    which named no option (`mrs demo`, `mrs bench`)."""
    if path.exists() and not path.is_dir():
        raise CommandError(f"--scratch {path}: not a directory", EXIT_USAGE)
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CommandError(
            f"--scratch {path}: cannot make it: {error.strerror or error}", EXIT_USAGE
        ) from None
    return created
