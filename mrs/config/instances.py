"""A replicated group's instances ([[group.instance]]) and the coordinator ([coordinator]).

Why checked here, at load: a replicated group that starts with two instances (no
majority once one is lost), two instances on one data directory or one replication
address (one would overwrite the other's copy), or no etcd to elect the active, would
look healthy until the day a machine is lost. So each is refused at start, one line
naming the key.

    [coordinator]                  # the bus's etcd, needed by any replicated group
    etcd = ["http://127.0.0.1:2379"]
    lease_ttl_s = 5                # optional: the active's lease
    prefix = "/mrs"                # optional: the bus's keys in etcd (one per bus)

    [[group.instance]]             # three per replicated group (or none)
    name = "a"
    listen = "127.0.0.1:7101"      # where clients reach it while it is active
    replication = "127.0.0.1:7201" # where the active streams its commits to it
    data_dir = "g1a"

A group without instances is one instance, exactly as before (its `listen` and
`data_dir`); with instances, the group's own `listen` and `data_dir` may be left out
(the first instance's are used where a single address is wanted; the group's own
`listen`, if given, is checked but not used: nothing listens there).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from mrs.config.addresses import host_port, overlap, same_address
from mrs.config.fields import FieldReader, _describe, _join
from mrs.config.instance_types import (
    COORDINATOR_PREFIX_DEFAULT,
    CoordinatorConfig,
    InstanceConfig,
)
from mrs.limits import (
    REPLICATION_INSTANCES_MIN,
    REPLICATION_LEASE_TTL_S_DEFAULT,
    REPLICATION_LEASE_TTL_S_MIN,
)

__all__ = ["CoordinatorConfig", "InstanceConfig", "parse_coordinator", "parse_instances"]

_INSTANCE_KEYS = frozenset({"name", "listen", "replication", "data_dir"})
_COORDINATOR_KEYS = frozenset({"etcd", "lease_ttl_s", "prefix"})
LEASE_TTL_S_MAX = 3600


def parse_coordinator(reader: FieldReader, document: dict[str, Any]) -> CoordinatorConfig | None:
    """[coordinator], or None when the bus has none."""
    raw = document.get("coordinator")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        reader.fail("coordinator", f"must be a table ([coordinator]), got {_describe(raw)}")
    reader.check_keys(raw, "coordinator", _COORDINATOR_KEYS, ("etcd",))
    endpoints = raw["etcd"]
    if not isinstance(endpoints, list) or not endpoints:
        reader.fail(
            "coordinator.etcd",
            f'must be a non-empty array of URLs like "http://127.0.0.1:2379", '
            f"got {_describe(endpoints)}",
        )
    for index, endpoint in enumerate(endpoints):
        if not (isinstance(endpoint, str) and _etcd_url_ok(endpoint)):
            reader.fail(
                f"coordinator.etcd[{index}]",
                f'must be a URL like "http://127.0.0.1:2379" (http:// or https://, '
                f"a host, a port 1..65535 and nothing after it), got {endpoint!r}",
            )
    ttl_s = reader.integer(
        raw,
        "lease_ttl_s",
        "coordinator",
        low=REPLICATION_LEASE_TTL_S_MIN,
        high=LEASE_TTL_S_MAX,
        default=REPLICATION_LEASE_TTL_S_DEFAULT,
    )
    prefix = (
        reader.string(raw, "prefix", "coordinator")
        if "prefix" in raw
        else COORDINATOR_PREFIX_DEFAULT
    )
    # no blank nor control character: a tab, a newline or a NUL was taken (only a
    # space was refused), and the prefix is written into every log line naming a key
    if (
        not prefix.startswith("/")
        or prefix.endswith("/")
        or any(c.isspace() or not c.isprintable() for c in prefix)
    ):
        reader.fail(
            "coordinator.prefix",
            f'must be a key path like "/mrs/prod" (no trailing /, no blank or control '
            f"character), got {prefix!r}",
        )
    return CoordinatorConfig(
        etcd=tuple(e.rstrip("/") for e in endpoints), lease_ttl_s=ttl_s, prefix=prefix
    )


def parse_instances(
    reader: FieldReader, raw_group: dict[str, Any], where: str
) -> tuple[InstanceConfig, ...]:
    """The group's [[group.instance]] entries, checked: none, or at least three with
    distinct names, data directories (checked bus-wide by the reader) and addresses."""
    raw_instances = reader.tables(raw_group, "instance", where)
    if not raw_instances:
        return ()
    if len(raw_instances) < REPLICATION_INSTANCES_MIN:
        reader.fail(
            _join(where, "instance"),
            f"a replicated group needs at least {REPLICATION_INSTANCES_MIN} instances "
            f"(a majority survives the loss of one), got {len(raw_instances)}; "
            "leave them out for an unreplicated group",
        )
    instances = []
    for i, raw in enumerate(raw_instances):
        at = f"{where}.instance[{i}]"
        reader.check_keys(raw, at, _INSTANCE_KEYS, tuple(sorted(_INSTANCE_KEYS)))
        host, port = reader.host_port(raw, "listen", at, port_min=1)
        rhost, rport = reader.host_port(raw, "replication", at, port_min=1)
        instances.append(
            InstanceConfig(
                name=reader.name(raw, "name", at),
                listen_host=host,
                listen_port=port,
                replication_host=rhost,
                replication_port=rport,
                data_dir=reader.data_dir(raw, at),
            )
        )
    _check_distinct(reader, instances, where)
    return tuple(instances)


def _check_distinct(reader: FieldReader, instances: list[InstanceConfig], where: str) -> None:
    """Names, client addresses and replication addresses: each used once in the group.
    Two addresses are one when they are one listener on one machine
    (`addresses.overlap`: `localhost` and 127.0.0.1, or a wildcard host and a loopback
    or wildcard one on its port), as across groups (mrs.config.parse). Why the
    wildcard too: an instance on 0.0.0.0:7101 beside one (or its own replication) on
    127.0.0.1:7101 loaded, and the second to start failed on a port in use."""
    names: dict[str, int] = {}
    seen: list[tuple[str, int, int, str]] = []  # host, port, instance, key
    for i, instance in enumerate(instances):
        at = f"{where}.instance[{i}]"
        if instance.name in names:
            reader.fail(
                _join(at, "name"),
                f"{instance.name} is also used by {where}.instance[{names[instance.name]}]",
            )
        names[instance.name] = i
        for key, host, port in (
            ("listen", instance.listen_host, instance.listen_port),
            ("replication", instance.replication_host, instance.replication_port),
        ):
            for other_host, other_port, other, other_key in seen:
                if not overlap(host, other_host, port, other_port):
                    continue
                user = "its listen address" if other == i else f"used by {where}.instance[{other}]"
                if same_address(host, port) != same_address(other_host, other_port):
                    user += (
                        f" (its {other_key}, {host_port(other_host, other_port)}: a 0.0.0.0 or :: "
                        "host takes its port on every address of the machine)"
                    )
                reader.fail(_join(at, key), f"{host_port(host, port)} is also {user}")
            seen.append((host, port, i, key))


def _etcd_url_ok(endpoint: str) -> bool:
    """An etcd endpoint a client can dial: http(s), a host, a port in range (one out
    of range was taken, and the instance logged connection errors forever), nothing
    after the port but a "/" (the client appends "/v3/..." to it: a path or a query
    sent every call elsewhere), no blank. A bracket left open (`http://[::1`) is a
    ValueError of urlsplit's, which reached `mrs serve` as an unexpected error."""
    try:
        parts = urlsplit(endpoint)
        port = parts.port
        host = parts.hostname
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https")
        and bool(host)
        and (port is None or port > 0)
        and parts.path in ("", "/")
        and not (parts.query or parts.fragment or any(c.isspace() for c in endpoint))
    )
