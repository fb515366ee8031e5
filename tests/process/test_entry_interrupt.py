"""Ctrl-C while `mrs` is still importing its subcommands ends it quietly with 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def test_ctrl_c_while_the_command_imports_is_exit_130_without_a_traceback() -> None:
    """An operator who presses Ctrl-C right after Enter used to get a KeyboardInterrupt
    traceback out of the import of the command tree (about 0.3 s). The import is
    watched through Python's own import log (PYTHONPROFILEIMPORTTIME: a module's line
    comes once it is imported), and SIGINT sent once the command line's support
    module is in, the named subcommand's module and its imports still to come."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mrs", "status", "127.0.0.1:1"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if "mrs.tools.cli_support" in line:  # the command's import under way: the window
            process.send_signal(signal.SIGINT)
            break
    rest = process.stderr.read()
    assert process.wait(timeout=30) == 130, "".join(seen) + rest
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest
