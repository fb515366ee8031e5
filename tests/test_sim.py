"""The fault harness: the swarm keeps every invariant, is deterministic, and its
checker catches a deliberately broken build; a real-process mixed scenario passes."""

from __future__ import annotations

import logging

import pytest

from mrs.group import UNSAFE_ACK_BEFORE_COMMIT, UNSAFE_SKIP_POSSDUPL
from sim.checker import History, Sent, check
from sim.scenarios import run_scenario
from sim.swarm import run_seed

SWARM_SEEDS = 200
MIXED_SECONDS = 60.0


@pytest.fixture(autouse=True)
def quiet_logs():
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def test_swarm_of_200_seeds_keeps_every_invariant() -> None:
    failures = {}
    faults_seen: set[str] = set()
    for seed in range(SWARM_SEEDS):
        history, verdict = run_seed(seed)
        faults_seen.update(history.faults)
        if not verdict.ok:
            failures[seed] = verdict.counts()
    assert not failures, f"seeds broke invariants (replay: mrs sim swarm --seed N): {failures}"
    assert faults_seen >= {"crash", "partition", "reset", "disk", "delay"}


def test_same_seed_same_history_byte_for_byte() -> None:
    first, _ = run_seed(12345)
    second, _ = run_seed(12345)
    assert first.to_json() == second.to_json()
    assert run_seed(12346)[0].to_json() != first.to_json()


@pytest.mark.parametrize(
    "switch, invariant",
    [(UNSAFE_ACK_BEFORE_COMMIT, "lost"), (UNSAFE_SKIP_POSSDUPL, "unmarked_duplicates")],
)
def test_checker_catches_a_broken_build(switch, invariant) -> None:
    caught = [
        seed for seed in range(20) if getattr(run_seed(seed, frozenset({switch}))[1], invariant)
    ]
    assert caught, f"{switch}: 20 seeds and the checker never reported {invariant}"


def _history(*deliveries: tuple[str, str, int], **outcomes: tuple[int, int]) -> History:
    history = History()
    for message_id in ("1.20:0", "1.20:1"):
        history.record_send(Sent(message_id, "1.20", "2.10", 26, 4, in_order=True))
        history.record_outcome(
            message_id,
            *outcomes.get(message_id.replace(".", "_").replace(":", "_"), (31, 25)),
            seq=1,
        )
    for delivery in deliveries:
        history.record_delivery(*delivery)
    return history


def test_checker_verdicts_on_hand_made_histories() -> None:
    clean = check(_history(("1.20:0", "2.10", 37), ("1.20:1", "2.10", 37)))
    assert clean.ok and clean.delivered == 2 and clean.acknowledged == 2
    lost = check(_history(("1.20:0", "2.10", 37)))
    assert lost.lost == ["1.20:1"]
    twice = check(_history(("1.20:0", "2.10", 37), ("1.20:1", "2.10", 37), ("1.20:0", "2.10", 37)))
    assert twice.unmarked_duplicates == ["1.20:0"]
    marked = check(
        _history(("1.20:0", "2.10", 37), ("1.20:1", "2.10", 37), ("1.20:0", "2.10", -158))
    )
    assert marked.ok
    reordered = check(_history(("1.20:1", "2.10", 37), ("1.20:0", "2.10", 37)))
    assert reordered.order_violations == ["1.20 -> 2.10"]
    stranger = check(
        _history(("1.20:0", "2.10", 37), ("1.20:1", "2.10", 37), ("9.99:0", "2.10", 37))
    )
    assert stranger.unexpected == ["9.99:0"]
    dlj_claimed = _history(("1.20:0", "2.10", 37), **{"1_20_1": (-206, 15)})
    assert check(dlj_claimed).uma_mismatches  # DLJ_SUCCESS but not in the DLJ
    dlj_claimed.dead_letter_journal.add("1.20:1")
    assert check(dlj_claimed).ok


async def test_real_process_mixed_scenario(tmp_path) -> None:
    history = await run_scenario("mixed", seed=7, duration_s=MIXED_SECONDS, directory=tmp_path)
    verdict = check(history)
    assert verdict.ok, (
        verdict.counts(),
        verdict.lost[:5],
        verdict.unmarked_duplicates[:5],
        verdict.order_violations[:5],
        verdict.uma_mismatches[:5],
    )
    assert verdict.acknowledged > 50 and sum(history.faults.values()) >= 20
