"""The tester's tools as a tester uses them (docs/sim.md, docs/client-saf.md): the
client SAF journal's simulation, `python -m sim.client_saf_sim SEEDS`, stopped by a
signal or given a wrong seed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WAIT_S_MAX = 60.0
POLL_S = 0.05
SCRATCH_PREFIX = "mrs-client-saf-sim-"


def _simulation(*seeds: str) -> subprocess.Popen:
    """`python -m sim.client_saf_sim SEEDS` as a terminal starts it (SIGINT at its
    default: a test runner in the background may have inherited it ignored)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sim.client_saf_sim", *seeds],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _scratch_in_use(pid: int) -> Path | None:
    """The seed's scratch directory, once the child has its client journal open."""
    try:
        links = [os.readlink(entry) for entry in Path(f"/proc/{pid}/fd").iterdir()]
    except OSError:
        return None
    for link in links:
        path = Path(link)
        for parent in path.parents:
            if parent.name.startswith(SCRATCH_PREFIX):
                return parent
    return None


def test_a_signalled_client_saf_simulation_removes_its_scratch_and_says_how_far_it_got() -> None:
    """SIGTERM ended `python -m sim.client_saf_sim` at once: the seed's scratch
    directory (on /dev/shm: memory) stayed behind, and no line said how many seeds had
    run (Ctrl-C: a KeyboardInterrupt traceback, exit 1). Now it stops as a swarm
    does: the directory removed, the seeds run so far, exit 143."""
    process = _simulation(*(str(seed) for seed in range(1, 1000)))
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # seed 1 done: the run is under way
        assert first.startswith("seed 1: "), first
        deadline = time.monotonic() + WAIT_S_MAX
        while (scratch := _scratch_in_use(process.pid)) is None:
            assert time.monotonic() < deadline, "no seed's client journal open"
            time.sleep(POLL_S)
        process.send_signal(signal.SIGTERM)
        output, errors = process.communicate(timeout=WAIT_S_MAX)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, (output, errors)
    assert " of 999 seeds run" in output and "interrupted by SIGTERM" in output, output
    assert "Traceback" not in errors, errors
    assert not scratch.exists(), f"{scratch} left behind"


@pytest.mark.parametrize("word", ["-3", "x"])
def test_a_seed_that_is_not_a_whole_number_is_refused_in_one_line(word: str) -> None:
    """A word that is no number was a ValueError traceback; -3 replayed seed 3 (Python's
    `random` seeds with the absolute value) as if it were another seed."""
    process = _simulation(word)
    output, errors = process.communicate(timeout=WAIT_S_MAX)
    assert process.returncode == 2, (output, errors)
    assert output == ""
    assert errors.strip().splitlines() == [
        f"python -m sim.client_saf_sim: {word!r} is not a seed: seeds are whole numbers >= 0 "
        "(seed -N would replay seed N)"
    ]
