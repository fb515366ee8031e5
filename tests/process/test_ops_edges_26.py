"""A server's start and its operator-facing lines, as an operator at 3 a.m. meets them:
a script polling `mrs admin`, a group on an IPv6 address, a start whose port is
taken. Real `mrs serve` processes, real sockets, real LMDB."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clients import DeliveryMode, Uma, connect_sync
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.cli_helpers import run_mrs

LOOKS = 25
"""Looks a polling script asks in a row: more than one interval's line would show."""


def _bus_file(directory: Path, listen: str, data_dir: str = "g1", extra: str = "") -> Path:
    """A one-group bus listening on `listen`, its data directory `data_dir`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bus.toml"
    path.write_text(
        textwrap.dedent(f"""\
            [[group]]
            id = 1
            name = "NYC"
            listen = "{listen}"
            data_dir = "{data_dir}"
            {extra}
            [[group.queue]]
            id = 10
            name = "ORDERS"
            [[group.queue]]
            id = 13
            name = "SENDER"
            """)
    )
    return path


def _serve(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_a_polling_script_does_not_fill_the_log_but_every_change_is_logged(bus) -> None:
    """Every browse, connections and journal look was one INFO line, unthrottled: a
    script polling `mrs admin` in a loop wrote a line per request into the server's
    log for ever. A look is now logged at most once per interval per principal and
    action (the refusals' throttle, with the count of those not shown); an action
    that changes something is the operator's audit trail, one line each."""
    with connect_sync(bus.address, "SENDER") as sender:
        for index in range(3):
            sender.put(b"o%d" % index, target="ORDERS", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
        for _ in range(LOOKS):
            assert sender.admin("browse", queue="ORDERS")["waiting"] == 3
            assert sender.admin("connections")["connections"]
            sender.admin("journal")
        for _ in range(3):  # three changes (the first purges, the next find nothing)
            sender.admin("purge", queue="ORDERS", reason="bad feed")
    assert bus.process.terminate() == 0  # every line is in the log now
    # a line counting the looks not shown may follow each on a slow host: not a look
    log = "\n".join(
        line for line in bus.log_text().splitlines() if "more since the last such line" not in line
    )
    assert log.count("admin browse by (no auth)") == 1, log[-3000:]
    assert log.count("admin connections by (no auth)") == 1, log[-3000:]
    assert log.count("admin journal by (no auth)") == 1, log[-3000:]
    assert log.count("admin purge by (no auth)") == 3, log[-3000:]


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_an_ipv6_listen_address_is_shown_in_brackets_everywhere(tmp_path: Path) -> None:
    """`listen = "[::1]:0"` printed `READY ::1:43001`, logged `listening on
    ::1:43001`, wrote `::1:43001` to --ready-file, and `mrs status` showed
    `::1:43001` (the table and --json's "listen") and `::1:0` for the bus file's row:
    an address the bus file itself refuses ("an IPv6 host must be in brackets"), and
    that a script pasting it back cannot tell from host `::1:43001`."""
    config = _bus_file(tmp_path / "bus", "[::1]:0")
    group = GroupProcess(config, 1)
    address = group.start()
    try:
        assert address.startswith("[::1]:"), address
        shown = run_mrs("status", "--address", address, "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["listen"] == address
        table = run_mrs("status", "--address", address)
        assert f" {address} " in table.stdout and " ::1:" not in table.stdout, table.stdout
        whole_bus = run_mrs("status", "--config", str(config), "--json")
        assert '"[::1]:0"' in whole_bus.stdout and '"::1:0"' not in whole_bus.stdout
        with connect_sync(address, "SENDER") as sender:  # the READY line dials as it is
            assert sender.admin("connections")["connections"]
    finally:
        assert group.terminate() == 0
    log = (config.parent / "group1.log").read_text()  # whole once it stopped
    assert f"listening on {address}, pid" in log, log
    ready_file = tmp_path / "ready"
    served = subprocess.Popen(
        [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", "1",
         "--ready-file", str(ready_file)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert served.stdout is not None
        ready = served.stdout.readline().decode().split()[1]  # READY: the file is written
        assert ready_file.read_text().strip() == ready and ready.startswith("[::1]:")
    finally:
        served.terminate()
        served.wait(timeout=30)


def test_a_start_that_cannot_bind_leaves_the_data_directory_as_it_found_it(
    tmp_path: Path,
) -> None:
    """group.json was written (and the data directory made) before the listen port was
    bound, so a start refused "the port is in use" left a new directory claimed by a
    group that never served there: a typo'd data_dir, or one meant for another group,
    refused that group's start afterwards. operations.md: start-up failures happen
    before anything is written, the listen address bound first. The claim is now made
    once the ports are the server's, and still refuses another group's directory."""
    port = free_port()
    config = _bus_file(tmp_path / "bus", f"127.0.0.1:{port}", data_dir="new/g1")
    data_dir = config.parent / "new" / "g1"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        refused = _serve(config)
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"mrs: {config}: group 1 (NYC) listen = 127.0.0.1:{port}: the port is in use "
        "by another process; stop it or change listen"
    ]
    assert not (config.parent / "new").exists(), list((config.parent / "new").rglob("*"))
    group = GroupProcess(config, 1)  # the port free again: the start claims it
    group.start()
    try:
        assert json.loads((data_dir / "group.json").read_text())["group_id"] == 1
    finally:
        assert group.terminate() == 0
    other = config.parent / "other.toml"  # another group on it is still refused
    other.write_text(config.read_text().replace('id = 1\nname = "NYC"', 'id = 2\nname = "LDN"'))
    command = [sys.executable, "-m", "mrs", "serve", "--config", str(other), "--group", "2"]
    second = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert second.returncode == 1 and "belongs to group 1 (NYC" in second.stderr, second.stderr
