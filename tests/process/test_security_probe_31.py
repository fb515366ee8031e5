"""Security probed as an attacker and as an operator meet it (thirty-first session):
a leaked password's sessions cut off the way the docs say, password files read alike
by every reader, `mrs creds` refusals of one kind ending alike, a certificate not
valid yet. Real `mrs serve` processes where the group's behaviour is the point; the
command line in-process. Each test names the defect it found."""

from __future__ import annotations

import datetime
import io
import re
import sys
from pathlib import Path

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from clients import ClientCredentials, DeliveryMode, NotAuthorized, connect
from mrs.config.bus import load_config
from mrs.security.creds import CredsError
from mrs.tools import certs as certs_tool
from mrs.tools.cli import main
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.auth_helpers import ITERATIONS, PRINCIPALS, SecureBus, add_principal, creds, group_config
from tests.auth_helpers import mrs as mrs_ok
from tests.process.test_auth_lifecycle import wait_for_log
from tests.process.test_tls import TlsBus
from tests.process.test_web_bus_admin import WebSession

TWO_LINES = "operator\ns3cret password\n"


def readd(config: Path, name: str, grants: list[str], password_file: Path) -> None:
    """`mrs creds remove NAME` then `mrs creds add NAME` with a new password, back to
    back as a script runs them: the docs' way to cut off a leaked password."""
    mrs_ok("creds", "remove", name, "--config", str(config))
    mrs_ok("creds", "add", name, "--config", str(config), "--password-file",
           str(password_file), "--iterations", ITERATIONS, *grants)  # fmt: skip


async def test_a_principal_removed_and_added_back_to_back_loses_its_live_connections(
    tmp_path: Path,
) -> None:
    """Defect: docs/security-auth.md says to cut off a leaked password's live sessions
    by removing the principal and adding it again. Run back to back, the group read
    both changes at once: the principal was still in the file, so the leaked
    session went on putting. Now each `add` writes a new incarnation and the group
    ends the connections made under an earlier one, while a rotated principal's
    connection (the docs: rotate leaves it open) goes on."""
    bus = SecureBus(tmp_path / "bus", group_ids=(1,))
    assert bus.config_path is not None
    bus.start()
    new_password = tmp_path / "new.pw"
    new_password.write_text("a brand new password\n")
    try:
        async with (
            connect(bus.address(1), "1.13", credentials=creds("producer")) as leaked,
            connect(bus.address(1), "1.10", credentials=creds("consumer")) as rotated,
        ):
            await leaked.put(b"before", target="1.10", delivery=DeliveryMode.WF_DQF)
            mrs_ok("creds", "rotate", "consumer", "--config", str(bus.config_path),
                   "--password-file", str(new_password), "--iterations", ITERATIONS)  # fmt: skip
            readd(bus.config_path, "producer", PRINCIPALS["producer"], new_password)
            await wait_for_log(tmp_path / "bus" / "group1.log", "removed and added again")
            with pytest.raises(NotAuthorized, match="removed and added again"):
                await leaked.put(b"after", target="1.10", delivery=DeliveryMode.WF_DQF)
            assert (await rotated.get(timeout=5)).body == b"before"
        fresh = ClientCredentials("producer", "a brand new password")
        async with connect(bus.address(1), "1.13", credentials=fresh) as again:
            await again.put(b"after", target="1.10", delivery=DeliveryMode.WF_DQF)
    finally:
        bus.stop()


def test_a_group_page_login_ends_when_its_principal_is_added_again(tmp_path: Path) -> None:
    """Defect: the group's own web page kept a login of a principal that was removed
    (and, added again with a new password, its rights came back to the old login):
    whoever had logged in with the leaked password went on purging. The login now
    ends with its principal's incarnation; the new password logs in."""
    config = tmp_path / "bus.toml"
    ops = '[group.ops]\nweb_listen = "127.0.0.1:0"\nweb_admin = true'
    config.write_text(
        group_config(1, free_port(), ops)
        + '\n[auth]\ncredentials = "creds.toml"\nlink_secrets = "secrets"\n'
    )
    grants = ["--manage", "1.1*"]
    add_principal(config, "operator", grants)
    group = GroupProcess(config, 1)
    group.start()
    log = tmp_path / "group1.log"
    new_password = tmp_path / "new.pw"
    new_password.write_text("the operator's new password")
    try:
        url = re.search(r"web view on (http://\S+)", log.read_text())
        assert url is not None
        page = WebSession(url.group(1))
        assert page.login("operator", "pw-operator-correct horse")[0] == 200
        assert page.act("browse", queue="1.10")[0] == 200
        readd(config, "operator", grants, new_password)
        trio.run(wait_for_log, log, "credentials reloaded")
        after = page.act("browse", queue="1.10")
        session = page.get_session()  # what the page asks next: the login form's token
        again = page.login("operator", "the operator's new password")
        browsed = page.act("browse", queue="1.10")
    finally:
        group.terminate()
    assert after == (403, {"error": "log in first"}), after
    assert session["principal"] is None and session["login_required"] is True
    assert again[0] == 200 and browsed[0] == 200, (again, browsed)


def test_a_password_file_of_two_lines_is_refused_alike_by_every_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a password file of two lines (a name above the password) was taken
    whole, newline inside, by `ClientCredentials.from_file` and `mrs creds
    --password-file`, while `--password-stdin < file` registered its first line: the
    password registered one way never logged in the other, and the group said only
    NOTAUTHORIZED. Every reader now refuses it in one line that quotes none of it;
    surrounding spaces and the final newline are still stripped alike."""
    two = tmp_path / "two.pw"
    two.write_text(TWO_LINES)
    store = str(tmp_path / "creds.toml")
    with pytest.raises(CredsError, match="holds 2 lines, not one password"):
        ClientCredentials.from_file("operator", two)
    assert main(["creds", "add", "a", "--file", store, "--password-file", str(two)]) == 2
    monkeypatch.setattr(sys, "stdin", io.StringIO(TWO_LINES))
    assert main(["creds", "add", "b", "--file", store, "--password-stdin"]) == 2
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 2 and all("holds 2 lines" in line for line in said), said
    assert not any("s3cret" in line for line in said)
    padded = tmp_path / "padded.pw"
    padded.write_text("  s3cret password \n")
    monkeypatch.setattr(sys, "stdin", io.StringIO("  s3cret password \n"))
    assert main(["creds", "add", "c", "--file", store, "--password-stdin",
                 "--iterations", ITERATIONS]) == 0  # fmt: skip
    assert ClientCredentials.from_file("c", padded).password == "s3cret password"


def test_refusals_of_one_kind_end_with_one_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: docs/operations.md: exit 2 when the command line or the configuration
    must change. `mrs creds grant group:1` exited 1 where `rotate group:1` exited 2;
    an empty --password-file 1 where an empty stdin gave 2; a tool's
    MRS_AUTH_PASSWORD_FILE naming no file exited 1 with a line naming no variable
    (MRS_TLS_CA's says its variable, exit 2)."""
    store = str(tmp_path / "creds.toml")
    assert main(["creds", "add-group", "1", "--file", store, "--secrets",
                 str(tmp_path / "secrets"), "--iterations", ITERATIONS]) == 0  # fmt: skip
    empty = tmp_path / "empty.pw"
    empty.write_text("\n")
    capsys.readouterr()
    assert main(["creds", "rotate", "group:1", "--file", store, "--generate"]) == 2
    assert main(["creds", "grant", "group:1", "--file", store, "--attach", "1.10"]) == 2
    assert main(["creds", "add", "app", "--file", store, "--password-file", str(empty)]) == 2
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n"))
    assert main(["creds", "add", "app", "--file", store, "--password-stdin"]) == 2
    monkeypatch.setenv("MRS_AUTH_NAME", "operator")
    monkeypatch.setenv("MRS_AUTH_PASSWORD_FILE", str(tmp_path / "op.pw"))
    assert main(["creds", "list", "--file", store]) == 2
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 5, said
    assert said[-1].startswith("mrs: MRS_AUTH_PASSWORD_FILE: password file "), said


def certificate_not_valid_until(bus: TlsBus, group_id: int, days: int) -> None:
    """Replace group `group_id`'s certificate by one of the bus CA and the same names
    whose validity begins `days` from now (a CA whose clock runs ahead)."""
    ca_cert = x509.load_pem_x509_certificate((bus.certs / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((bus.certs / "ca.key").read_bytes(), None)
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=days)
    names = certs_tool._group_names(load_config(bus.config).group(group_id))
    certs_tool._leaf(bus.certs, f"group-{group_id}", names, ca_cert, ca_key, later)


async def test_a_certificate_not_valid_yet_is_said_at_start(tmp_path: Path) -> None:
    """Defect: a group whose certificate is not valid yet starts (a clock behind the
    CA's must not stop it), but every linked group and client with the right time
    refused it, and the group's only lines were INFO ones per link retry ("the peer
    refused our certificate"). It now says so in a WARNING naming the file, the date
    it begins and what to check."""
    bus = TlsBus(tmp_path / "bus")
    certificate_not_valid_until(bus, 2, days=2)
    bus.processes[2].start()
    try:
        await wait_for_log(tmp_path / "bus" / "group2.log", "is not valid until")
    finally:
        bus.processes[2].terminate()
    line = next(x for x in bus.log(2).splitlines() if "is not valid until" in x)
    assert "WARNING" in line and "group-2.pem" in line and "this machine's clock" in line
