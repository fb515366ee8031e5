"""benchmarks/replication.py's shapes on a short run against a real unreplicated
`mrs serve`: each shape counts what it was answered, the paced shape puts exactly
rate x seconds on its schedule, and the comparison table's ratios are the right way
round (the RabbitMQ side needs a RabbitMQ install and is not run here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.replication import Shapes, pooled, print_table, unreplicated

RATE_PER_S = 200.0
SECONDS = 0.5


def test_the_shapes_run_against_one_server_and_the_paced_one_keeps_its_count(
    tmp_path: Path,
) -> None:
    shapes = unreplicated(tmp_path / "u", SECONDS, 4, RATE_PER_S)
    assert shapes.put_per_s > 0 and len(shapes.put_latencies_s) > 0
    assert shapes.through_per_s > 0 and shapes.through_prefetch_per_s > 0
    assert shapes.through_implicit_per_s > 0
    assert len(shapes.paced_latencies_s) == int(RATE_PER_S * SECONDS)
    assert all(latency_s > 0 for latency_s in shapes.paced_latencies_s)
    # On schedule: not faster than the rate (open loop, one put per 1/rate s).
    assert shapes.paced_per_s <= RATE_PER_S * 1.05


def test_the_table_sets_replicated_against_unreplicated_and_the_quorum_queue(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def shapes(rate_per_s: float, latency_s: float) -> Shapes:
        through = rate_per_s / 10
        latencies_s = [latency_s] * 10
        return Shapes(
            rate_per_s, latencies_s, through, 2 * through, 3 * through, 1000.0, latencies_s
        )

    print_table(32, 1000.0, shapes(4000, 0.002), shapes(2000, 0.004), shapes(1000, 0.008))
    lines = capsys.readouterr().out.splitlines()
    rows = {line[:46].strip(): line[46:].split() for line in lines[1:7]}  # rates and latencies
    assert rows["WF puts / confirms, 32 in flight, per s"] == [
        "4000.00",
        "2000.00",
        "1000.00",
        "0.50",
        "2.00",
    ]  # MRS x1, MRS x3, quorum x3, x3 / x1, x3 / quorum
    assert rows["ack p50 ms"] == ["2.00", "4.00", "8.00", "2.00", "0.50"]
    assert rows["put->get->confirm, per s"][-2:] == ["0.50", "2.00"]
    assert rows["put->get_many->confirm_many, per s"] == [
        "800.00",
        "400.00",
        "200.00",
        "0.50",
        "2.00",
    ]
    assert rows["put->get (implicit confirm), per s"] == [
        "1200.00",
        "600.00",
        "300.00",
        "0.50",
        "2.00",
    ]


def test_rounds_pool_into_the_median_rate_and_every_answer() -> None:
    """--rounds: a rate is the rounds' median (an outlier round moves it not at all),
    and the latency percentiles are over every round's answers."""
    rounds = [
        Shapes(rate, [0.001 * number] * 2, rate / 10, rate / 5, rate / 2, 1000.0 - number, [0.002])
        for number, rate in enumerate((9000.0, 1000.0, 2000.0), start=1)
    ]
    one = pooled(rounds)
    assert (one.put_per_s, one.through_per_s, one.through_prefetch_per_s) == (2000, 200, 400)
    assert one.through_implicit_per_s == 1000
    assert one.paced_per_s == 998.0
    assert sorted(one.put_latencies_s) == [0.001, 0.001, 0.002, 0.002, 0.003, 0.003]
    assert one.paced_latencies_s == [0.002] * 3
