"""The console scripts' entry points (`mrs`, `dmqdump`, `dmqjplay`, `python -m mrs`).

Why a module of its own: importing `mrs.tools.cli` and the named subcommand's module
takes a few tenths of a second, and a Ctrl-C in that time reached the operator
as a KeyboardInterrupt traceback out of the import. This module imports nothing
until its guard is in place, so Ctrl-C at any moment ends the command with 130, the
shell's code for it, and no traceback.
"""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130
"""The shell's exit code for a command stopped by SIGINT (128 + 2)."""


def _run_guarded_from_import(argv: list[str] | None) -> int:
    try:
        from mrs.tools.cli import main as cli_main

        return cli_main(argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def main() -> int:
    """The `mrs` command."""
    return _run_guarded_from_import(None)


def dmqdump() -> int:
    """The `dmqdump` command: `mrs dump` under MessageQ's name."""
    return _run_guarded_from_import(["dump", *sys.argv[1:]])


def dmqjplay() -> int:
    """The `dmqjplay` command: `mrs jplay` under MessageQ's name."""
    return _run_guarded_from_import(["jplay", *sys.argv[1:]])
