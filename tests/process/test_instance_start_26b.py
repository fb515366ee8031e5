"""A replicated group's instance at its start and its stop, as an operator meets it:
a port taken, a data directory shared by mistake, a bad `instances` block, etcd
unreachable or under another prefix, the operator tools against a replica. Real
`mrs serve --instance` processes, a real etcd, real sockets, real LMDB."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from mrs.config.bus import load_config
from tests.cli_helpers import run_mrs
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config

__all__ = ["etcd"]  # the fixture, used by name


def _listing(directory: Path) -> list[str] | None:
    """Every path under `directory`, relative (None: it does not exist)."""
    if not directory.exists():
        return None
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


def _serve_instance(config: Path, name: str) -> list[str]:
    """`mrs serve --instance NAME` that must be refused: its stderr lines (exit 1)."""
    refused = run_mrs("serve", "--config", str(config), "--group", "1", "--instance", name)
    assert refused.returncode == 1, (refused.returncode, refused.stderr)
    assert "Traceback" not in refused.stderr and "REPLICA" not in refused.stdout
    return refused.stderr.strip().splitlines()


@pytest.mark.parametrize("before", ["absent", "empty"])
def test_a_start_refused_for_its_replication_port_leaves_the_data_dir_as_it_was(
    etcd, tmp_path: Path, before: str
) -> None:
    """An instance whose replication port is taken exits 1 in one line, and its data
    directory is as it was: not made, or left empty. Before, the instance recorded
    itself in `group.json` and opened its journals (data.mdb, lock files, commit
    logs), then found the port taken: a failed start wrote a directory, against
    docs/operations.md ("a failed start leaves the journals exactly as they were")."""
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    me = load_config(config).group(1).instance("a")
    if before == "empty":
        me.data_dir.mkdir()
    found = _listing(me.data_dir)
    with socket.socket() as squatter:
        squatter.bind((me.replication_host, me.replication_port))
        squatter.listen()
        lines = _serve_instance(config, "a")
    assert len(lines) == 1 and "replication = " in lines[0], lines
    assert "the port is in use by another process" in lines[0], lines
    assert _listing(me.data_dir) == found


def test_the_refusals_of_a_shared_data_dir_still_hold(etcd, tmp_path: Path) -> None:
    """Binding first keeps the data directory's own refusals, each in its words: the
    same instance started twice is refused by the directory's lock (not "the port is
    in use: stop it", which would name the running instance as the process to stop),
    and instance b pointed at instance a's directory by the directory's owner file."""
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    first = InstanceProcess(config, "a")
    first.start()
    try:
        first.wait_for("REPLICA a")
        assert first.process is not None
        [line] = _serve_instance(config, "a")
        data_dir = config.parent / "a"
        assert line == (
            f"mrs: data_dir {data_dir} is in use by another mrs serve "
            f"(pid {first.process.pid}); one server per data directory"
        )
    finally:
        first.terminate()
    assert first.process.returncode == 0
    recorded = (data_dir / "group.json").read_bytes()
    other = tmp_path / "machine-b" / "bus.toml"  # b's machine's file, b's path a's
    other.parent.mkdir()
    other.write_text(config.read_text().replace('data_dir = "b"', f'data_dir = "{data_dir}"'))
    [line] = _serve_instance(other, "b")
    assert "holds the journals of instance a of replicated group 1" in line, line
    assert "nothing was opened" in line, line
    assert (data_dir / "group.json").read_bytes() == recorded
    assert os.listdir(data_dir)  # a's journals are all still there


def test_a_new_group_waiting_for_an_instance_started_under_another_prefix_says_so(
    etcd, tmp_path: Path
) -> None:
    """Three instances of a new group started, b with a typo in its machine's
    `[coordinator] prefix`: b posts its census where a and c never look, and the group
    never starts. Before, no instance logged anything (and `mrs status` said to start
    the instances, all three running); now a and c each say, once, whose census they
    have waited for and where they look, and b names a and c."""
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES)
    machine_b = tmp_path / "machine-b"
    machine_b.mkdir()
    prefix = f'prefix = "/mrs/{tmp_path.name}"'
    assert prefix in config.read_text()
    (machine_b / "bus.toml").write_text(config.read_text().replace(prefix, 'prefix = "/mrz"'))
    started = [InstanceProcess(config, "a"), InstanceProcess(machine_b / "bus.toml", "b")]
    started.append(InstanceProcess(config, "c"))
    try:
        for process in started:
            process.start()
        for process in started:
            process.wait_for(f"REPLICA {process.name}")
        logs = {each.name: each.config_path.parent / f"{each.name}.log" for each in started}
        wanted = {"a": "b", "b": "a, c", "c": "b"}
        _wait_for_lines(logs, {name: f"for instance(s) {who}: " for name, who in wanted.items()})
    finally:
        for process in started:
            process.terminate()
    text = logs["a"].read_text()
    assert text.count("for instance(s) b: ") == 1, text  # said once
    assert f"census in {etcd.endpoint} under /mrs/{tmp_path.name}/1" in text, text
    assert all(process.process and process.process.returncode == 0 for process in started)


def _wait_for_lines(logs: dict[str, Path], wanted: dict[str, str]) -> None:
    """Until each log holds its wanted text (another process's log: nothing to await
    but its file), 40 s at most."""
    deadline_s = time.monotonic() + 40
    while not all(wanted[name] in logs[name].read_text() for name in wanted):
        assert time.monotonic() < deadline_s, {name: logs[name].read_text()[-800:] for name in logs}
        time.sleep(0.2)
