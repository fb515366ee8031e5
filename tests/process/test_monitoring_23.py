"""What an operator who builds alerts and scripts on MRS's monitoring depends on,
probed with real `mrs serve` processes: the documented alert rules run through
Prometheus' own rule tester against the series a real group exported for AK and NN
puts (whose PSB says UMA_NA: no UMA has run yet), and `mrs status` given an address
where no group listens but another program answers (a group's own metrics or web
port, an SSH server) says so in one line instead of "is up but REFUSED".
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from clients import connect_sync
from mrs.model import DeliveryMode, Psb, Status, Uma
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.cli_helpers import run_mrs, status_json

DOCS = Path(__file__).resolve().parents[2] / "docs"
METRICS = '[group.ops]\nmetrics_listen = "127.0.0.1:0"\nweb_listen = "127.0.0.1:0"\n'


@pytest.fixture
def nyc_alone(tmp_path: Path) -> Iterator[GroupProcess]:
    """Group 1 (NYC, metrics and web view on) running, linked to group 2 (LDN), which
    is never started: its link is down."""
    ports = [free_port() for _ in range(2)]
    groups = [
        f'[[group]]\nid = {group}\nname = "{name}"\nlisten = "127.0.0.1:{port}"\n'
        f'data_dir = "g{group}"\n{METRICS}[[group.queue]]\nid = 10\nname = "ORDERS"\n'
        for group, (name, port) in enumerate(zip(("NYC", "LDN"), ports, strict=True), start=1)
    ]
    config = tmp_path / "bus.toml"
    config.write_text("\n".join(groups) + "\n[[link]]\ngroups = [1, 2]\n")
    nyc = GroupProcess(config, 1)
    nyc.start()
    try:
        yield nyc
    finally:
        nyc.terminate()


def _puts_scraped(
    url: str, name: str = "mrs_puts_total"
) -> dict[tuple[tuple[str, str], ...], float]:
    """Each `name` series the endpoint serves: its labels -> its value."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def _documented_rules() -> str:
    operations = (DOCS / "operations.md").read_text()
    return operations.split("### Alerting", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]


def _series_of(
    puts: dict[tuple[tuple[str, str], ...], float], name: str = "mrs_puts_total"
) -> list[dict]:
    """The scraped series as Prometheus would have them from minute 0, scraped every
    15 s as job mrs, each growing by its scraped value per scrape (puts keep coming)."""
    scraped = {"job": "mrs", "instance": "h:9101"}
    series = [{"series": 'up{job="mrs",instance="h:9101"}', "values": "1x80"}]
    for labels, value in puts.items():
        selector = ",".join(f'{k}="{v}"' for k, v in {**scraped, **dict(labels)}.items())
        series.append({"series": f"{name}{{{selector}}}", "values": f"0+{value:g}x80"})
    return series


