"""The operator's endpoints of a serving group (metrics_listen, web_listen), its
Prometheus series and `mrs status`, as an operator with Prometheus meets them: a port
taken while the server starts, a first burst on a fresh scrape. Real `mrs serve`
processes, real sockets, real LMDB."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from clients import DeliveryMode, Uma, connect_sync
from sim.ports import free_port
from sim.processes import GroupProcess, write_single_group_config
from tests.cli_helpers import status_json

pytestmark = pytest.mark.xdist_group("ops_endpoints_24")

DOCS = Path(__file__).resolve().parents[2] / "docs"

TAKE_PORT_AT_SERVE = """\
import socket
import sys

import mrs.server.group_server as group_server
from mrs.tools.cli import main

real_serve = group_server.serve
held = []


async def serve(*args, **kwargs):
    # the port is taken after every check of the command, as the server starts
    holder = socket.socket()
    holder.bind(("127.0.0.1", {port}))
    holder.listen()
    held.append(holder)
    await real_serve(*args, **kwargs)


group_server.serve = serve
sys.exit(main(sys.argv[1:]))
"""


def _journal_digest(config: Path) -> str:
    return hashlib.sha256((config.parent / "g1" / "journals" / "data.mdb").read_bytes()).hexdigest()


@pytest.mark.parametrize("key", ["metrics_listen", "web_listen"])
def test_an_ops_port_taken_while_the_server_starts_fails_before_the_journals(
    tmp_path: Path, key: str
) -> None:
    """Before: `mrs serve` probed the ops ports (a bind let go) and the server bound
    them only after its journals were open and the boot epoch committed, so a port
    taken in between failed the start after the epoch was bumped (MrsRestarted fired,
    the journals changed) though operations.md says a failed start leaves the
    journals exactly as they were."""
    port = free_port()
    config = write_single_group_config(
        tmp_path / "bus", group_extra=f'[group.ops]\n{key} = "127.0.0.1:{port}"'
    )
    group = GroupProcess(config, 1)
    group.start()
    assert status_json("--address", group.address)["epoch"] == 1
    assert group.terminate() == 0
    before = _journal_digest(config)
    script = tmp_path / "take_port.py"
    script.write_text(TAKE_PORT_AT_SERVE.format(port=port))
    result = subprocess.run(
        [sys.executable, str(script), "serve", "--config", str(config), "--group", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "READY" not in result.stdout and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"mrs: {config}: group 1 (NYC) ops.{key} = 127.0.0.1:{port}: the port is in use "
        f"by another process; stop it or change {key}"
    )
    assert _journal_digest(config) == before  # nothing stored changed
    group.start()
    try:
        assert status_json("--address", group.address)["epoch"] == 2  # not 3
    finally:
        group.terminate()


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _series(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({"group": "1", **labels}.items()))


PSB_STORED = {"status": "SUCCESS", "delivery_status": "STORED", "uma_status": "NO_UMA"}
SERIES_AT_START = [
    _series("mrs_puts_total", **PSB_STORED),
    _series("mrs_puts_total", **{**PSB_STORED, "delivery_status": "ENQUEUED"}),
    _series("mrs_puts_total", **{**PSB_STORED, "delivery_status": "SAF_FORCED"}),
    _series("mrs_puts_total", status="SUCCESS", delivery_status="SUCCESS", uma_status="UMA_NA"),
    _series("mrs_acks_total", **PSB_STORED),
    _series("mrs_gets_total", delivery_status="CONFIRMREQ"),
    _series("mrs_gets_total", delivery_status="POSSDUPL"),
    _series("mrs_gets_empty_total", status="TIMEOUT"),
    _series("mrs_gets_empty_total", status="NOMOREMSG"),
    _series("mrs_confirms_total", status="SUCCESS"),
    _series("mrs_link_messages_sent_total", peer="2"),
]


def test_the_counters_a_rate_panel_reads_exist_at_zero_before_the_first_burst(
    tmp_path: Path,
) -> None:
    """Before: a labelled counter's series appeared only at its first increment, already
    above 0, and `rate()` counts nothing before a series' first sample: the burst of
    puts, gets and confirms that made a series was missing from every rate panel of
    the documented dashboard (and a group restarted under load showed no traffic for
    its first minute)."""
    config = write_single_group_config(
        tmp_path / "bus",
        group_extra='[group.ops]\nmetrics_listen = "127.0.0.1:0"',
        queues='[[group.queue]]\nid = 10\nname = "ORDERS"\n'
        f'[[group]]\nid = 2\nname = "LDN"\nlisten = "127.0.0.1:{free_port()}"\n'
        'data_dir = "g2"\n[[link]]\ngroups = [1, 2]\n',
    )
    group = GroupProcess(config, 1)
    group.start()
    try:
        url = status_json("--address", group.address)["endpoints"]["metrics"]
        at_start = _scrape(url)
        assert {series: at_start.get(series) for series in SERIES_AT_START} == dict.fromkeys(
            SERIES_AT_START, 0.0
        )
        with connect_sync(group.address, "ORDERS") as client:
            client.put(b"x", "1.10", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
            client.get(timeout=10).confirm()
        after = _scrape(url)
    finally:
        group.terminate()
    assert after[SERIES_AT_START[0]] == 1  # the series seen at 0 counted the put
    assert after[_series("mrs_gets_total", delivery_status="CONFIRMREQ")] == 1
    assert after[_series("mrs_confirms_total", status="SUCCESS")] == 1


def _dashboard_expr(title_start: str) -> str:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    (panel,) = [p for p in dashboard["panels"] if p["title"].startswith(title_start)]
    return str(panel["targets"][0]["expr"]).replace("$group", ".*")


def _scraped(name: str, values: str, **labels: str) -> dict[str, str]:
    labels = {"job": "mrs", "instance": "h:9101", **labels}
    selector = ",".join(f'{key}="{value}"' for key, value in labels.items())
    return {"series": f"{name}{{{selector}}}", "values": values}


FIRST_BURSTS = {
    "Puts by delivery status and UMA": (
        "mrs_puts_total",
        {"status": "SUCCESS", "delivery_status": "DQF_FULL", "uma_status": "DLQ_SUCCESS"},
        '{delivery_status="DQF_FULL", uma_status="DLQ_SUCCESS"}',
    ),
    "Puts per second by status": (
        "mrs_puts_total",
        {"status": "SUCCESS", "delivery_status": "LINK_DOWN", "uma_status": "DISC_SUCCESS"},
        '{status="SUCCESS"}',
    ),
    "Failed requests per second": (
        "mrs_request_failures_total",
        {"status": "NOTAUTHORIZED"},
        '{status="NOTAUTHORIZED"}',
    ),
}


@pytest.mark.parametrize("title", list(FIRST_BURSTS))
def test_the_dashboard_shows_a_first_burst_of_a_series_not_made_at_start(
    tmp_path: Path, title: str
) -> None:
    """Before: these panels were `rate()` alone, and a series of an outcome not made at
    0 at start (a UMA's: a hundred per group; a refusal's) is born at its first
    increment, so a first burst of dead-lettered puts or of refused requests showed as
    0. They now count a series new in the last minute from 0 (unless Prometheus itself
    was not scraping the group a minute before: then every series would look new)."""
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: `bash .ci/system-packages --tests`"
    expr = _dashboard_expr(title)
    name, labels, shown = FIRST_BURSTS[title]
    labels = {"group": "1", **labels}

    def at(eval_time: str, value: float) -> dict:
        return {
            "expr": expr,
            "eval_time": eval_time,
            "exp_samples": [{"labels": shown, "value": value}],
        }

    tests = [
        {  # 6 at minute 10 (its first sample): 6 in the minute, 0.1 a second
            "interval": "15s",
            "input_series": [_scraped("up", "1x120"), _scraped(name, "_x40 6x80", **labels)],
            "promql_expr_test": [at("10m30s", 0.1), at("15m", 0)],
        },
        {  # counted before Prometheus came up at minute 10: no burst to show
            "interval": "15s",
            "input_series": [_scraped("up", "_x40 1x80"), _scraped(name, "_x40 7x80", **labels)],
            "promql_expr_test": [at("10m30s", 0)],
        },
    ]
    (tmp_path / "tests.yml").write_text(json.dumps({"tests": tests}))  # JSON is YAML
    done = subprocess.run(
        [promtool, "test", "rules", "tests.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
