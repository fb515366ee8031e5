"""The deterministic simulation of the client SAF journal (sim/client_saf_sim.py):
seeds pass, a seed replays byte for byte, and a broken build is caught."""

from __future__ import annotations

import uuid

import pytest

import clients.saf_drain
from sim.client_saf_sim import check, run_seed, simulate


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_seeds_keep_every_rule(seed: int) -> None:
    verdict = run_seed(seed)
    assert verdict.ok, verdict.line()
    assert verdict.acknowledged > 100 and verdict.faults > 3


def test_a_seed_replays_exactly() -> None:
    first, second = simulate(3), simulate(3)
    assert first.deliveries == second.deliveries
    assert first.acknowledged == second.acknowledged
    assert first.faults == second.faults
    assert any(seq for seq in first.acknowledged.values()), "nothing was journaled"


def test_a_drain_without_stable_dedupe_keys_is_caught(monkeypatch) -> None:
    """Broken build: each re-send of a journal record gets a fresh key, so a record
    the server stored before a client kill is stored again."""
    monkeypatch.setattr(clients.saf_drain, "idempotency_key_for", lambda *_: uuid.uuid4().hex)
    verdict = check(2, simulate(2))
    assert not verdict.ok
    assert any("delivered twice" in problem for problem in verdict.problems)
