"""`mrs jplay dlj`'s ledger as the DLQ handler reads it (mrs.offline.redrive_traces):
a ledger another tool left damaged makes the handler mark every put a possible
duplicate and say why, instead of stopping on a raw LMDB error."""

from __future__ import annotations

from pathlib import Path

from mrs.offline.journal_files import REPLAY_LEDGER_DIRNAME
from mrs.offline.redrive_traces import JplayTraces


def test_a_damaged_ledger_marks_every_put_and_says_why(tmp_path: Path) -> None:
    ledger = tmp_path / REPLAY_LEDGER_DIRNAME
    ledger.mkdir()
    (ledger / "data.mdb").write_bytes(b"\x07not an lmdb environment" * 512)
    traces = JplayTraces(tmp_path)
    try:
        assert traces.in_doubt is not None and "unreadable" in traces.in_doubt
        assert traces.replayed(1) and traces.replayed(2**63)
    finally:
        traces.close()


def test_no_ledger_marks_nothing(tmp_path: Path) -> None:
    traces = JplayTraces(tmp_path)
    assert traces.in_doubt is None and not traces.replayed(1)
    traces.close()
