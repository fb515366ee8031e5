"""The `mrs` command itself: help lists the subcommands; status reads a live group."""

from __future__ import annotations

import json
import subprocess
import sys


def _mrs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrs", *args], capture_output=True, text=True, timeout=60
    )


def test_help_lists_every_subcommand() -> None:
    result = _mrs("--help")
    assert result.returncode == 0
    for command in ("serve", "demo", "bench", "status"):
        assert command in result.stdout


def test_status_reports_queues_and_writer(bus) -> None:
    result = _mrs("status", "--address", bus.address, "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["group"] == 1 and status["name"] == "NYC"
    assert status["queues"]["1.10"]["name"] == "ORDERS"
    assert status["queues"]["1.96"]["name"] == "DLQ"
    assert "batches_per_commit" in status["writer"]


def test_status_without_a_target_is_a_usage_error() -> None:
    result = _mrs("status")
    assert result.returncode == 2 and "--address" in result.stderr


def test_serve_unknown_group_is_a_one_line_error(bus) -> None:
    result = _mrs("serve", "--config", str(bus.config_path), "--group", "7")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "no group 7" in result.stderr
