"""Memory, disk and journal alarms on real `mrs serve` processes: a bound nearly
reached is raised in the status JSON (the web page's `/api/status`), in `mrs status`
notes and in the `mrs_alarms` gauge, before MRS refuses at the bound.

Each alarm is driven by real parts: a queue filled near its `dqf_messages_max`, a
1 MiB LMDB map filled by puts, memory messages near `queue_bytes_max`, and a journal
whose reserve (5% of a 16 TiB journal_bytes_max) is more than the real disk has free.
"""

from __future__ import annotations

import json
import math
import shutil
import urllib.request

import pytest

from clients import MrsError, connect_sync
from mrs.limits import ALARM_USE_HIGH
from mrs.model import DeliveryMode
from mrs.storage.journal_measure import disk_free_bytes
from mrs.storage.journal_reserve import reserve_bytes
from tests.cli_helpers import run_mrs, status_json

OPS = '\n[group.ops]\nweb_listen = "127.0.0.1:0"\nmetrics_listen = "127.0.0.1:0"\n'
QUEUES = """
[[group.queue]]
id = 10
name = "ORDERS"
[[group.queue]]
id = 11
name = "EVENTS"
recoverable = false
messages_max = 100
"""


def _endpoint(bus, name: str) -> str:
    """The group's `web` or `metrics` endpoint, once its status lists it (the
    endpoints may start just after the server printed READY)."""
    for _ in range(100):
        endpoints = status_json("--address", bus.address)["endpoints"]
        if name in endpoints:
            return endpoints[name]
    raise AssertionError(f"the group never listed its {name} endpoint")


def _page_status(bus) -> dict:
    """The group's own web page's JSON (what the page's Alarms table draws)."""
    url = _endpoint(bus, "web")
    with urllib.request.urlopen(url + "api/status", timeout=10) as response:
        return json.loads(response.read())["groups"][0]["status"]


def _alarms(bus, kind: str) -> list[dict]:
    return [alarm for alarm in _page_status(bus)["alarms"] if alarm["alarm"] == kind]


def _alarm_gauge(bus, kind: str) -> float:
    url = _endpoint(bus, "metrics")
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    wanted = f'mrs_alarms{{alarm="{kind}",group="1"}} '
    [line] = [line for line in text.splitlines() if line.startswith(wanted)]
    return float(line.split()[-1])


def test_a_queue_filled_near_dqf_messages_max_raises_the_dqf_alarm(make_bus) -> None:
    bus = make_bus(limits="dqf_messages_max = 10" + OPS, queues=QUEUES)
    threshold = math.ceil(10 * ALARM_USE_HIGH)
    with connect_sync(bus.address, "ORDERS") as client:
        for i in range(threshold - 1):
            client.put(f"order {i}".encode(), "1.10", delivery=DeliveryMode.WF_DQF)
        assert _alarms(bus, "dqf") == [] and _alarm_gauge(bus, "dqf") == 0
        client.put(b"one more", "1.10", delivery=DeliveryMode.WF_DQF)
    [alarm] = _alarms(bus, "dqf")
    assert (alarm["value"], alarm["threshold"], alarm["limit"]) == (threshold, threshold, 10)
    assert alarm["words"] == (
        f"the DQF holds {threshold} of 10 (80%); alarm from {threshold}, new messages refused at 10"
    )
    assert _alarm_gauge(bus, "dqf") == 1 and _alarm_gauge(bus, "journal") == 0
    table = run_mrs("status", "--address", bus.address)
    assert table.returncode == 0, table.stderr
    assert "ALARM the DQF holds 8 of 10" in " ".join(table.stdout.split())
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return  # the browser half needs chromium (.ci/system-packages --tests)
    from tests.browser_cdp import Browser

    browser = Browser(chromium)
    try:
        browser.open(_endpoint(bus, "web"))
        browser.until("document.body.dataset.alarms === '1'")
        shown = browser.evaluate(
            "[...document.querySelectorAll('[data-key^=\"1.alarm.dqf.dqf\"]')]"
            ".map(c => c.textContent)"
        )
        hidden = browser.evaluate("document.getElementById('alarms-none').hidden")
    finally:
        browser.close()
    assert shown == ["DQF", "8", alarm["words"]] and hidden is True


