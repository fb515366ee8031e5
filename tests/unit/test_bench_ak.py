"""`mrs bench`'s AK_DQF row: AK puts answered by MRS_ACKs against a real `mrs serve`,
and its comparison with the WF_DQF row of the same window."""

from __future__ import annotations

from pathlib import Path

from mrs.tools.bench.report import wf_counterpart
from mrs.tools.bench.results import Result
from mrs.tools.bench.runner import measure_server


def test_every_ak_put_counted_was_acknowledged_stored_and_is_in_the_dqf(tmp_path: Path) -> None:
    result = measure_server(tmp_path / "ak", 2, 8, 0.5, 256, ak=True)
    assert result.failures == 0
    assert result.count > 0 and result.workload == "put-ak"
    assert len(result.latencies_s) >= result.count  # every counted put had its MRS_ACK
    assert result.dqf_messages_after is not None
    assert result.dqf_messages_after >= result.count  # acknowledged STORED: stored
    assert result.writer_delta is not None and result.writer_delta["failed_batches"] == 0


def test_an_ak_row_is_compared_with_the_wf_row_of_the_same_window() -> None:
    def row(workload: str, connections: int, in_flight: int) -> Result:
        return Result(
            workload,
            "server",
            100,
            1.0,
            connections=connections,
            in_flight=in_flight,
            workload=workload,
            route="same-group",
        )

    wf_small, wf, ak = row("put", 1, 1), row("put", 4, 128), row("put-ak", 4, 128)
    results = [wf_small, wf, ak]
    assert wf_counterpart(ak, results) is wf
    assert wf_counterpart(wf, results) is None  # only AK rows have a WF partner
