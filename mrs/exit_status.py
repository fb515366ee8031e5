"""One-line operator errors and the exit statuses they end with.

Why a module of its own, outside mrs/tools: the server's start-up checks
(mrs/server/startup.py) raise the same `CommandError` the command-line tools do, and the
server must not import the tools. The tools re-export these names from
mrs/tools/cli_support.py, where every subcommand looks for them.
"""

from __future__ import annotations

from mrs.errors import OperatorError

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2


class CommandError(OperatorError):
    """An operator-facing failure: `str()` is the one line to print, `exit_code` the
    status (EXIT_USAGE for a usage or config mistake, EXIT_RUNTIME otherwise)."""

    def __init__(self, message: str, exit_code: int = EXIT_RUNTIME) -> None:
        super().__init__(" ".join(message.split()))
        self.exit_code = exit_code
        self.args = (message, exit_code)
