"""The rich Console every command prints its stdout through.

Here, not in `mrs.tools.cli_support`: rich is imported only by the commands that
print with it, not by every `mrs` start (`mrs serve` among them).
"""

from __future__ import annotations

from rich.console import Console


class ToolConsole(Console):
    """The rich Console for a command's stdout, which lets a reader go away (`mrs dump
    | head`, a pager quit).

    Why: rich answers a broken pipe with SystemExit(1) after pointing stdout at
    /dev/null, so `run_guarded` can no longer see the reader gone, and exit status 1
    says that the command failed (for `mrs dump`, that corrupt records were found). A
    BrokenPipeError instead reaches `run_guarded`, which ends the command quietly with
    status 0, as a command that prints without rich does."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError
