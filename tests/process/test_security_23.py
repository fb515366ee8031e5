"""Security as an operator and an attacker meet it, against real `mrs serve`
processes: what a refused protected message becomes, rights applied to each
operation, and the operator's one-line answers. Each test names the defect it found."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clients import (
    DeliveryMode,
    NoMoreMessages,
    Protection,
    ProtectionRefused,
    Uma,
    connect,
)
from mrs.config.auth import AuthConfig
from mrs.protection.keys import Identity, write_identity
from mrs.security import authority as authority_module
from mrs.security.authority import Authority
from mrs.tools.cli import main as mrs_main
from sim.processes import GroupProcess, write_single_group_config
from tests.auth_helpers import SecureBus, add_principal, creds, mrs
from tests.process.test_auth_lifecycle import wait_for_log
from tests.process.test_protection_bus import dump, with_protection
from tests.process.test_tls import TlsBus

MODE = DeliveryMode
IMPLICIT_QUEUE = '[[group.queue]]\nid = 12\nname = "IMPLICIT"\nconfirm = "implicit"\n\n'
POLICY = '[[policy]]\nqueue = "1.12"\nprotection = "integrity"\n'


def implicit_protected_bus(directory: Path) -> tuple[SecureBus, Path]:
    """Group 1 under [auth] with an implicit queue 1.12 under an integrity policy;
    `writer` may put to it, `implicit` may attach to it (no 'dlq' right). Started."""
    keys = directory / "keys"
    for name in ("SHOP", "BILLING"):
        write_identity(Identity.generate(name), keys)
    bus = SecureBus(directory / "bus", group_ids=(1,))
    assert bus.config_path is not None
    text = bus.config_path.read_text()
    bus.config_path.write_text(text.replace("[auth]", IMPLICIT_QUEUE + "[auth]", 1))
    with_protection(bus.config_path)
    (bus.directory / "protection.toml").write_text(f'keys_dir = "{keys}"\n' + POLICY)
    add_principal(bus.config_path, "writer", ["--attach", "1.13", "--put", "1.12"])
    add_principal(bus.config_path, "implicit", ["--attach", "1.12"])
    bus.start()
    return bus, keys


def journal_bodies(bus: SecureBus, journal: str) -> list[str]:
    return [json.loads(line)["body"] for line in dump(bus.directory, journal).splitlines()]


async def test_a_refused_message_left_on_an_implicit_queue_is_not_confirmed_by_the_next_get(
    tmp_path: Path,
) -> None:
    """Defect: a refused message whose DLQ put failed (here the reader lacks the 'dlq'
    right) was said to be "left on the queue, and refused again on every get", but on
    a queue that confirms implicitly the reader's next get confirmed it: it was on no
    queue and no DLQ, only in the PCJ as if consumed. Now every get refuses it again,
    taking nothing, until it can be moved; a 'dlq' right granted live moves it."""
    bus, keys = implicit_protected_bus(tmp_path)
    try:
        address = bus.address(1)
        policies = bus.directory / "protection.toml"
        shop = Protection.load(policies, identity=keys / "SHOP.key")
        async with connect(address, "1.13", credentials=creds("writer"), protection=shop) as q:
            await q.put(b"unsigned", "1.12", delivery=MODE.WF_DQF, uma=Uma.SAF, protect=False)
            await q.put(b"signed", "1.12", delivery=MODE.WF_DQF, uma=Uma.SAF)
        reader = Protection.load(policies, identity=keys / "BILLING.key")
        async with connect(
            address, "1.12", credentials=creds("implicit"), protection=reader
        ) as implicit:
            for _attempt in range(2):
                with pytest.raises(ProtectionRefused, match="left on the queue") as refused:
                    await implicit.get(timeout=5)
                assert not refused.value.dead_lettered
            assert journal_bodies(bus, "pcj") == []
            assert len(journal_bodies(bus, "dqf")) == 2
            mrs("creds", "grant", "implicit", "--config", str(bus.config_path),
                "--attach", "1.12", "--admin", "dlq")  # fmt: skip
            async with connect(address, None, credentials=creds("implicit")):
                pass  # a new connection makes the group read the changed file
            message = await implicit.get(timeout=5)
            assert message.body == b"signed"
        assert journal_bodies(bus, "dlj") == ["unsigned"]
    finally:
        bus.stop()


def write_in_place(path: Path, text: str) -> None:
    """What an editor, `cp` or `scp` does: the same file (inode), truncated, rewritten."""
    with path.open("r+") as file:
        file.truncate(0)
        file.write(text)


async def test_a_credentials_file_emptied_in_place_keeps_the_credentials_in_force(
    tmp_path: Path,
) -> None:
    """Defect: a credentials file copied over in place (`cp`, `scp`, an editor) is
    empty for a moment; a group that looked then loaded it as a valid file without
    principals and closed every application's connection for good (NOTAUTHORIZED:
    the client library does not reconnect). An empty file now does not load, and the
    credentials in force stay, as for any file that does not load."""
    bus = SecureBus(tmp_path / "bus", group_ids=(1,))
    bus.start()
    try:
        path = bus.directory / "creds.toml"
        text = path.read_text()
        log = bus.directory / "group1.log"
        async with connect(bus.address(1), "1.10", credentials=creds("consumer")) as live:
            write_in_place(path, "")
            await wait_for_log(log, "is empty (write it with `mrs creds add`)")
            write_in_place(path, text)
            await wait_for_log(log, "credentials reloaded (file changed): 9 principals")
            with pytest.raises(NoMoreMessages):
                await live.get(timeout=0)  # still connected, still granted
        assert "was removed from the credentials" not in log.read_text()
    finally:
        bus.stop()


def test_a_credentials_file_being_rewritten_in_place_is_read_once_it_settles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a copy in place half done can also be a valid file, cut between two
    principals, and was read at once (the next connection or the half-second look),
    revoking those after the cut. A file changed in place is now read once it has
    stayed the same for the check interval; one `mrs creds` replaced whole, at once."""
    bus = SecureBus(tmp_path / "bus", group_ids=(1,))  # the files only: not started
    path = bus.directory / "creds.toml"
    config = AuthConfig(path, bus.directory / "secrets")
    authority = Authority(config, 1, ())
    text = path.read_text()
    cut = text.index('[principal."ops"]')
    write_in_place(path, text[:cut])  # consumer ... dlqadmin, not ops, producer, ...
    authority.reload_if_changed()
    assert authority.creds.get("ops") is not None, "a half-written copy was read"
    write_in_place(path, text + "\n")
    authority.reload_if_changed()
    assert authority.reloads == 0
    later = authority_module.monotonic() + 1.0
    monkeypatch.setattr(authority_module, "monotonic", lambda: later)
    authority.reload_if_changed()
    assert authority.reloads == 1 and authority.creds.get("ops") is not None
    mrs("creds", "remove", "ops", "--config", str(bus.config_path))  # replaced whole
    authority.reload_if_changed()
    assert authority.reloads == 2 and authority.creds.get("ops") is None