def test_memory_messages_near_queue_and_connection_bytes_max_raise_memory_alarms(
    make_bus,
) -> None:
    guards = "\n[group.guards]\nqueue_bytes_max = 10000\nconnection_bytes_max = 10000\n"
    bus = make_bus(limits=OPS + guards, queues=QUEUES)
    with connect_sync(bus.address, "ORDERS") as client:
        client.put(b"m" * 4000, "1.11", delivery=DeliveryMode.WF_MEM)
        assert _alarms(bus, "memory") == []
        client.put(b"m" * 4000, "1.11", delivery=DeliveryMode.WF_MEM)
        queue, connection = sorted(_alarms(bus, "memory"), key=lambda a: a["subject"])
        assert _alarm_gauge(bus, "memory") == 2
    assert queue["subject"] == "1.11" and queue["unit"] == "bytes"
    assert (queue["value"], queue["threshold"], queue["limit"]) == (8000, 8000, 10000)
    assert "queue 1.11 holds 7.8 KiB of memory messages, 80% of queue_bytes_max" in queue["words"]
    assert connection["subject"].startswith("connection 127.0.0.1:")
    assert (connection["value"], connection["limit"]) == (8000, 10000)
    assert "of connection_bytes_max 9.8 KiB" in connection["words"]


def test_a_small_lmdb_map_raises_the_journal_alarm_before_puts_are_refused(make_bus) -> None:
    """journal_bytes_max = 1 MiB: puts of 2 KiB fill the map; the alarm is raised
    while puts are still accepted, i.e. before the reserve refuses them."""
    limits = "journal_bytes_max = 1048576\nmessage_bytes_max = 4096" + OPS
    bus = make_bus(limits=limits, queues=QUEUES)
    raised_after = None
    with connect_sync(bus.address, "ORDERS") as client:
        for i in range(600):
            try:
                client.put(b"j" * 2048, "1.10", delivery=DeliveryMode.WF_DQF)
            except MrsError as error:
                pytest.fail(f"put {i} refused before the journal alarm: {error}")
            if i % 10 == 9 and _alarms(bus, "journal"):
                raised_after = i + 1
                break
    assert raised_after is not None, "600 puts of 2 KiB never raised the journal alarm"
    [alarm] = _alarms(bus, "journal")
    limit = 1048576 - reserve_bytes(1048576, 4096)
    assert alarm["limit"] == limit and alarm["threshold"] == math.ceil(limit * ALARM_USE_HIGH)
    assert alarm["value"] >= alarm["threshold"]
    assert "where new recoverable messages are refused" in alarm["words"]
    assert _alarm_gauge(bus, "journal") == 1


def test_a_reserve_larger_than_the_free_disk_raises_the_disk_alarm(make_bus, tmp_path) -> None:
    """A 16 TiB journal_bytes_max keeps a reserve of 0.8 TiB: more than this disk has
    free, so the real statvfs of the data directory is under the alarm threshold."""
    cap_bytes = 1 << 44
    reserve = reserve_bytes(cap_bytes, 1 << 20)
    bus_dir_free = disk_free_bytes(tmp_path)
    if bus_dir_free >= 2 * reserve:
        pytest.skip(f"the disk has {bus_dir_free} bytes free: more than two reserves")
    limits = f"journal_bytes_max = {cap_bytes}" + OPS + "journal_bytes_initial = 1048576\n"
    bus = make_bus(limits=limits, queues=QUEUES)
    [alarm] = _alarms(bus, "disk")
    journal = _page_status(bus)["journal"]
    assert alarm["limit"] == journal["reserve_bytes"] == reserve
    assert alarm["value"] < alarm["threshold"] == 2 * reserve
    assert alarm["words"].startswith(f"disk of {bus.data_dir} has ")
    assert _alarm_gauge(bus, "disk") == 1
    metrics = _endpoint(bus, "metrics")
    with urllib.request.urlopen(metrics, timeout=10) as response:
        lines = response.read().decode().splitlines()
    gauges = {line.split()[0]: float(line.split()[1]) for line in lines if not line.startswith("#")}
    assert gauges['mrs_journal_reserve_bytes{group="1"}'] == reserve
    assert gauges['mrs_disk_free_bytes{group="1"}'] < 2 * reserve


def test_a_quiet_group_has_no_alarm(make_bus) -> None:
    bus = make_bus(limits=OPS, queues=QUEUES)
    status = _page_status(bus)
    assert status["alarms"] == []
    assert status["journal"]["disk_free_bytes"] > status["journal"]["reserve_bytes"] > 0
    assert all(_alarm_gauge(bus, kind) == 0 for kind in ("memory", "disk", "journal", "saf"))
