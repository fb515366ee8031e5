"""One group as `mrs status` saw it: its status, or why it could not be read.

Made by `mrs.tools.bus_status` (which asks the servers) and drawn by
`mrs.tools.status_render`; a module of its own so neither imports the other both ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mrs.config.instance_types import CoordinatorConfig


@dataclass
class GroupView:
    """One group as `mrs status` saw it: its status, or why it could not be read."""

    address: str
    group: int | None = None
    name: str | None = None
    status: dict[str, Any] | None = None
    error: str | None = None
    refused: str | None = None
    """The group's reason when it answered and refused us (credentials, TLS): it is
    up, and `error` alone would read as down."""
    links_configured: list[int] = field(default_factory=list)
    connect_options: dict[str, Any] = field(default_factory=dict, repr=False)
    """TLS settings from the config (mrs.security.tls.operator_connect_options)."""
    coordinator: CoordinatorConfig | None = field(default=None, repr=False)
    """A replicated group's etcd: asked who leads when no instance answers."""
    config_path: Any = field(default=None, repr=False)
    """The bus file that names it: a silent etcd's line names the file whose
    `[coordinator] etcd` to check (mrs.replication.etcd.silent_etcd_line)."""
    instances: dict[str, str] = field(default_factory=dict, repr=False)
    """A replicated group's instances: name -> client address (the one etcd names
    active is asked first)."""

    ops_addresses: list[tuple[str, int]] = field(default_factory=list, repr=False)
    """Its `[group.ops]` endpoints (metrics_listen, web_listen) from the config: asked
    when the client port does not answer, since they say "recovering" meanwhile."""
    instance: str | None = None
    """The replicated group's instance asked alone (`mrs status --config --address`)."""
    instance_addresses: dict[str, str] = field(default_factory=dict, repr=False)
    """Its group's instances' client addresses, to say where the active is."""
    replication_address: str = ""
    """That instance's replication address: a replica listens there, and only there."""
    not_active: str | None = None
    """Why that instance did not answer: a replica, not running, or cut off."""
    recovering: str | None = None
    """What an ops endpoint said while the group recovers its journals (its client
    port holds connections unanswered until then)."""

    @property
    def up(self) -> bool:
        return self.status is not None

    @property
    def state(self) -> str:
        """UP (status read), RECOVERING (its ops endpoint says so), REFUSED (answered,
        but not to us), or DOWN."""
        if self.status is not None:
            return "UP"
        if self.recovering is not None:
            return "RECOVERING"
        return "REFUSED" if self.refused is not None else "DOWN"

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group if self.group is not None else (self.status or {}).get("group"),
            "name": self.name if self.name is not None else (self.status or {}).get("name"),
            "address": self.address,
            "up": self.up,
            "state": self.state,
            "error": self.error,
            "refused": self.refused,
            "recovering": self.recovering,
            "status": self.status,
        }
