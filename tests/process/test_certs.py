"""`mrs certs` and the `[group.tls]` config table: owner-only files, names that tell
groups apart, one-line config errors for every bad path or file."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from mrs.config.bus import ConfigError, load_config
from mrs.tools.certs import make_certs
from tests.process.test_tls import write_bus

GOOD = 'ca = "certs/ca.pem"\ncert = "certs/group-1.pem"\nkey = "certs/group-1.key"'


def mrs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mrs", *args], capture_output=True, text=True)


@pytest.fixture
def bus_with_certs(tmp_path) -> Path:
    """A two-group bus and a CA in certs/ (config not yet changed)."""
    config = write_bus(tmp_path)
    make_certs(load_config(config), tmp_path / "certs")
    return config


def with_tls(config: Path, group: int, table: str) -> Path:
    """Insert `table` (lines under [group.tls]) into group `group`'s section."""
    text = config.read_text()
    at = text.index("[[group.queue]]", text.index(f"id = {group}\n"))
    config.write_text(f"{text[:at]}[group.tls]\n{table}\n{text[at:]}")
    return config


def test_certs_writes_owner_only_files_whatever_the_umask(tmp_path) -> None:
    config = write_bus(tmp_path)
    old = os.umask(0)
    try:
        result = mrs("certs", "--config", str(config), "--out", str(tmp_path / "certs"))
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr
    directory = tmp_path / "certs"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    names = sorted(path.name for path in directory.iterdir())
    assert names == sorted(
        f"{stem}.{ext}" for stem in ("ca", "group-1", "group-2", "client") for ext in ("pem", "key")
    )
    for path in directory.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert "[group.tls]" in result.stdout and 'cert = "certs/group-2.pem"' in result.stdout
    assert "tls_context(" in result.stdout


def test_each_group_certificate_names_its_group(bus_with_certs) -> None:
    directory = bus_with_certs.parent / "certs"
    for group in (1, 2):
        cert = x509.load_pem_x509_certificate((directory / f"group-{group}.pem").read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert f"mrs-group-{group}" in names.get_values_for_type(x509.DNSName)
        assert f"mrs-group-{3 - group}" not in names.get_values_for_type(x509.DNSName)
    client = x509.load_pem_x509_certificate((directory / "client.pem").read_bytes())
    names = client.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert not any(n.startswith("mrs-group-") for n in names.get_values_for_type(x509.DNSName))


def test_apply_adds_a_table_to_each_group_and_the_config_loads(tmp_path) -> None:
    config = write_bus(tmp_path)
    result = mrs("certs", "--config", str(config), "--out", str(tmp_path / "certs"), "--apply")
    assert result.returncode == 0, result.stderr
    bus = load_config(config)
    for group in bus.groups.values():
        assert group.tls is not None and group.tls.client_cert == "required"
        assert group.tls.cert == tmp_path / "certs" / f"group-{group.id}.pem"
        assert len(group.queues) == 3  # IN, OUT and the DLQ: nothing moved between groups
    again = mrs("certs", "--config", str(config), "--out", str(tmp_path / "c2"), "--apply")
    assert again.returncode != 0 and "already has a [group.tls]" in again.stderr
    assert not (tmp_path / "c2").exists()
    existing = mrs("certs", "--config", str(config), "--out", str(tmp_path / "certs"))
    assert existing.returncode != 0 and "--force" in existing.stderr


@pytest.mark.parametrize(
    "table, key, problem",
    [
        (
            'ca = "certs/nope.pem"\ncert = "certs/group-1.pem"\nkey = "certs/group-1.key"',
            "ca",
            "no such file",
        ),
        (
            'ca = "certs/group-1.key"\ncert = "certs/group-1.pem"\nkey = "certs/group-1.key"',
            "ca",
            "not a PEM CA",
        ),
        (
            'ca = "certs/ca.pem"\ncert = "certs/group-1.pem"\nkey = "certs/group-2.key"',
            "cert",
            "does not load",
        ),
        (
            'ca = "certs/ca.pem"\ncert = "certs/ca.key"\nkey = "certs/group-1.key"',
            "cert",
            "does not load",
        ),
        ('ca = "certs/ca.pem"\ncert = "certs/group-1.pem"', "key", "required key is missing"),
        (
            GOOD + '\nclient_cert = "yes"',
            "client_cert",
            "must be one of",
        ),
        (
            GOOD + "\nverify = false",
            "verify",
            "unknown key",
        ),
        (GOOD + '\nclient_cert = ["required"]', "client_cert", "must be one of"),
        ('ca = "certs/ca.pem"\ncert = 7\nkey = "certs/group-1.key"', "cert", "must be"),
        ('ca = "certs/ca.pem\\u0000"\ncert = "c"\nkey = "k"', "ca", "must be a file path"),
        (f'ca = "{"x" * 5000}"\ncert = "c"\nkey = "k"', "ca", "cannot read"),
        ('ca = "certs"\ncert = "c"\nkey = "k"', "ca", "cannot read"),
        ('ca = "~nosuchuser__mrs/ca.pem"\ncert = "c"\nkey = "k"', "ca", "cannot expand"),
    ],
)
def test_a_bad_tls_table_is_a_one_line_config_error(bus_with_certs, table, key, problem) -> None:
    with_tls(bus_with_certs, 1, table)
    with pytest.raises(ConfigError) as caught:
        load_config(bus_with_certs)
    message = str(caught.value)
    assert f"group[0].tls.{key}" in message and problem in message, message
    assert "\n" not in message


def test_a_link_with_tls_on_one_end_only_is_a_config_error(bus_with_certs) -> None:
    table = 'ca = "certs/ca.pem"\ncert = "certs/group-1.pem"\nkey = "certs/group-1.key"'
    with_tls(bus_with_certs, 1, table)
    with pytest.raises(ConfigError, match="group 1 has .group.tls. and group 2 has not"):
        load_config(bus_with_certs)


def test_serve_with_a_missing_certificate_says_so_in_one_line(bus_with_certs) -> None:
    table = 'ca = "certs/ca.pem"\ncert = "certs/gone.pem"\nkey = "certs/group-1.key"'
    with_tls(bus_with_certs, 1, table)
    with_tls(bus_with_certs, 2, table.replace("gone", "group-2").replace("group-1", "group-2"))
    result = mrs("serve", "--config", str(bus_with_certs), "--group", "2")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "group[0].tls.cert: no such file" in result.stderr and "gone.pem" in result.stderr
