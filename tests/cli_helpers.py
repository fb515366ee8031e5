"""Running the real `mrs` command from tests: one place for the subprocess call."""

from __future__ import annotations

import json
import subprocess
import sys


def run_mrs(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    """`mrs ARGS...` in this interpreter, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "mrs", *args], capture_output=True, text=True, timeout=timeout_s
    )


def status_json(*target: str) -> dict:
    """`mrs status TARGET... --json`, parsed; the command must succeed."""
    result = run_mrs("status", *target, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
