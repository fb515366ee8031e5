"""The bus config's `[auth]` table: where credentials and link secrets live.

    [auth]
    credentials = "creds.toml"     # verifiers and grants (`mrs creds`), 0600
    link_secrets = "secrets"       # group-<N>.secret: each group's own link password

Paths are relative to the config file. Without `[auth]` (the default, and the demo)
every connection is trusted as before. With it, every connection to every group must
authenticate, and group N reads only its own `group-N.secret` (a host running one
group needs only that one file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrs.config.keys import unknown_key_problem

AUTH_KEYS = frozenset({"enabled", "credentials", "link_secrets"})


@dataclass(frozen=True, slots=True)
class AuthConfig:
    credentials_path: Path
    link_secrets_dir: Path

    def link_secret_path(self, group_id: int) -> Path:
        return self.link_secrets_dir / f"group-{group_id}.secret"


def parse_auth(raw: Any, config_dir: Path) -> AuthConfig | None | tuple[str, str]:
    """The [auth] table, None when absent or enabled = false, (key, problem) when bad.
    Its problems read as every other table's: an unknown key names the key meant (a
    typo of `credentials` was told only the known keys), and a wrong value says what
    it got (`credentials = 5` was told the key "is required"), also with
    `enabled = false`, which took any value and refused it only once switched on."""
    # here: fields imports the schema, which imports us
    from mrs.config.fields import _describe, resolve_path

    if raw is None:
        return None
    if not isinstance(raw, dict):
        return "", f"must be a table ([auth]), got {_describe(raw)}"
    unknown = sorted(set(raw) - AUTH_KEYS)
    if unknown:
        return unknown[0], unknown_key_problem(unknown[0], AUTH_KEYS)
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        return "enabled", f"must be true or false, got {_describe(enabled)}"
    paths = {}
    for key in ("credentials", "link_secrets"):
        if key not in raw:
            if not enabled:  # switched off: the table may be a stub
                continue
            return key, "required key is missing: a path (relative to the config file)"
        value = raw[key]
        if not isinstance(value, str):
            return key, f"must be a path (a string), got {_describe(value)}"
        path = resolve_path(value, config_dir)
        if isinstance(path, str):
            return key, path
        if (problem := _kind_problem(key, path)) is not None:
            return key, problem
        paths[key] = path
    if not enabled:  # its values checked all the same: switched on later, they hold
        return None
    return AuthConfig(paths["credentials"], paths["link_secrets"])


def _kind_problem(key: str, path: Path) -> str | None:
    """Why `path` can never be what `key` names, or None: `credentials` is a file,
    `link_secrets` a directory (either may not exist yet: `mrs creds` writes them).
    Why here: `credentials = "/"` loaded, and `mrs serve` then ended in
    "credentials file /: Is a directory", which named neither the key nor the table."""
    try:
        is_dir = path.is_dir()
        exists = is_dir or path.exists()
    except OSError:  # not reachable: the group's own read names it
        return None
    if key == "credentials" and is_dir:
        return f"{path} is a directory: name the credentials file in it (e.g. creds.toml)"
    if key == "link_secrets" and exists and not is_dir:
        return f"{path} is a file: name the directory that holds the link secrets"
    return None
