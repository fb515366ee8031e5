"""`mrs status --config bus.toml`: every group of a real bus, as a table, JSON or live."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mrs
from clients import connect_sync
from mrs.model import DeliveryMode
from sim.ports import free_port
from sim.processes import GroupProcess


def _mrs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrs", *args], capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def three_group_bus(tmp_path: Path):
    """Groups 1 and 2 running and linked; group 3 configured but never started."""
    ports = [free_port() for _ in range(3)]
    text = ""
    for group_id, name, port in zip((1, 2, 3), ("NYC", "LDN", "TYO"), ports, strict=True):
        text += f"""
[[group]]
id = {group_id}
name = "{name}"
listen = "127.0.0.1:{port}"
data_dir = "g{group_id}"
pcj_default = true
[[group.queue]]
id = 10
name = "ORDERS"
"""
    text += "\n[[link]]\ngroups = [1, 2]\n"
    config = tmp_path / "bus.toml"
    config.write_text(text)
    processes = [GroupProcess(config, 1), GroupProcess(config, 2)]
    for process in processes:
        process.start()
    yield config, processes
    for process in processes:
        process.terminate()


def _bus_json(config: Path) -> tuple[int, dict]:
    result = _mrs("status", "--config", str(config), "--json")
    return result.returncode, json.loads(result.stdout)


def test_whole_bus_json_shows_up_and_down_groups_links_and_journals(three_group_bus) -> None:
    config, processes = three_group_bus
    with connect_sync(processes[0].address, "ORDERS") as client:
        for i in range(5):
            client.put(f"m{i}".encode(), "1.10", delivery=DeliveryMode.WF_DQF)
    deadline = time.monotonic() + 30
    while True:
        code, bus = _bus_json(config)
        groups = {g["group"]: g for g in bus["groups"]}
        link = groups[1]["status"]["links"]["2"] if groups[1]["up"] else {}
        if link.get("state") == "up" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert code == 1  # one group is down
    assert [g["up"] for g in bus["groups"]] == [True, True, False]
    assert "refused" in groups[3]["error"].lower()
    nyc = groups[1]["status"]
    assert link["state"] == "up" and link["saf_backlog"] == 0
    assert nyc["version"] == mrs.__version__ and nyc["uptime_s"] >= 0
    assert nyc["queues"]["1.10"]["pending"] == 5
    journal = nyc["journal"]
    assert journal["records"]["dqf"] == 5
    assert 0 < journal["used_bytes"] <= journal["map_bytes"] <= journal["cap_bytes"]


def test_the_table_shows_what_the_json_says(three_group_bus) -> None:
    config, processes = three_group_bus
    with connect_sync(processes[1].address, "ORDERS") as client:
        for i in range(3):
            client.put(f"m{i}".encode(), "2.10", delivery=DeliveryMode.WF_DQF)
    result = _mrs("status", "--config", str(config))
    assert result.returncode == 1, result.stderr
    table = result.stdout
    assert "2 of 3 groups up" in table
    assert "DOWN" in table and "refused" in table.lower()
    _, bus = _bus_json(config)
    ldn = bus["groups"][1]["status"]
    row = next(line for line in table.splitlines() if "2 LDN" in line and "UP" in line)
    assert str(ldn["journal"]["records"]["dqf"]) in row and ldn["version"] in row
    queue_row = next(line for line in table.splitlines() if "2.10" in line)
    assert "ORDERS" in queue_row and " 3 " in queue_row
    assert "Links" in table


def test_one_group_and_watch(three_group_bus) -> None:
    config, processes = three_group_bus
    single = _mrs("status", "--config", str(config), "--group", "2", "--json")
    assert single.returncode == 0 and json.loads(single.stdout)["name"] == "LDN"
    watch = _mrs("status", "--config", str(config), "--json", "--watch", "0.1", "--times", "2")
    frames = [json.loads(line) for line in watch.stdout.splitlines()]
    assert len(frames) == 2 and frames[1]["time_s"] >= frames[0]["time_s"]
    down = _mrs("status", "--config", str(config), "--group", "3")
    assert down.returncode == 1 and down.stderr.strip().count("\n") == 0
    assert "is it running" in down.stderr


def _mrs_env(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrs", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_the_table_reads_at_80_columns_with_names_and_words(three_group_bus) -> None:
    config, processes = three_group_bus
    with connect_sync(processes[0].address, "ORDERS") as client:
        client.put(b"m", "2.10", delivery=DeliveryMode.WF_SAF)
    with connect_sync(processes[1].address, "ORDERS") as consumer:  # over the link: it is up
        consumer.get(timeout=60).confirm()
    result = _mrs_env("status", "--config", str(config), COLUMNS="80")
    lines = result.stdout.splitlines()
    assert result.returncode == 1 and lines, result.stderr
    assert max(len(line.rstrip()) for line in lines) <= 80, result.stdout
    for process in processes:  # each address whole, on one line
        assert any(process.address in line for line in lines), process.address
    for repr_mark in ("{", "}", "=", "('", "[", "]"):
        assert repr_mark not in result.stdout, repr_mark
    for zero_note in ("quarantined", "guards", "dqf_held", "refused="):
        assert zero_note not in result.stdout
    assert any(line.startswith("1 NYC") and "2 LDN" in line for line in lines)  # a link
    down = next(line for line in lines if line.startswith("3 TYO") and "DOWN:" in line)
    assert "connection refused" in down


def test_notes_are_words_and_only_what_is_not_zero() -> None:
    from mrs.tools.status_render import group_notes

    quiet = {"quarantined": 0, "dqf_held_for_drains": {},
             "guards": {"refused": {}, "gone_before_served": 0},
             "corrupt_records": [], "new_field": {"a": 0}}  # fmt: skip
    assert group_notes(quiet) == []
    busy = {"quarantined": 2, "dqf_held_for_drains": {"2": 5},
            "guards": {"refused": {"clients_max": 3}, "gone_before_served": 40},
            "new_field": {"held_bytes": 7}}  # fmt: skip
    assert group_notes(busy) == [
        "2 quarantined records",
        "DQF room held for group 2's drain: 5",
        "refused 3 times by clients_max",
        "40 connections reset by their peers before they were served",
        "new field: held bytes 7",
    ]


def test_a_time_in_the_notes_is_a_utc_time_not_nanoseconds() -> None:
    """`mrs status` printed "pcj: default yes, segment 1, opened ns 1796540311629414623"."""
    from mrs.tools.status_render import group_notes

    rolled = {"pcj": {"default": True, "segment": 1, "opened_ns": 1796540311629414623}}
    assert group_notes(rolled) == ["pcj: default yes, segment 1, opened 2026-12-06 06:58:31 UTC"]


def test_times_without_watch_is_refused_in_one_line(three_group_bus) -> None:
    config, _ = three_group_bus
    result = _mrs("status", "--config", str(config), "--times", "3")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "--watch" in result.stderr


def test_watch_streams_each_refresh_when_piped(three_group_bus) -> None:
    config, _ = three_group_bus
    process = subprocess.Popen(
        [sys.executable, "-m", "mrs", "status", "--config", str(config), "--watch", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        headings = 0
        deadline = time.monotonic() + 30
        assert process.stdout is not None
        while headings < 2:  # two refreshes arrive while the command still runs
            readable, _, _ = select.select([process.stdout], [], [], deadline - time.monotonic())
            assert readable, "no refresh arrived within 30 s"
            line = process.stdout.readline()
            assert line, "the command ended"
            headings += b"groups up" in line
        assert process.poll() is None
    finally:
        process.kill()
        process.wait()


REPLICATED_WITH_PORT_0 = """\
[coordinator]
etcd = ["http://127.0.0.1:2379"]
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:0"
"""


def test_a_replicated_group_is_asked_at_its_instances_whatever_its_own_listen(
    tmp_path: Path,
) -> None:
    """A replicated group whose own `listen` has port 0 (its instances listen, not the
    group) was reported "listen port is 0 (chosen at start): use --address" instead of
    being asked at its instances."""
    import argparse

    from mrs.tools.bus_status import targets_from_args

    instances = "".join(
        f'[[group.instance]]\nname = "{name}"\nlisten = "127.0.0.1:{7101 + n}"\n'
        f'replication = "127.0.0.1:{7201 + n}"\ndata_dir = "r1{name}"\n'
        for n, name in enumerate("abc")
    )
    config = tmp_path / "bus.toml"
    config.write_text(REPLICATED_WITH_PORT_0 + instances)
    args = argparse.Namespace(address=None, config=config, group=None)
    (view,) = targets_from_args(args)[0]
    assert view.error is None
    assert view.address == "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"
