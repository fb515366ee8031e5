"""`mrs demo`'s failover chapter without etcd: one line saying it was skipped and why,
and the demo goes on (the chapter itself runs in tests/process/test_demo.py)."""

from __future__ import annotations

import io

from rich.console import Console

from mrs.tools import demo_failover


def test_without_etcd_the_chapter_is_one_line_and_passes(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(demo_failover.shutil, "which", lambda name: None)
    out = io.StringIO()
    console = Console(file=out, width=200)
    assert demo_failover.run_failover_chapter(console, tmp_path / "failover", 400) == 0
    lines = out.getvalue().strip().splitlines()
    assert lines == [
        "7. Failover chapter skipped: etcd is not installed "
        "(bash .ci/system-packages installs etcd-server)"
    ]
    assert not (tmp_path / "failover").exists()  # nothing started