def _promtool(tmp_path: Path, tests: list[dict]) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    assert promtool is not None, (
        "promtool is missing: `bash .ci/system-packages --tests` installs it (Debian package "
        "prometheus)"
    )
    (tmp_path / "rules.yml").write_text(_documented_rules())
    unit = {"rule_files": ["rules.yml"], "evaluation_interval": "15s", "tests": tests}
    (tmp_path / "tests.yml").write_text(json.dumps(unit))  # JSON is YAML
    return subprocess.run(
        [promtool, "test", "rules", "tests.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ak_and_nn_puts_do_not_fire_the_undeliverable_puts_alert(
    nyc_alone: GroupProcess, tmp_path: Path
) -> None:
    """Before: the rule took every `uma_status` but NO_UMA as a UMA that ran, and an
    AK or NN put is answered UMA_NA (MessageQ's "not applicable": its outcome comes
    later, in the MRS_ACK, or never), so a bus whose senders put AK or NN fired
    MrsUndeliverablePuts all day while every message was delivered."""
    with connect_sync(nyc_alone.address, "ORDERS") as client:
        for mode in (DeliveryMode.AK_DQF, DeliveryMode.NN_DQF, DeliveryMode.AK_MEM):
            assert client.put(b"fine", "1.10", delivery=mode).uma_status is Status.UMA_NA
        assert client.put(b"fine", "1.10", delivery=DeliveryMode.WF_DQF).stored
        url = status_json("--address", nyc_alone.address)["endpoints"]["metrics"]
        healthy = _puts_scraped(url)
        lost = client.put(b"to LDN", "2.10", delivery=DeliveryMode.WF_MEM, uma=Uma.DLQ)
        assert (lost.delivery_status, lost.uma_status) == (Status.LINK_DOWN, Status.DLQ_SUCCESS)
        incident = _puts_scraped(url)
    assert {dict(labels)["uma_status"] for labels in healthy} == {"UMA_NA", "NO_UMA"}
    ran = {"severity": "warning", "group": "1", "delivery_status": "LINK_DOWN"}
    done = _promtool(
        tmp_path,
        [
            {
                "interval": "15s",
                "input_series": _series_of(healthy),
                "alert_rule_test": [{"eval_time": "11m", "alertname": "MrsUndeliverablePuts"}],
            },
            {
                "interval": "15s",
                "input_series": _series_of(incident),
                "alert_rule_test": [
                    {
                        "eval_time": "11m",
                        "alertname": "MrsUndeliverablePuts",
                        "exp_alerts": [{"exp_labels": {**ran, "uma_status": "DLQ_SUCCESS"}}],
                    }
                ],
            },
        ],
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_ak_puts_outcome_is_counted_from_its_mrs_ack_and_alerts(
    nyc_alone: GroupProcess, tmp_path: Path
) -> None:
    """An AK put is answered UMA_NA at once; its outcome comes in its MRS_ACK, which no
    metric counted: an AK_MEM put discarded over a down link showed nowhere, and no
    documented alert could fire. `mrs_acks_total` counts each MRS_ACK by its PSB,
    and the documented MrsUndeliverableAkPuts fires on a UMA that ran, not on STORED."""

    def next_mrs_ack(client) -> Psb:
        """The next MRS_ACK on ORDERS (the sender's queue, where its own put lands too)."""
        while not (message := client.get(timeout=10)).is_mrs_ack:
            client.confirm(message.seq)
        return message.ack_psb()

    with connect_sync(nyc_alone.address, "ORDERS") as client:
        assert client.put(b"fine", "1.10", delivery=DeliveryMode.AK_DQF).uma_status is Status.UMA_NA
        assert next_mrs_ack(client).delivery_status == Status.STORED
        url = status_json("--address", nyc_alone.address)["endpoints"]["metrics"]
        healthy = _puts_scraped(url, "mrs_acks_total")
        client.put(b"to LDN", "2.10", delivery=DeliveryMode.AK_MEM, uma=Uma.DISC)
        psb = next_mrs_ack(client)
        assert (psb.delivery_status, psb.uma_status) == (Status.LINK_DOWN, Status.DISC_SUCCESS)
        incident = _puts_scraped(url, "mrs_acks_total")
    counted = [dict(labels)["delivery_status"] for labels, value in healthy.items() if value]
    assert counted == ["STORED"]  # the other outcomes made at 0 at start stay 0
    discarded = {dict(labels)["uma_status"]: value for labels, value in incident.items() if value}
    assert discarded == {"NO_UMA": 1.0, "DISC_SUCCESS": 1.0}
    ran = {"severity": "warning", "group": "1", "delivery_status": "LINK_DOWN"}
    done = _promtool(
        tmp_path,
        [
            {
                "interval": "15s",
                "input_series": _series_of(healthy, "mrs_acks_total"),
                "alert_rule_test": [{"eval_time": "11m", "alertname": "MrsUndeliverableAkPuts"}],
            },
            {
                "interval": "15s",
                "input_series": _series_of(incident, "mrs_acks_total"),
                "alert_rule_test": [
                    {
                        "eval_time": "11m",
                        "alertname": "MrsUndeliverableAkPuts",
                        "exp_alerts": [{"exp_labels": {**ran, "uma_status": "DISC_SUCCESS"}}],
                    }
                ],
            },
        ],
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def ssh_like_server() -> Iterator[str]:
    """HOST:PORT of a program that greets every connection with an SSH banner."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    conn.recv(1024)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def _one_line_not_a_group(address: str) -> str:
    started = time.monotonic()
    done = run_mrs("status", "--address", address, "--timeout", "10")
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"mrs: no group at {address}: something listens there but "), lines
    assert "REFUSED" not in lines[0] and "is it running" not in lines[0], lines
    assert time.monotonic() - started < 8, "waited for the timeout instead of naming the program"
    return lines[0]


def test_status_at_an_address_where_another_program_answers_says_so(
    nyc_alone: GroupProcess, ssh_like_server: str
) -> None:
    """Before: the program's first bytes, read as a frame length, became the client's
    PROTOCOL_ERROR and `mrs status` printed "group at ... is up but REFUSED the status
    request (PROTOCOL_ERROR: frame of 1397966893 bytes ...): see the group's log";
    the group's own metrics or web port waited for an HTTP request until the status
    timeout: "did not answer (no answer within 3 s); is it running?"."""
    endpoints = status_json("--address", nyc_alone.address)["endpoints"]
    for url in (endpoints["metrics"], endpoints["web"]):
        address = url.split("//", 1)[1].split("/", 1)[0]
        line = _one_line_not_a_group(address)
        assert "it answered 'HTTP'" in line and "metrics_listen or web_listen" in line, line
    assert "it answered 'SSH-'" in _one_line_not_a_group(ssh_like_server)


def test_the_bus_table_shows_such_a_group_down_with_why(tmp_path: Path, ssh_like_server) -> None:
    """The same in the whole bus's JSON: DOWN (not REFUSED), and the reason."""
    config = tmp_path / "bus.toml"
    config.write_text(
        f'[[group]]\nid = 1\nname = "NYC"\nlisten = "{ssh_like_server}"\ndata_dir = "g1"\n'
    )
    done = run_mrs("status", "--config", str(config), "--json")
    assert done.returncode == 1, done.stderr
    (group,) = json.loads(done.stdout)["groups"]
    assert group["state"] == "DOWN" and group["refused"] is None, group
    assert group["error"].startswith("something listens there but does not speak MRS"), group


def test_a_connection_closed_unanswered_is_said_in_words() -> None:
    """Before: the reason was the client's chain of texts, "mrs: LINK_DOWN: cannot
    connect to h:1: handshake with h:1 failed: mrs: LINK_DOWN: server closed the
    connection", inside the one line."""
    from mrs.errors import ConnectionLost
    from mrs.tools.bus_status import down_reason

    closed = ConnectionLost(
        Status.LINK_DOWN,
        "cannot connect to h:1: handshake with h:1 failed: mrs: LINK_DOWN: server closed "
        "the connection",
    )
    closed.closed_unanswered = True  # what the client marks (clients.link), not its words
    assert down_reason(closed) == "it took the connection and closed it without answering"
