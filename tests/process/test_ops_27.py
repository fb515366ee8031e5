"""The operator's tools and security files, as an operator at 3 a.m. and an
application's owner use them: real `mrs serve` processes, real sockets, real files.

- `mrs status --address` at a replicated group's replica says it is a replica and
  names the active, instead of "is it running?";
- the refusal counts a server held back are logged when it stops;
- a client's TLS private key that others may read is made owner-only, with a
  WARNING naming it, as the server does with its own; `mrs certs` writes it 0600;
- a recipient's key rotation (`mrs keys rotate`) keeps the messages sealed for its
  old key readable.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import stat
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from clients import tls_context
from mrs import protocol as wire
from mrs.config.bus import load_config
from mrs.config.instance_types import InstanceConfig
from mrs.protection.envelope import Quality, open_envelope, seal
from mrs.protection.keys import Keyring, load_identity
from sim.etcd import wait_active
from tests.cli_helpers import run_mrs
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config

__all__ = ["etcd"]  # the fixture, used by name

WAIT_S = 30.0
LEASE_TTL_S = 2
REFUSED_CONNECTIONS = 12


def _guards(**values: object) -> str:
    return "[group.guards]\n" + "".join(f"{key} = {value}\n" for key, value in values.items())


def _open(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=WAIT_S)


def _welcomed(address: str) -> tuple[socket.socket | None, bool]:
    """A raw connection that said Hello, and whether it was admitted (Welcome); no
    socket when it was reset before connect() returned (refused at once)."""
    try:
        sock = _open(address)
    except ConnectionResetError:
        return None, False
    try:
        sock.sendall(wire.Connection("client").send(wire.Hello(wire.PROTOCOL_VERSION, "raw")))
        head = sock.recv(4096)
    except OSError:
        head = b""
    if len(head) < 5:
        return sock, False
    return sock, msgpack.unpackb(head[4 : 4 + struct.unpack(">I", head[:4])[0]])[0] == (
        wire.Welcome.code
    )


def test_refusals_held_back_are_logged_when_the_server_stops(make_bus) -> None:
    """A burst of refused connections logs one line at once and holds the rest back
    for REFUSAL_LOG_INTERVAL_S; a server stopped before then used to lose their count.
    Stopped, it logs "N more since ..." once, so the log adds up."""
    bus = make_bus(group_extra=_guards(accepts_per_s=0.001, accept_burst=1))
    held, admitted = _welcomed(bus.address)  # the burst's one token (unless start took it)
    try:
        for _ in range(REFUSED_CONNECTIONS):
            sock, welcomed = _welcomed(bus.address)
            if sock is not None:
                sock.close()
            assert not welcomed
    finally:
        if held is not None:
            held.close()
    assert bus.process.terminate() == 0
    log = bus.log_text()
    lines = [
        line
        for line in log.splitlines()
        if "connection refused (EXCEEDQUOTA)" in line and "more since the last" not in line
    ]
    more = sum(int(count) for count in re.findall(r"\((\d+) more since", log))
    assert len(lines) + more == REFUSED_CONNECTIONS + (not admitted), (lines, more, log[-3000:])
    assert more > 0 and log.index("logged as the server stops") > log.index("(EXCEEDQUOTA)")


# -- a client's TLS private key ---------------------------------------------------------


def _issue(tmp_path: Path) -> Path:
    """`mrs certs` for a one-group bus: its out directory."""
    config = tmp_path / "bus.toml"
    config.write_text('[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g"\n')
    result = run_mrs("certs", "--config", str(config), "--out", str(tmp_path / "certs"))
    assert result.returncode == 0, result.stderr
    return tmp_path / "certs"


def test_mrs_certs_writes_the_client_key_owner_only(tmp_path: Path) -> None:
    certs = _issue(tmp_path)
    assert stat.S_IMODE((certs / "client.key").stat().st_mode) == 0o600


def test_a_client_key_others_may_read_is_narrowed_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As the server does with its own key (mrs.security.files.owner_only): a key
    copied with `cp` under umask 022 is 0644, and anyone on the machine could pose as
    the application. The client narrows it and says so, naming the file."""
    certs = _issue(tmp_path)
    key = certs / "client.key"
    key.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        tls_context(certs / "ca.pem", certs / "client.pem", key)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(key) in line and "0644" in line for line in warned), warned
    caplog.clear()
    tls_context(certs / "ca.pem", certs / "client.pem", key)  # owner-only: nothing to say
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_client_key_it_cannot_narrow_is_named_with_the_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key this process may read and not chmod (another owner's, group-readable):
    the WARNING names the file and `chmod 600`; the connection still works."""
    certs = _issue(tmp_path)
    key = certs / "client.key"
    key.chmod(0o640)

    def refuse(path: object, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(os, "chmod", refuse)
    with caplog.at_level(logging.WARNING):
        tls_context(certs / "ca.pem", certs / "client.pem", key)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"chmod 600 {key}" in line for line in warned), warned


# -- mrs status --address at a replica ---------------------------------------------------


@pytest.fixture(scope="module")
def replicated(etcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict]]:
    """A running replicated group (etcd, instances a, b, c): its bus file and processes,
    the active's name under "active"."""
    directory = tmp_path_factory.mktemp("replicated_27")
    config = write_replicated_config(directory, etcd.endpoint, STANDARD_QUEUES, LEASE_TTL_S)
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    for process in processes.values():
        process.start()
    try:
        active = wait_active(processes, WAIT_S)
        yield config, {"active": active, **processes}
    finally:
        for process in processes.values():
            process.terminate()


def _instance(config: Path, name: str) -> InstanceConfig:
    return load_config(config).groups[1].instance(name)


def _a_replica(processes: dict) -> str:
    return next(name for name in ("a", "b", "c") if name != processes["active"])


def test_status_at_a_replicas_address_says_it_is_a_replica_and_names_the_active(
    replicated: tuple[Path, dict],
) -> None:
    """An operator at 3 a.m. points `mrs status` at an instance that is a replica: it
    is running, and only the active takes clients. It used to say `did not answer
    (connection refused) ...; is it running? (start it with mrs serve)`. With the bus
    file it names what the address is and where the active is; without it, the line
    says an instance of a replicated group listens only while active."""
    config, processes = replicated
    replica = _instance(config, _a_replica(processes))
    active = _instance(config, processes["active"])
    for address in (replica.listen, f"{replica.replication_host}:{replica.replication_port}"):
        result = run_mrs("status", "--config", str(config), "--address", address)
        line = result.stderr.strip()
        assert result.returncode == 1, (result.returncode, result.stdout, line)
        assert len(line.splitlines()) == 1, line
        assert f"instance {replica.name} of replicated group 1 (NYC)" in line, line
        assert "a replica" in line and "is it running" not in line, line
        assert f"{active.name} active" in line and active.listen in line, line
    result = run_mrs("status", "--config", str(config), "--address", active.listen, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["group"] == 1
    alone = run_mrs("status", "--address", replica.listen)
    assert alone.returncode == 1 and "replicated group" in alone.stderr, alone.stderr
    assert "--config" in alone.stderr, alone.stderr


def test_status_at_a_stopped_instance_says_it_is_not_running(
    replicated: tuple[Path, dict],
) -> None:
    """The replica's replication port holds nothing either: the instance is down, and
    the line says so and how to start it (not "a replica")."""
    config, processes = replicated
    name = _a_replica(processes)
    processes[name].terminate()
    try:
        result = run_mrs(
            "status", "--config", str(config), "--address", _instance(config, name).listen
        )
        line = result.stderr.strip()
        assert result.returncode == 1, (result.returncode, line)
        assert "not running" in line and f"--instance {name}" in line, line
        assert "a replica" not in line, line
    finally:
        processes[name].start()
        processes[name].wait_for("REPLICA")


def test_status_with_an_address_not_in_the_bus_file_is_a_usage_error(
    replicated: tuple[Path, dict],
) -> None:
    config, _ = replicated
    result = run_mrs("status", "--config", str(config), "--address", "127.0.0.1:1")
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "127.0.0.1:1" in result.stderr and str(config) in result.stderr, result.stderr


# -- a recipient's key rotation ----------------------------------------------------------


def test_a_rotated_recipient_still_opens_what_was_sealed_for_its_old_key(tmp_path: Path) -> None:
    """BILLING reads a privacy queue; messages sealed for its key wait there when it
    rotates. Before, rotation was `mrs keys new` after removing the old NAME.key: the
    reader with the new key refused every waiting message to the DLQ, and the key
    that could open them was gone. `mrs keys rotate` keeps the old decryption keys in
    NAME.key (0600): old messages open, new ones are sealed for the new key."""
    keys = tmp_path / "keys"
    for name in ("SHOP", "BILLING"):
        assert run_mrs("keys", "new", name, "--out", str(keys)).returncode == 0
    keyring = Keyring(keys)
    shop = load_identity(keys / "SHOP.key")
    old_public = (keys / "BILLING.pub").read_text()
    sealed_before = seal(shop, Quality.PRIVACY, b"order 17", [keyring.get("BILLING")])
    rotated = run_mrs("keys", "rotate", "BILLING", "--out", str(keys))
    assert rotated.returncode == 0, rotated.stderr
    assert "BILLING.pub" in rotated.stdout, rotated.stdout
    assert (keys / "BILLING.pub").read_text() != old_public
    assert stat.S_IMODE((keys / "BILLING.key").stat().st_mode) == 0o600
    sealed_after = seal(shop, Quality.PRIVACY, b"order 18", [keyring.get("BILLING")])
    billing = load_identity(keys / "BILLING.key")
    assert open_envelope(sealed_before, keyring, billing).data == b"order 17"
    assert open_envelope(sealed_after, keyring, billing).data == b"order 18"
    again = run_mrs("keys", "rotate", "NOBODY", "--out", str(keys))
    assert again.returncode == 2 and "NOBODY.key" in again.stderr, again.stderr


def test_the_key_rotation_example_reads_both_messages(bus) -> None:
    """docs/examples/key_rotation.py, as docs/security-protection.md runs it, against
    a real group: the message sealed before the rotation and the one after are read."""
    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "key_rotation.py"
    result = subprocess.run(
        [sys.executable, str(example), bus.address],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "BILLING read: b'order 17'",
        "BILLING read: b'order 18'",
    ], result.stdout
