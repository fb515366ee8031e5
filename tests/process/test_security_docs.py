"""docs/security.md's worked example runs and prints what the page says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_secure_bus_example_runs_as_documented(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / "secure_bus.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    page = (ROOT / "docs" / "security.md").read_text()
    shown = page.split("It prints:\n\n```text\n", 1)[1].split("```", 1)[0]
    for line in shown.strip().splitlines():
        pattern = ".*".join(re.escape(part) for part in line.split("..."))
        assert re.search(pattern, result.stdout), f"{line!r} not in:\n{result.stdout}"
    assert (tmp_path / "certs" / "ca.key").stat().st_mode & 0o077 == 0
