"""Probes of the fault-injection harness as a tester relies on its verdict: seeds that
replay, histories that compare, a swarm of any size that can be stopped, and a
terminal's Ctrl-C during a scenario's restart.

A harness whose seed -1 silently replays seed 1, whose two runs of one seed write
different history files, or which blames a server for a start the tester's own
Ctrl-C broke, sends testers after bugs the server never had."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_helpers import run_mrs
from tests.process.test_sim_probes import (  # the same /proc helpers and clean-up fixture
    WAIT_S_MAX,
    _alive,
    _command_line,
    _descendants,
    _interrupt,
    _wait_for,
    reaped,  # noqa: F401 (a fixture)
    swarm_after_two_seeds,
)

HUGE_SEEDS = 10**20
"""More seeds than `len(range(...))` can count (it stops at 2**63 - 1)."""
START_FAILS_SEED = 3
"""A seed of the default workload whose nemesis makes a group's start fail (its
history holds a `start_failed` event naming the journal's path)."""
RESTART_POLL_S = 0.01


def _one_line_refusal(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("mrs: ") and "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["sim", "swarm", "--seed", "-1"],
        ["sim", "swarm", "--first", "-5", "--seeds", "10"],
        ["sim", "run", "mixed", "--seed", "-1", "--seconds", "1"],
    ],
    ids=lambda args: " ".join(args[1:4]),
)
def test_a_negative_seed_is_refused_instead_of_replaying_its_twin(args: list[str]) -> None:
    """`random.Random` seeds with the number's absolute value: `--seed -1` ran seed 1
    byte for byte and said every invariant held, and `--first -5 --seeds 10` counted
    ten seeds having run six distinct ones. Refused in one line."""
    result = run_mrs(*args, timeout_s=WAIT_S_MAX)
    _one_line_refusal(result, "seeds are whole numbers >= 0")


def test_a_refused_replicated_run_leaves_no_directory_behind(tmp_path: Path) -> None:
    """`mrs sim replicated` made its temporary directory before it checked its
    arguments: each refusal left an empty /tmp/mrs-sim-replicated-* behind."""
    result = run_mrs("sim", "replicated", "--seed", "-1", timeout_s=WAIT_S_MAX,
                     env={"TMPDIR": str(tmp_path)})  # fmt: skip
    _one_line_refusal(result, "seeds are whole numbers >= 0")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_switch_is_refused_with_the_switches_there_are() -> None:
    """`--unsafe` took a typo with "unknown switches ['posdupl-always']" and nothing
    else (`--help` lists none either); the line now names every switch the swarm
    takes, the replication builds too."""
    result = run_mrs("sim", "swarm", "--unsafe", "posdupl-always", timeout_s=WAIT_S_MAX)
    _one_line_refusal(result, "unknown switches", "possdupl-always", "promote-not-in-sync")


def test_one_seed_run_twice_writes_the_same_history_byte_for_byte(tmp_path: Path) -> None:
    """docs/sim.md: "the same seed gives the same history, byte for byte". A failed
    start's words named the seed's temporary directory (a new name each run), so 8 of
    the first 25 seeds wrote different `--history` files on each replay."""
    paths = [tmp_path / "first.json", tmp_path / "second.json"]
    for path in paths:
        result = run_mrs(
            *("sim", "swarm", "--seed", str(START_FAILS_SEED), "--history", str(path)),
            timeout_s=WAIT_S_MAX,
        )
        assert result.returncode == 0, result.stdout + result.stderr
    first, second = (path.read_text() for path in paths)
    assert "start_failed" in first  # the seed still exercises a failed start
    assert first == second


def test_an_interrupted_swarm_of_a_huge_range_still_prints_how_far_it_got(
    tmp_path: Path,
) -> None:
    """`--seeds 100000000000000000000` is taken (the tester stops it when done), but
    stopping it ended in "unexpected error: OverflowError" and exit 1, not the table
    of the seeds it ran and exit 143."""
    process = swarm_after_two_seeds(tmp_path, "--seeds", str(HUGE_SEEDS))
    code, output = _interrupt(process, signal.SIGTERM, set())
    assert code == 128 + signal.SIGTERM, output
    assert f" of {HUGE_SEEDS} seeds run" in output
    assert "unexpected error" not in output


def test_a_swarm_names_every_failing_seed_past_the_twenty_it_describes() -> None:
    """A swarm describes the first 20 failing seeds with their replay lines; the
    others were left out without a word, so a tester took the 20 for every seed that
    failed. Their numbers now follow on one line."""
    result = run_mrs(
        *("sim", "swarm", "--seeds", "22", "--workload", "quick"),
        *("--unsafe", "possdupl-always"),
        timeout_s=WAIT_S_MAX,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    described = [line.split()[1] for line in lines if re.match(r"seed \d+ failed", line)]
    failed = int(next(line for line in lines if line.endswith("broke an invariant")).split()[0])
    assert failed > len(described) == 20, result.stdout  # a broken build fails most seeds
    (more,) = (line for line in lines if " more seeds failed: " in line)
    count, numbers = more.split(" more seeds failed: ")
    assert int(count) == failed - 20 == len(numbers.split())
    assert not set(numbers.split()) & set(described)


def _servers(pid: int, marker: str) -> set[int]:
    return {
        child
        for child in _descendants(pid)
        if " serve " in _command_line(child) and marker in _command_line(child)
    }


def test_ctrl_c_at_the_terminal_during_a_restart_is_an_interruption(
    tmp_path: Path,
    reaped: set[int],  # noqa: F811 (the imported fixture)
) -> None:
    """A terminal's Ctrl-C is SIGINT to every process of the foreground group: the
    servers of `mrs sim run` got it too, and one the crash loop was restarting died
    before its READY line, so the run ended "group 1 did not start: <a log line>",
    exit 1 — a start failure the tester had caused. Now the servers are not in the
    terminal's group: the harness stops them, and says it was interrupted."""
    scratch = tmp_path / "scratch"
    process = subprocess.Popen(  # as a shell starts a foreground job: a group of its own
        [sys.executable, "-m", "mrs", "sim", "run", "crash-loop", "--seconds", "300"]
        + ["--scratch", str(scratch)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_for(lambda: len(_servers(process.pid, str(scratch))) == 2, "two servers")
    first = _servers(process.pid, str(scratch))
    deadline_s = time.monotonic() + WAIT_S_MAX
    while not _servers(process.pid, str(scratch)) - first:  # a restart under way
        assert time.monotonic() < deadline_s, "no restart by the crash loop"
        time.sleep(RESTART_POLL_S)
    children = _descendants(process.pid)
    reaped |= children
    os.killpg(process.pid, signal.SIGINT)  # what the terminal's Ctrl-C does
    output, _ = process.communicate(timeout=WAIT_S_MAX)
    _wait_for(lambda: not any(_alive(pid) for pid in children), "end of the servers")
    assert process.returncode == 128 + signal.SIGINT, output
    assert "interrupted by SIGINT" in output and "did not start" not in output
