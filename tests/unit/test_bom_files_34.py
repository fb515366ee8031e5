"""A policy or credentials file saved with a byte-order mark (some Windows editors add
one) loads as the bus file does: it was refused as "Invalid statement (line 1,
column 1)", naming nothing an operator could see in the file. And a policy file's
`group_key.group` is a group id a bus can have (config fuzz's findings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mrs.protection.errors import PolicyError
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


def test_a_group_key_beyond_any_group_id_is_refused(tmp_path: Path) -> None:
    """It was taken (99999999999), and the key named a group no bus can have."""
    text = 'keys_dir = "k"\n[[group_key]]\ngroup = 99999999999\nkey = "g.key"\n'
    refusal = r"group_key\[0\]\.group must be a group id \(1\.\.32000\)"
    with pytest.raises(PolicyError, match=refusal):
        parse_policies(text, tmp_path / "policy.toml")
