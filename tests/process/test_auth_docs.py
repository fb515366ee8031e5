"""docs/security-auth.md's worked example runs: a two-group bus with [auth] on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "auth_two_groups.py"


def test_the_two_group_worked_example_runs_as_documented() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    documented = Path(EXAMPLE.parent.parent / "security-auth.md").read_text()
    for line in done.stdout.splitlines():
        assert line in documented, line
    assert "shop put to 2.20: NOTAUTHORIZED" in done.stdout
    assert "warehouse got and confirmed: order 1" in done.stdout
