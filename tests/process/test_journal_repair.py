"""A damaged journal never kills the server (it refuses to start with one line naming
the file), and `mrs journal verify` / `mrs journal salvage` report the damage and copy
out every intact record. Real `mrs serve` processes and real, really damaged files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from clients import DeliveryMode, NoMoreMessages, Uma, connect
from sim.processes import ServerStartError

PAGE_BYTES = 4096


async def _fill(bus, count: int) -> None:
    async with connect(bus.address, queue="SENDER") as sender:
        for index in range(count):
            await sender.put(
                b"msg-%04d-" % index + b"x" * 150,
                target="ANYORDER",
                delivery=DeliveryMode.WF_DQF,
                uma=Uma.DISC,
            )


def _mrs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrs", *args], capture_output=True, text=True, timeout=120
    )


async def test_a_journal_lmdb_cannot_read_is_refused_in_one_line(make_bus) -> None:
    bus = make_bus()
    await _fill(bus, 100)
    bus.kill()
    data_file = bus.data_dir / "journals" / "data.mdb"
    # Cut the file short: LMDB would touch pages past its end and die of SIGBUS.
    os.truncate(data_file, data_file.stat().st_size // 2)
    with pytest.raises(ServerStartError):
        bus.start()
    assert bus.process.process.returncode == 1
    log_lines = bus.log_text().splitlines()
    refusal = [line for line in log_lines if line.startswith("mrs: ")]
    assert len(refusal) == 1
    assert f"journal {data_file} is damaged" in refusal[0]
    assert "mrs journal salvage" in refusal[0]
    assert not any("Traceback" in line for line in log_lines)


async def test_verify_and_salvage_copy_out_every_intact_record(make_bus, tmp_path) -> None:
    bus = make_bus()
    count = 300
    await _fill(bus, count)
    bus.kill()
    data_file = bus.data_dir / "journals" / "data.mdb"
    data = bytearray(data_file.read_bytes())
    # Damage one whole page (LMDB cannot read it) and one record (its checksum fails).
    page = data.find(b"msg-0150-") // PAGE_BYTES
    data[page * PAGE_BYTES : page * PAGE_BYTES + 16] = b"\xff" * 16
    body_at = data.find(b"msg-0010-")
    assert body_at // PAGE_BYTES != page
    data[body_at + 4] ^= 0xFF
    data_file.write_bytes(bytes(data))

    verify = _mrs("journal", "verify", "--config", str(bus.config_path), "--group", "1", "--json")
    assert verify.returncode == 1, verify.stderr
    report = json.loads(verify.stdout)
    dqf = next(item for item in report["databases"] if item["database"] == "dqf")
    assert not report["intact"] and dqf["damage"] and len(dqf["corrupt"]) == 1
    lost_on_page = count - 1 - dqf["readable"]
    assert 0 < lost_on_page < 40  # only what sat on the damaged page

    rescue = tmp_path / "rescued"
    salvage = _mrs(
        "journal", "salvage", "--config", str(bus.config_path), "--group", "1",
        "--to", str(rescue), "--json",
    )  # fmt: skip
    assert salvage.returncode == 0, salvage.stderr
    assert json.loads(salvage.stdout)["copied"] >= dqf["readable"]
    assert _mrs("journal", "verify", "--data-dir", str(rescue)).returncode == 0

    # A server on the salvaged copy delivers every intact message, once each.
    shutil.rmtree(bus.data_dir)
    shutil.copytree(rescue, bus.data_dir)
    address = bus.start()
    bodies = []
    async with connect(address, queue="ANYORDER") as receiver:
        while True:
            try:
                message = await receiver.get(timeout=0)
            except NoMoreMessages:
                break
            bodies.append(message.body[:8])
            await receiver.confirm(message.seq)
    assert len(bodies) == len(set(bodies)) == dqf["readable"]
    assert b"msg-0010" not in bodies and b"msg-0000" in bodies and b"msg-0299" in bodies
