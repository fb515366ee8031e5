"""A policy or credentials file saved with a byte-order mark (some Windows editors add
one) loads as the bus file does: it was refused as "Invalid statement (line 1,
column 1)", naming nothing an operator could see in the file."""

from __future__ import annotations

from pathlib import Path

from mrs.protection.policy import parse_policies
from mrs.security import creds


def test_a_policy_file_with_a_bom_loads(tmp_path: Path) -> None:
    loaded = parse_policies('\ufeffkeys_dir = "k"\n', tmp_path / "policy.toml")
    assert (loaded.policies, loaded.group_keys) == ({}, {})


def test_a_credentials_file_with_a_bom_loads(tmp_path: Path) -> None:
    path = tmp_path / "creds.toml"
    path.write_text("\ufeff# no principals yet\n", encoding="utf-8")
    path.chmod(0o600)
    assert creds.load(path).principals == {}
