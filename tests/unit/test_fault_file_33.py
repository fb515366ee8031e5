"""The harness's fault file (docs/sim.md): a slow disk turned off ends the slow commit
under way, not only the ones after it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from mrs.storage import fault_file
from mrs.storage.fault_file import file_fault_hook


def test_clearing_a_slow_fault_ends_the_slow_flush_under_way(tmp_path: Path, monkeypatch) -> None:
    """A tester made commits take 60 s to watch a group recover, then cleared the file:
    the flush under way went on to its 60 s. It now ends within a poll of the change."""
    path = tmp_path / "fault"
    path.write_text("SLOW 60")
    sleeping = threading.Event()
    real_sleep = time.sleep

    def noted_sleep(seconds: float) -> None:
        sleeping.set()
        real_sleep(seconds)

    monkeypatch.setattr(fault_file.time, "sleep", noted_sleep)
    hook = file_fault_hook(path)
    flush = threading.Thread(target=hook, args=("flush",), daemon=True)
    started_s = time.monotonic()
    flush.start()
    assert sleeping.wait(10), "the SLOW flush never waited"
    path.write_text("")
    flush.join(10)
    assert not flush.is_alive(), "the flush still waits out its 60 s"
    assert time.monotonic() - started_s < 10


def test_a_slow_fault_left_on_waits_its_delay(tmp_path: Path) -> None:
    path = tmp_path / "fault"
    path.write_text("SLOW 0.3")
    started_s = time.monotonic()
    file_fault_hook(path)("flush")
    assert time.monotonic() - started_s >= 0.3
