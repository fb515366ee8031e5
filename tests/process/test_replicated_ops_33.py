"""A replicated group's operator at 3 a.m. when the active hangs: real etcd, three
real `mrs serve --instance` processes, the active SIGSTOPped (a frozen VM, a process
stuck in the kernel): its client port takes connections and answers nothing.

What they prove: `mrs admin` waits through the failover and is answered by the new
active (before, the hung instance's handshake took the command's whole 10 s and it
failed "no instance of group 1 answered", a replica active 2 s in); and `mrs status
--config --address` at the hung old active says a process there takes connections
and does not answer (before: "not running (nothing listens ...)", start it, a start
the data directory's lock then refuses while the hung process holds it).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from clients import connect, instance_addresses
from mrs.config.bus import load_config
from sim.etcd import wait_active
from sim.ports import free_port
from tests.cli_helpers import run_mrs
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config
from tests.process.test_replication import EXAMPLES, example_client, wait_in_sync

__all__ = ["etcd"]  # the fixture, used by name

WAIT_S = 30.0
LEASE_TTL_S = 2
ADMIN_WAIT_S = 10.0
"""`mrs admin`'s wait for the active (mrs.tools.admin CONNECT_TIMEOUT_S)."""


@pytest.fixture
def replicated(etcd, tmp_path: Path) -> Iterator[tuple[Path, dict[str, InstanceProcess]]]:
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES, LEASE_TTL_S)
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    for process in processes.values():
        process.start()
    try:
        yield config, processes
    finally:
        for process in processes.values():
            process.terminate()


def test_admin_and_status_when_the_active_hangs(
    replicated: tuple[Path, dict[str, InstanceProcess]],
) -> None:
    """The active is paused and `mrs admin browse` asked at once: answered by the
    replica that takes over, within the command's wait. Then `mrs status --address`
    at the paused one: one line saying a process there does not answer, naming the
    new active, exit 1, and not "not running"."""
    config, processes = replicated
    hung = wait_active(processes, WAIT_S)

    async def all_in_sync() -> None:  # else no replica may take over
        async with connect(instance_addresses(config, "NYC"), None) as client:
            await wait_in_sync(client, set(processes))

    trio.run(all_in_sync)
    listen = load_config(config).groups[1].instance(hung).listen
    processes[hung].pause()
    try:
        started = time.monotonic()
        browse = run_mrs("admin", "browse", "ORDERS", "--config", str(config))
        assert browse.returncode == 0, browse.stderr
        assert "ORDERS (1.10)" in browse.stdout, browse.stdout
        assert time.monotonic() - started < ADMIN_WAIT_S + 2
        status = run_mrs("status", "--config", str(config), "--address", listen)
        line = status.stderr.strip()
        assert status.returncode == 1 and len(line.splitlines()) == 1, (status.returncode, line)
        assert "takes connections at its client address and does not answer" in line, line
        assert "not running" not in line and "active in term" in line, line
        assert f"etcd names {hung} " not in line, line
    finally:
        processes[hung].resume()




def test_the_docs_example_survives_a_kill_of_the_active_while_it_reads_back(
    etcd, tmp_path: Path
) -> None:
    """docs/replication.md's client example with the active SIGKILLed as it starts
    reading its orders back (an operator a few seconds late with the kill): every
    order delivered once, in order, exit 0 (before, the get in flight raised
    ConnectionLost out of the example: a traceback)."""
    text = (EXAMPLES / "replicated.toml").read_text()
    text = text.replace("http://127.0.0.1:2379", etcd.endpoint)
    text = re.sub(r"127\.0\.0\.1:7[12]0\d", lambda _: f"127.0.0.1:{free_port()}", text)
    config = tmp_path / f"docs_{tmp_path.name}.toml"
    config.write_text(text)
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    for process in processes.values():
        process.start()
    try:
        first = wait_active(processes, WAIT_S)
        client = example_client(config, 60, tmp_path)
        while "puts answered, " not in (line := client.stdout.readline()):
            assert line, "the example ended before its puts were answered"
        processes[first].kill()
        output, _ = client.communicate(timeout=120)
        assert client.returncode == 0, output
        assert "60 delivered, in order: True" in output, output
    finally:
        for process in processes.values():
            process.terminate()
