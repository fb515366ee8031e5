"""Each series an alert reads, on real `mrs serve` processes scraped over HTTP: the
labels that make UMA activations visible, failures that are failures, links counted
at both ends, process_* metrics, and nothing an alert should not read."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from clients import MrsError, MrsTimeout, NoMoreMessages, connect_sync
from mrs.model import DeliveryMode, Uma
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.cli_helpers import status_json

METRICS = '[group.ops]\nmetrics_listen = "127.0.0.1:0"\n'


def _scrape(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _metrics_url(address: str) -> str:
    return status_json("--address", address)["endpoints"]["metrics"]


@pytest.fixture
def two_groups(tmp_path: Path) -> Iterator[tuple[GroupProcess, GroupProcess]]:
    """NYC (group 1, dials) and LDN (group 2, accepts), both with metrics; not started."""
    ports = [free_port() for _ in range(2)]
    config = tmp_path / "bus.toml"
    groups = []
    for group, (name, port) in enumerate(zip(("NYC", "LDN"), ports, strict=True), start=1):
        groups.append(
            f'[[group]]\nid = {group}\nname = "{name}"\nlisten = "127.0.0.1:{port}"\n'
            f'data_dir = "g{group}"\n{METRICS}[[group.queue]]\nid = 10\nname = "ORDERS"\n'
        )
    config.write_text("\n".join(groups) + "\n[[link]]\ngroups = [1, 2]\n")
    nyc, ldn = GroupProcess(config, 1), GroupProcess(config, 2)
    try:
        yield nyc, ldn
    finally:
        nyc.terminate()
        ldn.terminate()


def test_an_idle_consumer_raises_no_failure(make_bus) -> None:
    bus = make_bus(group_extra=METRICS)
    url = _metrics_url(bus.address)
    with connect_sync(bus.address, "ORDERS") as client:
        with pytest.raises(MrsTimeout):
            client.get(timeout=0.05)
        with pytest.raises(NoMoreMessages):
            client.get(timeout=0)
        assert status_json("--address", bus.address)["connections"]["clients"] == 1  # not the asker
        with pytest.raises(MrsError):  # a refused request is still a failure
            client.confirm(12345)  # never delivered
        samples = _scrape(url)
    group = ("group", "1")
    failures = {k: v for k, v in samples.items() if k[0] == "mrs_request_failures_total"}
    assert ("mrs_request_failures_total", (group, ("status", "NOMOREMSG"))) not in failures
    assert samples[("mrs_gets_empty_total", (group, ("status", "TIMEOUT")))] == 1
    assert samples[("mrs_gets_empty_total", (group, ("status", "NOMOREMSG")))] == 1
    assert ("mrs_request_failures_total", (group, ("status", "TIMEOUT"))) not in failures
    assert sum(failures.values()) == 1


def test_saf_forced_and_link_down_puts_are_counted_as_such(two_groups) -> None:
    nyc, _ldn = two_groups
    nyc.start()
    with connect_sync(nyc.address, "ORDERS") as client:
        first = client.put(b"a", "2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)
        second = client.put(b"b", "2.10", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)
    assert first.delivery_status.name == "LINK_DOWN" and first.uma_status.name == "SAF_SUCCESS"
    assert second.delivery_status.name == "SAF_FORCED"
    samples = _scrape(_metrics_url(nyc.address))
    puts = {
        dict(labels)["delivery_status"] + "/" + dict(labels)["uma_status"]: value
        for (name, labels), value in samples.items()
        if name == "mrs_puts_total" and value  # not the outcomes made at 0 at start
    }
    assert puts == {"LINK_DOWN/SAF_SUCCESS": 1, "SAF_FORCED/NO_UMA": 1}


def test_both_ends_of_a_link_count_it(two_groups) -> None:
    nyc, ldn = two_groups
    nyc.start()
    ldn.start()
    with connect_sync(nyc.address, "ORDERS") as client:
        assert client.put(b"a", "2.10", delivery=DeliveryMode.WF_SAF).stored
    with connect_sync(ldn.address, "ORDERS") as consumer:  # it arrives over the link
        consumer.get(timeout=60).confirm()
    for process in (nyc, ldn):
        status = status_json("--address", process.address)
        assert status["connections"]["links"] == 1, process.group_id
        samples = _scrape(status["endpoints"]["metrics"])
        group = ("group", str(process.group_id))
        assert samples[("mrs_connections", (group, ("kind", "links")))] == 1


def test_process_metrics_and_no_created_or_duplicated_series(make_bus) -> None:
    bus = make_bus(group_extra=METRICS)
    with connect_sync(bus.address, "ORDERS") as client:
        client.put(b"x", "1.10", delivery=DeliveryMode.WF_DQF)
        client.get(timeout=10).confirm()
    samples = _scrape(_metrics_url(bus.address))
    names = {name for name, _ in samples}
    assert samples[("process_resident_memory_bytes", ())] > 1_000_000
    assert samples[("process_open_fds", ())] >= 3
    assert ("process_cpu_seconds_total", ()) in samples
    assert not {name for name in names if name.endswith("_created")}
    assert not names & {"mrs_dlj_records", "mrs_dlq_depth"}
    group = ("group", "1")
    assert samples[("mrs_journal_records", (group, ("journal", "dlj")))] == 0
    assert samples[("mrs_queue_depth", (group, ("name", "DLQ"), ("queue", "1.96")))] == 0
