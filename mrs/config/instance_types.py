"""The values of [[group.instance]] and [coordinator] (read by mrs.config.instances).

Apart from the reading so that `mrs.config.schema` can name them without importing the
field readers (which import the schema).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mrs.config.addresses import host_port
from mrs.limits import REPLICATION_LEASE_TTL_S_DEFAULT


@dataclass(frozen=True, slots=True)
class InstanceConfig:
    """One instance of a replicated group: its own disk and its own two addresses."""

    name: str
    listen_host: str
    listen_port: int
    replication_host: str
    replication_port: int
    data_dir: Path

    @property
    def listen(self) -> str:
        return host_port(self.listen_host, self.listen_port)


COORDINATOR_PREFIX_DEFAULT = "/mrs"


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Where the bus's leadership lives: etcd endpoints (tried in turn) and the lease."""

    etcd: tuple[str, ...]
    lease_ttl_s: int = REPLICATION_LEASE_TTL_S_DEFAULT
    prefix: str = COORDINATOR_PREFIX_DEFAULT
    """Where the bus's keys live in etcd: `<prefix>/<group id>/...`. Two buses that
    share one etcd need two prefixes (the same group id would be one leadership)."""
