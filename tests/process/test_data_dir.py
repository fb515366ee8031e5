"""One server per data directory, and a data directory that vanishes under a running
server stops it: real `mrs serve` processes, SIGKILL, real files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from clients import DeliveryMode, MrsError, Status, Uma, connect
from sim.processes import GroupProcess


def _serve_command(bus) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mrs",
        "serve",
        "--config",
        str(bus.config_path),
        "--group",
        "1",
    ]


def _second_server(bus) -> subprocess.CompletedProcess:
    return subprocess.run(_serve_command(bus), capture_output=True, text=True, timeout=60)


async def _put(address: str, body: bytes) -> int:
    async with connect(address, queue="SENDER") as sender:
        psb = await sender.put(body, target="ORDERS", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED
        return psb.seq


async def test_a_second_server_on_the_same_data_dir_is_refused_naming_the_pid(make_bus) -> None:
    bus = make_bus()
    await _put(bus.address, b"only once")
    second = _second_server(bus)
    assert second.returncode == 1
    lines = [line for line in second.stderr.splitlines() if line.startswith("mrs:")]
    assert lines == [
        f"mrs: data_dir {bus.data_dir} is in use by another mrs serve "
        f"(pid {bus.process.process.pid}); one server per data directory"
    ]
    assert "Traceback" not in second.stderr
    assert "READY" not in second.stdout
    # The journal tools read without the lock while the server runs.
    dump = subprocess.run(
        [
            sys.executable,
            "-m",
            "mrs",
            "dump",
            "dqf",
            "--json",
            "--data-dir",
            str(bus.data_dir),
            "--group",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dump.returncode == 0, dump.stderr
    assert len(dump.stdout.splitlines()) == 1
    # SIGKILL: the kernel drops the lock, so a crash never leaves the directory locked.
    bus.kill()
    address = bus.start()
    async with connect(address, queue="ORDERS") as receiver:
        message = await receiver.get(timeout=5)
        assert message.body == b"only once"


def _wait_exit(process: GroupProcess, timeout_s: float = 30.0) -> int:
    return process.process.wait(timeout=timeout_s)


@pytest.mark.parametrize("how", ["deleted", "replaced", "deleted-idle"])
async def test_a_data_dir_deleted_or_replaced_under_a_running_server_stops_it(
    make_bus, how: str
) -> None:
    bus = make_bus()
    for index in range(5):
        await _put(bus.address, b"before %d" % index)
    if how.startswith("deleted"):
        shutil.rmtree(bus.data_dir)
    else:
        saved = bus.data_dir.with_name("g1-saved")
        shutil.copytree(bus.data_dir, saved)
        shutil.rmtree(bus.data_dir)
        os.rename(saved, bus.data_dir)
    # Nothing put from now on is acknowledged as stored.
    stored_after = 0
    if how == "deleted-idle":  # no commit to notice it: the timer does
        assert _wait_exit(bus.process) == 1
    try:
        async with connect(bus.address, queue="SENDER") as sender:
            for index in range(5):
                psb = await sender.put(
                    b"after %d" % index,
                    target="ORDERS",
                    delivery=DeliveryMode.WF_DQF,
                    uma=Uma.DISC,
                    timeout=10,
                )
                stored_after += psb.delivery_status == Status.STORED
    except (MrsError, OSError):
        pass  # the server stopped while we were putting: nothing acknowledged
    assert stored_after == 0
    assert _wait_exit(bus.process) == 1
    log_text = bus.log_text()
    assert f"mrs: data_dir {bus.data_dir} was" in log_text
    assert "CRITICAL" in log_text
    assert "Traceback" not in log_text


async def test_a_group_pointed_at_another_groups_data_dir_refuses_it_and_loses_nothing(
    make_bus,
) -> None:
    """An unreplicated group records its owner in its data directory (group.json, as
    an instance does); another group pointed at it by a copied config block refuses
    to start with one line, before opening anything, and the owner's message stays."""
    bus = make_bus()
    await _put(bus.address, b"kept")
    bus.process.terminate()
    assert json.loads((bus.data_dir / "group.json").read_text()) == {
        "group_id": 1,
        "group": "NYC",
        "coordinator": "/mrs/1",  # what its instances would record, were it replicated
    }
    before = {path.name: path.read_bytes() for path in bus.data_dir.rglob("*.mdb")}
    text = bus.config_path.read_text()
    assert 'id = 1\nname = "NYC"' in text
    bus.config_path.write_text(text.replace('id = 1\nname = "NYC"', 'id = 2\nname = "LDN"'))
    command = _serve_command(bus)
    command[-1] = "2"
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"mrs: data_dir {bus.data_dir} belongs to group 1 (NYC, coordinator key /mrs/1), "
        "not to group 2 (LDN, coordinator key /mrs/2): point its data_dir at its own "
        "directory; nothing was opened"
    ]
    assert {path.name: path.read_bytes() for path in bus.data_dir.rglob("*.mdb")} == before
    bus.config_path.write_text(text)
    bus.start()
    async with connect(bus.address, queue="ORDERS") as consumer:
        message = await consumer.get(timeout=10)
        assert message.body == b"kept"
