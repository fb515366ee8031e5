"""Running the real `mrs` command from tests: one place for the subprocess call."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_mrs(
    *args: str,
    timeout_s: float = 60.0,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess:
    """`mrs ARGS...` in this interpreter, output captured as text; `env` adds to the
    environment (e.g. MRS_AUTH_NAME); `cwd`: the directory it runs in (default: ours)."""
    return subprocess.run(
        [sys.executable, "-m", "mrs", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **env} if env else None,
        cwd=cwd,
    )


def status_json(*target: str) -> dict:
    """`mrs status TARGET... --json`, parsed; the command must succeed."""
    result = run_mrs("status", *target, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def one_line(result: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """The refusal an operator reads: exit status `code`, one line on stderr holding
    each of `words`, no traceback anywhere and no "unexpected error" (a mistake the
    operator can fix is said, not crashed on). Returns the line."""
    text = result.stderr.strip()
    assert result.returncode == code, (result.returncode, result.stdout, text)
    assert "\n" not in text, text
    assert "Traceback" not in result.stdout + text and "unexpected error" not in text, text
    for word in words:
        assert word in text, (word, text)
    return text
