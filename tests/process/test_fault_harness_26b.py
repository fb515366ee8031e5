"""The fault-injection harness as a tester uses it (docs/sim.md): the fault file a
real `mrs serve` reads (MRS_FAULT_FILE) and `mrs sim`'s command line."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from clients import DeliveryMode, Status
from sim import replicated_nemesis
from sim.delivery_check import DeliveryCheck
from sim.replicated_nemesis import Report
from tests.cli_helpers import run_mrs

WAIT_S_MAX = 60.0

FAULT_TEXTS = {
    # PowerShell's `echo EIO > fault` writes UTF-16 with a byte-order mark
    "utf-16": ("EIO".encode("utf-16"), "not ASCII text"),
    "typo": (b"ENOSCP\n", "'ENOSCP' is not a fault"),
    "bad delay": (b"SLOW 2s", "the delay must be seconds"),
}


@pytest.mark.parametrize("mistake", sorted(FAULT_TEXTS))
async def test_a_fault_file_the_tester_got_wrong_is_one_warning_and_no_fault(
    make_bus, tmp_path: Path, mistake: str
) -> None:
    """A typo in the fault file injected nothing without a word (the tester took the
    run for one under faults), and bytes that are not text (a UTF-16 file) took the
    server down: "mrs: unexpected error: UnicodeDecodeError", exit 1. Now each is one
    WARNING naming the file and what is wrong, once, and commits go on unfaulted."""
    data, words = FAULT_TEXTS[mistake]
    fault = tmp_path / "fault"
    fault.write_text("")
    bus = make_bus(env={"MRS_FAULT_FILE": str(fault)})
    async with bus.connect(queue="SENDER") as sender:
        fault.write_bytes(data)
        for body in (b"one", b"two"):
            psb = await sender.put(body, "ORDERS", delivery=DeliveryMode.WF_DQF)
            assert psb.delivery_status == Status.STORED, psb
        fault.write_text("ENOSPC")  # a good word still works after it
        psb = await sender.put(b"three", "ORDERS", delivery=DeliveryMode.WF_DQF)
        assert psb.delivery_status == Status.DQF_DEVICE_FAIL, psb
    assert bus.process.process is not None and bus.process.process.poll() is None
    warned = [line for line in bus.log_text().splitlines() if "fault file" in line]
    assert len(warned) == 1, warned
    assert "WARNING" in warned[0] and str(fault) in warned[0] and words in warned[0], warned


async def test_a_fault_file_that_is_a_directory_is_a_warning_not_a_disk_fault(
    make_bus, tmp_path: Path
) -> None:
    """MRS_FAULT_FILE naming a directory failed every commit as a device error (Is a
    directory): the tester's mistake looked like the disk's. Now it is a WARNING."""
    fault = tmp_path / "faults"
    fault.mkdir()
    bus = make_bus(env={"MRS_FAULT_FILE": str(fault)})
    async with bus.connect(queue="SENDER") as sender:
        psb = await sender.put(b"one", "ORDERS", delivery=DeliveryMode.WF_DQF)
        assert psb.delivery_status == Status.STORED, psb
    assert "cannot be read (Is a directory)" in bus.log_text()


def _replicated_report(lost: list[str]) -> Report:
    check = DeliveryCheck(acknowledged=3, delivered=3 - len(lost), lost=lost)
    return Report(
        seconds=5.0, seed=12, check=check, faults={"kill-active": 1}, failovers_s=[1.5],
        unhealthy=[], errors={}, outages_s={},
    )  # fmt: skip


@pytest.mark.parametrize("lost", [[], ["p0:2"]])
def test_a_replicated_run_says_how_to_replay_it_and_keeps_its_bus_only_when_it_failed(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    lost: list[str],
) -> None:
    """`mrs sim replicated` printed a failure's figures and no line to run its
    schedule again, never said where its bus was, and left every run's etcd and
    journals in the temp directory. Now it prints the replay line, names the bus it
    keeps on a failure, and removes the one it made when every check held. (The
    run itself, etcd and three instances under the nemesis, is
    tests/process/test_replicated_nemesis.py's; here its outcome is given.)"""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made: list[Path] = []

    def run(body: object, scratch: Path, *args: object) -> tuple[Report, None]:
        (scratch / "etcd-data").mkdir(exist_ok=True)
        made.append(scratch)
        return _replicated_report(lost), None

    monkeypatch.setattr(replicated_nemesis, "run_processes", run)
    code = replicated_nemesis.run_replicated_command(5.0, 12, None, None)
    out = capsys.readouterr().out
    assert json.loads(out[: out.index("\n}") + 2])["seed"] == 12
    assert "reproduce the schedule: mrs sim replicated --seed 12 --seconds 5\n" in out
    if lost:
        assert code == 1 and made[0].is_dir(), out
        assert f"stays in {made[0]}" in out
    else:
        assert code == 0 and not made[0].exists(), out
        assert f"removed {made[0]}" in out


@pytest.mark.parametrize("kind", ["run", "replicated"])
def test_a_scratch_directory_that_cannot_be_made_is_named_as_the_options(
    tmp_path: Path, kind: str
) -> None:
    """`--scratch` under a file was "mrs: PATH: Not a directory", exit 1, as if the
    run had failed; now it names the option, exit 2 (a usage mistake), and runs nothing."""
    (tmp_path / "a-file").write_text("")
    scratch = tmp_path / "a-file" / "bus"
    args = ["sim", *(["run", "mixed"] if kind == "run" else ["replicated"])]
    result = run_mrs(*args, "--scratch", str(scratch), timeout_s=WAIT_S_MAX)
    assert result.returncode == 2, (result.returncode, result.stderr)
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert f"--scratch {scratch}: cannot make the directory (Not a directory)" in line, line
