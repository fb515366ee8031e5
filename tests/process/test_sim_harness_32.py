"""The fault-injection harness as a tester uses it (docs/sim.md): `mrs sim run` when a
group's server dies with no fault asking for it, and when it is stopped twice; `mrs
sim swarm` when a seed's run raises."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from pathlib import Path

import pytest
import trio

import sim.commands
import sim.scenarios
from sim.bus import LinkedBus
from sim.checker import History, Verdict, check
from sim.commands import until_signalled

RUN_S_MAX = 60.0
"""The scenario below ends within seconds of the death; unwatched it ran its fault
phase, then waited twice `SETTLE_S_MAX` (120 s) for links to a dead group."""


class _DyingBus(LinkedBus):
    """A LinkedBus whose group 2 dies (SIGKILL, from outside the harness) as soon as
    every group is up: a server crash the scenario's nemesis did not cause."""

    def start(self) -> None:
        super().start()
        process = self.processes[2].process
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)


async def test_a_server_that_dies_unbidden_ends_the_run_with_its_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group's `mrs serve` that exited by itself (a crash, a malformed peer's bytes)
    was never reported: the nemesis's next `crash` restarted it without a word, and one
    left down made the run wait four minutes and report lost, stuck and MRS_ACK
    violations, blamed on the journals. Now the run ends at once, its verdict names
    the group, how it ended and its last log line, and no server is left running."""
    monkeypatch.setattr(sim.scenarios, "LinkedBus", _DyingBus)
    with trio.fail_after(RUN_S_MAX):
        history = await sim.scenarios.run_scenario("partition-storm", 1, 30.0, tmp_path / "run")
    verdict = check(history)
    assert not verdict.ok
    assert verdict.counts()["died"] == 1, verdict.counts()
    assert verdict.died[0].startswith("group 2 exited unbidden (signal SIGKILL): "), verdict.died
    assert verdict.lost == [] and verdict.stuck == []
    assert '"died": ["group 2 exited unbidden' in history.to_json()


def test_a_second_stop_signal_while_the_run_stops_is_taken_not_raised_again() -> None:
    """A second Ctrl-C while `mrs sim run` stopped its servers (they take a moment)
    waited unread in the harness's signal receiver, which raised it again as it
    closed: the command ended with no "interrupted by SIGINT ... the bus stays in DIR"
    line, and a second SIGTERM killed it outright. Here SIGHUP, so a signal raised
    again reaches this test's own handler instead of ending the test run."""
    raised_again: list[int] = []
    before = signal.signal(signal.SIGHUP, lambda signum, frame: raised_again.append(signum))

    async def run_stopped_twice() -> None:
        os.kill(os.getpid(), signal.SIGHUP)  # the first stop
        try:
            await trio.sleep_forever()
        finally:  # the second, while the run's servers stop
            os.kill(os.getpid(), signal.SIGHUP)

    try:
        result, signum = trio.run(until_signalled, run_stopped_twice)
    finally:
        signal.signal(signal.SIGHUP, before)
    assert (result, signum) == (None, signal.SIGHUP)
    assert raised_again == []


def test_a_seed_that_raises_is_named_with_its_replay_line_and_the_swarm_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A seed whose run raised (a server task's exception under that seed's faults)
    ended the whole swarm with "mrs: unexpected error: ...", exit 1: no seed number to
    replay, and the table of every seed run before it thrown away. Now that seed is
    named with its error and a replay line that shows the traceback (-v), and the
    swarm runs the others."""

    def run_seed(seed: int, *_: object) -> tuple[History, Verdict]:
        if seed == 1:  # as a trio nursery carries it
            raise ExceptionGroup("in a nursery", [RuntimeError("a task broke\nhere")])
        return History(seed=seed), Verdict()

    monkeypatch.setattr(sim.commands, "run_seed", run_seed)
    args = argparse.Namespace(
        seed=None, seeds=3, first=None, unsafe="", history=None, workload="quick", verbose=False
    )
    try:
        code = sim.commands.run_swarm_command(args)
    finally:
        logging.disable(logging.NOTSET)  # the command silences logging for its run
    output = capsys.readouterr().out
    assert code == 1, output
    assert "swarm: 3 seeds" in output
    assert "seed 1 raised RuntimeError: a task broke here" in output
    assert "  replay: mrs sim swarm --seed 1 --workload quick --history seed1.json -v" in output
    assert "0 of 3 seeds broke an invariant, 1 raised an error" in output
