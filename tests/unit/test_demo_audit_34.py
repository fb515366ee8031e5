"""`mrs demo`'s audit lines against its table: the second copies a SIGKILL makes the
demo re-send (the table's "second copies spotted by correlation id") are in the
audit's summary and its agreement, not hidden behind "duplicates 0" (Spark runs in
tests/process/test_demo.py; here its report is given)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from mrs.audit import command, demo, output
from mrs.audit.report import Report


def _totals(copies: int) -> dict:
    return {
        "confirmed": 2008, "possdupl": 1, "possdupl_rate": 0.0005, "dead_letters": 0,
        "corrupt_records": 0, "in_dqf": 0, "in_saf": 0, "missing": 2601, "duplicates": 0,
        "correlation_duplicate_confirms": copies,
    }  # fmt: skip


@pytest.fixture
def spark_counted(monkeypatch: pytest.MonkeyPatch):
    """run_demo_audit with Spark's report given: `spark_counted(copies)`."""
    monkeypatch.setattr(command, "check_java", lambda: None)
    for name in ("write_tables", "write_json"):
        monkeypatch.setattr(output, name, lambda *args: None)
    monkeypatch.setattr(output, "write_html", lambda report, path, *args: path)

    def given(copies: int) -> None:
        report = Report(_totals(copies), {"latency": []})
        monkeypatch.setattr(demo, "_spark_report", lambda config, out_dir: report)

    return given


def _audit(tmp_path: Path, resent_copies: int) -> tuple[int, str]:
    out = io.StringIO()
    code = demo.run_demo_audit(
        Console(file=out, width=400), tmp_path / "bus.toml", tmp_path, 2008, 2000, resent_copies
    )
    return code, out.getvalue()


def test_the_audit_shows_the_second_copies_the_table_showed(spark_counted, tmp_path) -> None:
    spark_counted(8)
    code, text = _audit(tmp_path, resent_copies=8)
    assert code == 0
    assert "duplicates 0; second copies by correlation id 8" in text
    assert "Spark's audit agrees with the journal." in text


def test_copies_the_table_did_not_show_are_a_disagreement(spark_counted, tmp_path) -> None:
    spark_counted(8)
    code, text = _audit(tmp_path, resent_copies=0)
    assert code == 1
    assert "Audit disagrees: Spark counted 8 second copies by correlation id" in text
    assert "agrees" not in text.replace("disagrees", "")