def test_rotating_a_link_credential_with_rotate_is_refused_before_it_changes_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect: `mrs creds rotate group:1 --generate` printed a password and changed
    group:1's verifier but not secrets/group-1.secret: group 1 could then not load
    the file (so no later change, a removal included, applied; a restart refused to
    start) and group 2 refused its link. It is now refused in one line naming
    `add-group 1 --rotate`, with the file unchanged and no password printed."""
    bus = SecureBus(tmp_path / "bus", group_ids=(1,))  # the files only: not started
    path = bus.directory / "creds.toml"
    before = path.read_bytes()
    capsys.readouterr()
    status = mrs_main(["creds", "rotate", "group:1", "--config", str(bus.config_path),
                       "--generate"])  # fmt: skip
    said = capsys.readouterr()
    assert status == 2 and said.out == "", said
    assert "mrs creds add-group 1 --rotate" in said.err and said.err.count("\n") == 1
    assert path.read_bytes() == before


def test_status_over_tls_to_a_plaintext_group_says_to_drop_tls(tmp_path: Path) -> None:
    """Defect: `mrs status --address` with MRS_TLS_* set, reaching a group without
    [group.tls], was told the port does not speak TLS and then advised to "set
    MRS_TLS_CA": the opposite of the fix. It is now told to reach it without TLS."""
    certs = TlsBus(tmp_path / "tls").certs  # a CA and a client certificate, unused bus
    plain = GroupProcess(write_single_group_config(tmp_path / "plain"), 1)
    plain.start()
    try:
        environment = {
            **os.environ,
            "MRS_TLS_CA": str(certs / "ca.pem"),
            "MRS_TLS_CERT": str(certs / "client.pem"),
            "MRS_TLS_KEY": str(certs / "client.key"),
        }
        done = subprocess.run(
            [sys.executable, "-m", "mrs", "status", "--address", plain.address],
            capture_output=True, text=True, env=environment, timeout=60,
        )  # fmt: skip
    finally:
        plain.terminate()
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "does not speak TLS" in done.stderr and "unset MRS_TLS_CA" in done.stderr
    assert "or set MRS_TLS_CA" not in done.stderr
