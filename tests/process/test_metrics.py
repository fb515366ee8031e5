"""The Prometheus endpoint of a real group, scraped and parsed with prometheus_client."""

from __future__ import annotations

import json
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from clients import connect_sync
from mrs.model import DeliveryMode
from sim.ports import free_port
from tests.cli_helpers import status_json

BODY = b"y" * 20_000


def _status(address: str) -> dict:
    return status_json("--address", address)


def _families(url: str) -> list:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return list(text_string_to_metric_families(response.read().decode()))


def _scrape(url: str) -> dict[tuple[str, tuple], float]:
    samples = {}
    for family in _families(url):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_endpoint_counts_traffic_and_matches_status(make_bus) -> None:
    bus = make_bus(
        limits="journal_bytes_max = 2097152\nmessage_bytes_max = 100000",
        group_extra='pcj_default = true\n[group.ops]\nmetrics_listen = "127.0.0.1:0"\n'
        "journal_warn_percent = [40]",
    )
    url = _status(bus.address)["endpoints"]["metrics"]
    with connect_sync(bus.address, "ORDERS") as client:
        for _ in range(60):  # ~1.2 MB of a 2 MiB map: past the 40% threshold
            assert client.put(BODY, "1.10", delivery=DeliveryMode.WF_DQF).stored
        first = client.get(timeout=10)
        first.confirm()
        client.get(timeout=10)  # delivered, left unconfirmed while attached
        samples = _scrape(url)
        status = _status(bus.address)
    group = ("group", "1")
    stored = (("delivery_status", "STORED"), group, ("status", "SUCCESS"), ("uma_status", "NO_UMA"))
    assert samples[("mrs_puts_total", stored)] == 60
    gets = sum(v for (name, _), v in samples.items() if name == "mrs_gets_total")
    assert gets == 2
    assert samples[("mrs_confirms_total", (group, ("status", "SUCCESS")))] == 1
    queue = (group, ("name", "ORDERS"), ("queue", "1.10"))
    assert samples[("mrs_queue_depth", queue)] == status["queues"]["1.10"]["pending"] == 58
    assert samples[("mrs_queue_unconfirmed", queue)] == 1
    assert samples[("mrs_dqf_depth", queue)] == status["queues"]["1.10"]["dqf_depth"] == 59
    assert samples[("mrs_journal_records", (group, ("journal", "dqf")))] == 59
    assert samples[("mrs_journal_records", (group, ("journal", "pcj")))] == 1
    assert samples[("mrs_journal_cap_bytes", (group,))] == 2097152
    used = samples[("mrs_journal_used_bytes", (group,))]
    assert used / 2097152 >= 0.40 and "threshold 40%" in bus.log_text()
    assert samples[("mrs_commit_seconds_count", (group,))] >= 1
    assert samples[("mrs_messages_per_commit_count", (group,))] >= 1
    assert samples[("mrs_connections", (group, ("kind", "clients")))] >= 0
    assert ("mrs_build_info", (group, ("name", "NYC"), ("version", status["version"]))) in samples


def test_metrics_are_off_unless_configured_and_bad_requests_are_refused(make_bus) -> None:
    bus = make_bus()
    assert _status(bus.address)["endpoints"] == {}
    other = make_bus(group_extra='[group.ops]\nmetrics_listen = "127.0.0.1:0"')
    url = _status(other.address)["endpoints"]["metrics"]
    request = urllib.request.Request(url, method="POST", data=b"x")
    try:
        urllib.request.urlopen(request, timeout=10)
    except urllib.error.HTTPError as error:
        assert error.code == 405
    else:
        raise AssertionError("POST was accepted")
    assert _scrape(url)  # still serving


def test_the_grafana_dashboard_queries_only_metrics_the_server_exports(make_bus) -> None:
    import re
    from pathlib import Path

    dashboard = json.loads(
        (Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text()
    )
    assert dashboard["panels"] and dashboard["__inputs"][0]["pluginId"] == "prometheus"
    bus = make_bus(group_extra='[group.ops]\nmetrics_listen = "127.0.0.1:0"')
    with connect_sync(bus.address, "ORDERS") as client:
        client.put(b"x", "1.10", delivery=DeliveryMode.WF_DQF)
        client.get(timeout=10).confirm()
    families = _families(_status(bus.address)["endpoints"]["metrics"])
    exported = {family.name for family in families}
    exported |= {sample.name for family in families for sample in family.samples}
    exported |= {f"{family.name}_total" for family in families if family.type == "counter"}
    queried = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            queried |= set(re.findall(r"\b(?:mrs|process)_[a-z_]+", target["expr"]))
    queried |= set(re.findall(r"\bmrs_[a-z_]+", dashboard["templating"]["list"][0]["query"]))
    missing = {name for name in queried if name not in exported}
    assert not missing, f"dashboard queries metrics the server does not export: {missing}"
    operations = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    rules = operations.split("### Alerting", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    expressions = re.findall(r"^\s+expr: (.+)$", rules, re.MULTILINE)
    assert len(expressions) >= 10
    alerted = {n for e in expressions for n in re.findall(r"\b(?:mrs|process)_[a-z_]+", e)}
    missing = {name for name in alerted if name not in exported}
    assert not missing, f"alerting rules query metrics the server does not export: {missing}"


def test_saf_backlog_and_drain_per_link(tmp_path) -> None:
    import time

    from sim.processes import GroupProcess

    ports = [free_port() for _ in range(2)]
    config = tmp_path / "bus.toml"
    config.write_text(f"""
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:{ports[0]}"
data_dir = "g1"
[group.ops]
metrics_listen = "127.0.0.1:0"
[[group.queue]]
id = 10
name = "ORDERS"
[[group]]
id = 2
name = "LDN"
listen = "127.0.0.1:{ports[1]}"
data_dir = "g2"
[[group.queue]]
id = 10
name = "ORDERS"
[[link]]
groups = [1, 2]
""")
    nyc, ldn = GroupProcess(config, 1), GroupProcess(config, 2)
    nyc.start()
    try:
        with connect_sync(nyc.address, "ORDERS") as client:
            for i in range(12):
                assert client.put(f"m{i}".encode(), "2.10", delivery=DeliveryMode.WF_SAF).stored
        url = _status(nyc.address)["endpoints"]["metrics"]
        link = (("group", "1"), ("peer", "2"))
        samples = _scrape(url)
        assert samples[("mrs_saf_backlog", link)] == 12
        assert samples[("mrs_link_up", link)] == 0
        ldn.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            samples = _scrape(url)
            if samples[("mrs_saf_backlog", link)] == 0:
                break
            time.sleep(0.2)
        assert samples[("mrs_saf_backlog", link)] == 0
        assert samples[("mrs_link_up", link)] == 1
        assert samples[("mrs_link_messages_sent_total", link)] == 12
    finally:
        nyc.terminate()
        ldn.terminate()


def test_a_drain_wait_is_shown_in_words() -> None:
    from mrs.tools.status_render import describe_wait

    wait = {"stuck_seq": 7, "status": "DQF_FULL", "reason": "target queue full",
            "waiting_behind": 3, "retry_in_s": 0.5}  # fmt: skip
    assert describe_wait(wait) == (
        "target queue full (DQF_FULL, seq 7, 3 behind it, retry in 0.5 s)"
    )
    assert describe_wait("link down") == "link down"
