"""The audit's charts: none for a single bar, sized to their bars, whole-number ticks
on counts, latency on a log axis (matplotlib figures inspected, no Spark)."""

from __future__ import annotations

import pytest

from mrs.audit import output


@pytest.fixture
def figures(monkeypatch) -> list:
    """The figures the charts draw, instead of their PNGs."""
    drawn: list = []

    def keep(figure) -> str:
        drawn.append(figure)
        return "png"

    monkeypatch.setattr(output, "_png", keep)
    return drawn


def test_no_chart_for_a_single_bar(figures) -> None:
    assert output._bar_chart("one", ["1.ORDERS"], [5], "messages") is None
    assert figures == []


def test_counts_get_whole_number_ticks_and_width_follows_the_bars(figures) -> None:
    assert output._bar_chart("two", ["a", "b"], [1, 3], "messages") == "png"
    assert output._bar_chart("many", [str(i) for i in range(20)], [1] * 20, "messages")
    narrow, wide = figures
    ticks = narrow.axes[0].get_yticks()
    assert all(float(t).is_integer() for t in ticks)
    assert wide.get_size_inches()[0] > narrow.get_size_inches()[0]


def test_latency_is_on_a_log_axis_and_a_zero_is_still_drawn(figures) -> None:
    rows = [
        {"target": "1.10", "target_name": "1.ORDERS", "p50_ms": 3.0, "p95_ms": 4.0,
         "p99_ms": 5.0},
        {"target": "1.11", "p50_ms": 40_000.0, "p95_ms": 41_000.0, "p99_ms": 0.0},
    ]  # fmt: skip
    assert output._latency_chart(rows) == "png"
    (figure,) = figures
    axes = figure.axes[0]
    assert axes.get_yscale() == "log"
    assert [t.get_text() for t in axes.get_xticklabels()] == ["1.ORDERS", "1.11"]
    heights = [bar.get_height() for bar in axes.patches]
    assert min(heights) == output.LATENCY_FLOOR_MS and max(heights) == 41_000.0
