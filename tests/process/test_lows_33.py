"""Operator lines that named the wrong thing (session 33): `mrs serve` on a data_dir
it cannot write said "group.json: cannot be written" (a file the operator never
named, no key, no bus file); `mrs admin set-limits` left unanswered said
"set_limits", a word no `mrs admin` command takes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.processes import write_single_group_config
from tests.cli_helpers import run_mrs
from tests.process.test_admin_console_32 import WAIT_S, _silent_server_thread


@pytest.fixture
def unwritable(tmp_path: Path) -> Iterator[Path]:
    """A directory nobody may write, root included: immutable (chattr +i), as
    test_cli_errors makes a journal file read-only for root."""
    directory = tmp_path / "locked"
    directory.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode:
            pytest.skip("chattr +i is not supported on this filesystem")
    else:
        directory.chmod(0o555)
    try:
        yield directory
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
        directory.chmod(0o755)


@pytest.mark.parametrize(
    ("inside", "problem"), [("g1", "cannot be created"), ("", "cannot be written")]
)
def test_an_unwritable_data_dir_is_named_by_its_key(
    tmp_path: Path, unwritable: Path, inside: str, problem: str
) -> None:
    """A data_dir to make in a directory this user cannot write, and one that is there
    and cannot be written: the bus file, the group, `data_dir = "..."` and what to do."""
    config = write_single_group_config(tmp_path)
    data_dir = unwritable / inside if inside else unwritable
    config.write_text(config.read_text().replace('data_dir = "g1"', f'data_dir = "{data_dir}"'))
    result = run_mrs("serve", "--config", str(config), "--group", "1", timeout_s=30)
    line = result.stderr.strip()
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "\n" not in line and "Traceback" not in line, line
    assert f'{config}: group 1 (NYC) data_dir = "{data_dir}": {problem}' in line, line
    assert "point data_dir at a directory" in line and "group.json" not in line, line


@pytest.mark.parametrize(
    ("typed", "wire"),
    [
        (["set-limits", "ORDERS", "--messages-max", "5"], "set_limits"),
        (["add-queue", "20", "NEW"], "add_queue"),
    ],
)
def test_an_unanswered_admin_change_is_named_as_the_operator_typed_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], typed, wire
) -> None:
    from mrs.tools.cli import main

    monkeypatch.setattr("clients.connection.ADMIN_REQUEST_WAIT_S", WAIT_S)
    port = _silent_server_thread()
    assert main(["admin", *typed, "--address", f"127.0.0.1:{port}"]) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"mrs: admin: {typed[0]}: no answer from 127.0.0.1:{port}"), line
    assert wire not in line, line
