"""The docs' examples of the fast test seam and the store conformance suite run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from journals.conformance import CHECKS

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.mark.parametrize(
    "example, expected",
    [
        (
            "in_process_bus.py",
            ["put answered SUCCESS after 20 s of bus time", "wall time under 5 s: True"],
        ),
        (
            "store_conformance.py",
            ["ok  commits_survive_a_reopen", f"LMDB store passed all {len(CHECKS)} checks"],
        ),
    ],
)
def test_example_runs(example: str, expected: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / example)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    for line in expected:
        assert line in result.stdout, result.stdout
