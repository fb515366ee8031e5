"""The dead-letter handler and jplay run from a shell at 3 a.m., thirty-third session:
an operator's slips (an `--address` that reaches another group) and what the tools
say then. Each test says what a user saw before its fix."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, Status, Uma
from sim.bus import LinkedBus
from tests.client_helpers import take_all
from tests.conftest import STANDARD_QUEUES

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
WAIT_S = 60.0
"""Deadline for a tool's process, on a loaded 2-core machine."""


@pytest.fixture
def two_groups(tmp_path: Path) -> Iterator[LinkedBus]:
    """Groups 1 and 2 with the standard queues, linked directly."""
    bus = LinkedBus(tmp_path / "bus", queues=STANDARD_QUEUES, direct=True)
    bus.start()
    yield bus
    bus.stop()


async def _run(*argv: str) -> subprocess.CompletedProcess:
    """`mrs ARGV...` to its end (within WAIT_S), its output captured as bytes."""
    command = [sys.executable, "-m", "mrs", *argv]
    with trio.fail_after(WAIT_S):
        return await trio.run_process(
            command, capture_stdout=True, capture_stderr=True, cwd=ROOT, env=ENV, check=False
        )


async def test_a_handler_given_another_groups_address_touches_none_of_its_letters(
    two_groups, tmp_path
) -> None:
    """`--group 1 --address <group 2's address>` (a mistyped port): the handler
    attached the DLQ as `96`, which every group has, and worked group 2's DLQ by group
    1's table. A DISCARD rule discarded group 2's dead letters (exit 0, nothing said),
    and group 1's were not looked at. Now the attach names the group (`1.96`): the
    other group refuses it, the handler ends with exit 3 and a note naming the slip,
    and group 2's letter is still on its DLQ."""
    bus = two_groups
    async with bus.connect(2, "SENDER") as sender:
        psb = await sender.put(b"lon", target="2.50", delivery=DeliveryMode.WF_MEM, uma=Uma.DLQ)
        assert psb.uma_status == Status.DLQ_SUCCESS, psb
    rules = tmp_path / "discard.rules"
    rules.write_text("ACTION(DISCARD)\n")
    config = str(bus.config_path)
    done = await _run(
        "dlq-handler", "--config", config, "--group", "1", "--address", bus.address(2),
        "--once", "--json", str(rules),
    )  # fmt: skip
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert lines[-1]["summary"]["discarded"] == 0
    note = lines[-2]["note"]
    assert "not group 1" in note and "no dead letter was touched" in note, note
    async with bus.connect(2, "DLQ") as dlq:
        letters = await take_all(dlq)
    assert [letter.body for letter in letters] == [b"lon"]


async def test_jplay_refused_by_a_server_of_another_group_is_not_resumable(two_groups) -> None:
    """`mrs jplay --group 1 --address <group 2's address>`: group 2 refuses the attach
    of `1.16` (NOSUCHQUEUE), and jplay said "Run the same command again to resume",
    with `"resumable": true` in --json: a script re-running while resumable ran for
    ever. Now such a refusal is not resumable, and the advice says to fix it first."""
    bus = two_groups
    argv = ["jplay", "--config", str(bus.config_path), "--group", "1"]
    argv += ["--address", bus.address(2), "--as", "SENDER2", "dlj"]
    done = await _run(*argv, "--json")
    summary = json.loads(done.stdout)
    assert done.returncode == 1, done.stderr
    assert summary["stopped"].startswith("NOSUCHQUEUE"), summary
    assert summary["resumable"] is False
    told = (await _run(*argv)).stderr.decode()
    assert "Run the same command again" not in told and "fix what it names first" in told, told


async def test_a_table_read_from_the_terminal_is_said_so() -> None:
    """`mrs dlq-handler --config bus.toml --group 1` with RULES_FILE left out read the
    table from the terminal without a word: the command hung, and an operator took it
    for a stuck handler. Now one line on stderr says where the table is read from and
    how to end it; the table typed there is used as before."""
    primary, secondary = pty.openpty()
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--check"]
    process = subprocess.Popen(
        command, stdin=secondary, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=ENV
    )
    os.close(secondary)
    try:
        os.write(primary, b"ACTION(IGNORE)\n\x04")  # the table, then Ctrl-D
        out, err = await trio.to_thread.run_sync(lambda: process.communicate(timeout=WAIT_S))
    finally:
        os.close(primary)
        if process.returncode is None:
            process.kill()
            process.wait()
    assert b"reading the rules table from the terminal" in err and b"Ctrl-D" in err, err
    assert process.returncode == 0
    assert b"rules table valid: 1 rule" in out
