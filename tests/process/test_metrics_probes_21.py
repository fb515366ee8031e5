"""What an operator's monitoring sees, probed with real processes: the metrics port
of a replicated group across a failover, and the documented alert rules run through
Prometheus' own rule tester against the series a real group exports.

What an operator depends on: a port for scrapes never decides whether a replicated
group fails over, and the alerts in docs/operations.md fire for the incident they
name (one burst of dead-lettered puts) and stay quiet after the operator handled it
(a partial DLJ redrive) or after Prometheus itself was down.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from clients import DeliveryMode, connect_sync
from sim.etcd import wait_active
from sim.ports import free_port
from tests.cli_helpers import status_json
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config

__all__ = ["etcd"]  # the fixture, used by name

WAIT_S = 30.0
LEASE_TTL_S = 2
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _replication_scraped(url: str) -> dict[str, float]:
    """The `mrs_replication_*` samples the endpoint at `url` serves (name{labels} ->
    value), empty if nothing answers there."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    samples = (line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("mrs_repl"))
    return {name: float(value) for name, value in samples}


def _wait_scraped(url: str, term: int, timeout_s: float) -> None:
    """Until the endpoint at `url` reports `term` with both replicas in sync (the port
    passes between processes: nothing to await but its answer)."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = _replication_scraped(url)
        in_sync = [v for name, v in samples.items() if name.startswith("mrs_replication_in_sync")]
        if samples.get('mrs_replication_term{group="1"}') == term and in_sync == [1.0, 1.0]:
            return
        assert time.monotonic() < deadline, f"{url} never reported term {term}: {samples}"
        time.sleep(0.1)


def test_a_paused_active_holding_the_metrics_port_does_not_stop_the_failover(
    etcd, tmp_path: Path
) -> None:
    """Three instances on one host share `metrics_listen = 127.0.0.1:PORT`. The active
    is paused (SIGSTOP) and keeps the port. The replica that wins must serve the group
    (before: it stopped on `the port is in use`, and no instance served at all), say
    in one WARNING that its endpoint waits, and take the port once the old active,
    resumed, steps down."""
    port = free_port()
    ops = f'[group.ops]\nmetrics_listen = "127.0.0.1:{port}"\n'
    config = write_replicated_config(tmp_path, etcd.endpoint, ops + STANDARD_QUEUES, LEASE_TTL_S)
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        for process in processes.values():
            process.start()
        for process in processes.values():
            process.wait_for("REPLICA")
        first = wait_active(processes, WAIT_S)
        _wait_scraped(url, 1, WAIT_S)
        processes[first].pause()
        others = {name: p for name, p in processes.items() if name != first}
        second = wait_active(others, WAIT_S)
        address = others[second].address
        with connect_sync(address, "ORDERS") as client:
            assert client.put(b"after", "ORDERS", delivery=DeliveryMode.WF_DQF).stored
        assert "metrics" not in status_json("--address", address)["endpoints"]
        log_text = (tmp_path / f"{second}.log").read_text()
        assert "WARNING" in log_text and "ops.metrics_listen" in log_text, log_text[-2000:]
        assert "tries again" in log_text
        processes[first].resume()  # it steps down and lets the port go
        _wait_scraped(url, 2, WAIT_S)
        assert status_json("--address", address)["endpoints"]["metrics"] == url
    finally:
        for process in processes.values():
            process.resume()
            process.terminate()


def _documented_rules() -> str:
    operations = (DOCS / "operations.md").read_text()
    return operations.split("### Alerting", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]


def _series(name: str, values: str, **labels: str) -> dict:
    """One input series of `promtool test rules`, scraped as job mrs, instance h:9101
    unless `labels` say otherwise."""
    labels = {"job": "mrs", "instance": "h:9101", **labels}
    selector = ",".join(f'{key}="{value}"' for key, value in labels.items())
    return {"series": f"{name}{{{selector}}}", "values": values}


def _alert(name: str, at: str, *fired: dict) -> dict:
    return {"eval_time": at, "alertname": name, "exp_alerts": [{"exp_labels": f} for f in fired]}


SCRAPED = {"job": "mrs", "instance": "h:9101", "group": "1"}
UMA_RAN = {"delivery_status": "DQF_FULL", "uma_status": "DLQ_SUCCESS"}
BURST = {"status": "SUCCESS", **UMA_RAN}


def _rule_tests() -> list[dict]:
    """The incidents, each on 15 s scrapes: one burst of 5 dead-lettered puts
    (the DQF full) at minute 10; a DLJ of 10 records of which a redrive with
    `--remove` took 5 at minute 10 and a new dead letter came at minute 30; the same
    puts already counted before Prometheus itself came up at minute 10."""
    stored = {"status": "SUCCESS", "delivery_status": "STORED", "uma_status": "NO_UMA"}
    warning = {"severity": "warning", "group": "1"}
    dlj = {**SCRAPED, "journal": "dlj", "severity": "warning"}
    return [
        {
            "interval": "15s",
            "input_series": [
                _series("up", "1x240"),
                _series("mrs_puts_total", "0+10x240", group="1", **stored),
                _series("mrs_puts_total", "_x40 5x200", group="1", **BURST),
                _series("mrs_journal_records", "10x40 5x80 6x120", group="1", journal="dlj"),
            ],
            "alert_rule_test": [
                _alert("MrsUndeliverablePuts", "11m", {**warning, **UMA_RAN}),
                _alert("MrsDqfFull", "11m", warning),
                _alert("MrsDeadLetters", "29m"),
                _alert("MrsDeadLetters", "46m", dlj),
            ],
        },
        {
            "interval": "15s",
            "input_series": [
                _series("up", "_x40 1x80"),
                _series("mrs_puts_total", "_x40 7x80", group="1", **BURST),
            ],
            "alert_rule_test": [_alert("MrsUndeliverablePuts", "11m"), _alert("MrsDqfFull", "11m")],
        },
        {
            "interval": "15s",
            "input_series": [
                _series("up", values, job="mrs-replicated", instance=name, bus_group="1")
                for name, values in (("a", "1x8 0x12"), ("b", "0x20"), ("c", "0x20"))
            ],
            "alert_rule_test": [
                _alert("MrsGroupDown", "2m"),  # replicas answer nothing: not a group down
                _alert("MrsReplicatedGroupDown", "2m"),
                _alert("MrsReplicatedGroupDown", "4m", {"severity": "critical", "bus_group": "1"}),
            ],
        },
    ]


def test_the_documented_alerts_see_a_first_burst_and_not_a_handled_dlj(tmp_path: Path) -> None:
    """Before: `increase()` of a series born with its first puts counted nothing, so a
    burst of dead-lettered puts fired neither MrsUndeliverablePuts nor MrsDqfFull; and
    `increase()` of the DLJ's record count (a gauge) read a partial redrive as a
    counter reset, so MrsDeadLetters fired for an hour after the operator handled them."""
    promtool = shutil.which("promtool")
    assert promtool is not None, (
        "promtool is missing: `bash .ci/system-packages --tests` installs it (Debian package "
        "prometheus)"
    )
    (tmp_path / "rules.yml").write_text(_documented_rules())
    unit = {"rule_files": ["rules.yml"], "evaluation_interval": "15s", "tests": _rule_tests()}
    (tmp_path / "tests.yml").write_text(json.dumps(unit))  # JSON is YAML
    done = subprocess.run(
        [promtool, "test", "rules", "tests.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
