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

AUTH_KEYS = frozenset({"enabled", "credentials", "link_secrets"})


@dataclass(frozen=True, slots=True)
class AuthConfig:
    credentials_path: Path
    link_secrets_dir: Path

    def link_secret_path(self, group_id: int) -> Path:
        return self.link_secrets_dir / f"group-{group_id}.secret"


def parse_auth(raw: Any, config_dir: Path) -> AuthConfig | None | tuple[str, str]:
    """The [auth] table, None when absent or enabled = false, (key, problem) when bad."""
    from mrs.config.fields import resolve_path  # here: fields imports the schema, which imports us

    if raw is None:
        return None
    if not isinstance(raw, dict):
        return "", "must be a table"
    unknown = set(raw) - AUTH_KEYS
    if unknown:
        return sorted(unknown)[0], f"unknown key (known: {', '.join(sorted(AUTH_KEYS))})"
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        return "enabled", "must be true or false"
    if not enabled:
        return None
    paths = {}
    for key in ("credentials", "link_secrets"):
        value = raw.get(key)
        if not isinstance(value, str) or not value:
            return key, "is required: a path (relative to the config file)"
        path = resolve_path(value, config_dir)
        if isinstance(path, str):
            return key, path
        paths[key] = path
    return AuthConfig(paths["credentials"], paths["link_secrets"])
