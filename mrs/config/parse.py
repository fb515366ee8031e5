"""Walks a bus TOML document into a `BusConfig`, checking the tree and cross-references.

Each table is read with `mrs.config.fields.FieldReader`, so every fault is one line
naming the file and the dotted key; uniqueness of ids, names, listen addresses,
data directories and links is checked across the whole file.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from mrs.config.addresses import WILDCARD_HOSTS, host_port, overlap, same_address
from mrs.config.auth import parse_auth
from mrs.config.fields import FieldReader, _describe, _join, _toml_list
from mrs.config.guards import Guards, parse_guards
from mrs.config.instances import parse_coordinator, parse_instances
from mrs.config.ops import parse_ops
from mrs.config.schema import (
    DEAD_LETTER_QUEUE_CONFIG,
    DEAD_LETTER_QUEUE_MESSAGEQ_NAME,
    DEAD_LETTER_QUEUE_NAME,
    GROUP_ID_MAX,
    GROUP_ID_MIN,
    QUEUE_ID_MAX,
    QUEUE_ID_MIN,
    BusConfig,
    GroupConfig,
    Limits,
    LinkConfig,
    QueueConfig,
    _id_list,
)
from mrs.config.tls import check_link_tls, parse_tls
from mrs.limits import (
    CONFIG_COUNT_MAX,
    CONFIG_JOURNAL_BYTES_MAX,
    CONFIG_JOURNAL_BYTES_MIN,
    CONFIG_MESSAGE_BYTES_MAX,
    QUEUE_MESSAGES_MAX_DEFAULT,
    QUEUE_UNCONFIRMED_MAX_DEFAULT,
)
from mrs.model import DEAD_LETTER_QUEUE

_TOP_KEYS = frozenset({"group", "link", "protection", "auth", "coordinator"})
_GROUP_KEYS = frozenset(
    {"id", "name", "listen", "data_dir", "pcj_default", "dead_letter_queue", "limits", "queue"}
    | {"guards", "dead_letter_queue_recoverable", "ops", "tls", "instance"}
)
_GROUP_REQUIRED = ("id", "name", "listen", "data_dir")
_LIMITS_KEYS = frozenset(
    {
        "dedupe_window_s",
        "dqf_messages_max",
        "saf_messages_max",
        "dlj_messages_max",
        "message_bytes_max",
        "journal_bytes_max",
    }
)
_QUEUE_KEYS = frozenset(
    {"id", "name", "confirm", "messages_max", "unconfirmed_max", "permanent", "recoverable"}
)
_QUEUE_REQUIRED = ("id", "name")
_LINK_KEYS = frozenset({"groups", "address"})
_LINK_REQUIRED = ("groups",)


LIMIT_RANGES = {
    "dqf_messages_max": (1, CONFIG_COUNT_MAX),
    "saf_messages_max": (1, CONFIG_COUNT_MAX),
    "dlj_messages_max": (1, CONFIG_COUNT_MAX),
    "message_bytes_max": (1, CONFIG_MESSAGE_BYTES_MAX),
    "journal_bytes_max": (CONFIG_JOURNAL_BYTES_MIN, CONFIG_JOURNAL_BYTES_MAX),
    # below 2**32 s (136 years): a key's expiry is stored as 64-bit nanoseconds
    # (mrs.group.idempotency), and a longer window failed every keyed put
    "dedupe_window_s": (1, CONFIG_COUNT_MAX),
}
"""(low, high) of each [group.limits] key: what the protocol and LMDB allow."""


@dataclass(slots=True)
class _Parser(FieldReader):
    """Walks the TOML document, checking as it goes; raises ConfigError on the first fault."""

    # -- the tree ---------------------------------------------------------------

    def bus(self, document: dict[str, Any]) -> BusConfig:
        self.check_keys(document, "", _TOP_KEYS, ())
        raw_groups = self.tables(document, "group", "")
        if not raw_groups:
            self.fail("group", "at least one [[group]] is required")
        groups = [self.group(raw, f"group[{i}]") for i, raw in enumerate(raw_groups)]
        self.check_groups_unique(groups)
        by_id = {g.id: g for g in groups}
        links = tuple(
            self.link(raw, f"link[{i}]", by_id)
            for i, raw in enumerate(self.tables(document, "link", ""))
        )
        self.check_links_unique(links)
        self.check_link_addresses(links, groups)
        for i, link in enumerate(links):
            check_link_tls(self, by_id, f"link[{i}]", link.groups)
        linked: dict[int, set[int]] = {g.id: set() for g in groups}
        for link in links:
            low, high = link.groups
            linked[low].add(high)
            linked[high].add(low)
        final = {
            gid: replace(by_id[gid], linked_group_ids=tuple(sorted(linked[gid])))
            for gid in sorted(by_id)
        }
        protection = None
        if "protection" in document:
            protection = self.file_path(document, "protection", "", self.base_directory)
        auth = parse_auth(document.get("auth"), self.base_directory)
        if isinstance(auth, tuple):
            self.fail(_join("auth", auth[0]) if auth[0] else "auth", auth[1])
        coordinator = parse_coordinator(self, document)
        for i, group in enumerate(groups):
            if group.instances and coordinator is None:
                self.fail(
                    f"group[{i}].instance",
                    "a replicated group needs [coordinator] etcd = [...] (its leadership)",
                )
        return BusConfig(
            path=self.path.absolute(),
            groups=final,
            links=links,
            protection=protection,
            auth=auth,
            coordinator=coordinator,
        )

    def group(self, raw: dict[str, Any], where: str) -> GroupConfig:
        instances = parse_instances(self, raw, where)
        required = _GROUP_REQUIRED if not instances else ("id", "name")
        self.check_keys(raw, where, _GROUP_KEYS, required)
        group_id = self.integer(raw, "id", where, low=GROUP_ID_MIN, high=GROUP_ID_MAX)
        name = self.name(raw, "name", where)
        if "listen" in raw or not instances:
            host, port = self.host_port(raw, "listen", where, port_min=0)
        if instances:  # where a single address is wanted, the first instance's: the
            # group's own `listen` is checked, not used (nothing listens there, and
            # links dialed it: on port 0 the lower group never dialed the instances)
            host, port = instances[0].listen_host, instances[0].listen_port
        data_dir = self.data_dir(raw, where) if "data_dir" in raw else instances[0].data_dir
        pcj_default = self.boolean(raw, "pcj_default", where, default=False)
        limits = self.limits(raw, where)
        raw_queues = self.tables(raw, "queue", where)
        queues = [self.queue(q, f"{where}.queue[{i}]") for i, q in enumerate(raw_queues)]
        self.check_queues_unique(queues, where, group_id)
        dead_letter_queue = self.boolean(raw, "dead_letter_queue", where, default=True)
        guards = self.guards(raw.get("guards"), where, limits)
        recoverable_dlq = self.boolean(raw, "dead_letter_queue_recoverable", where, default=False)
        if recoverable_dlq and not dead_letter_queue:  # else taken, and no DLQ journaled
            self.fail(
                f"{where}.dead_letter_queue_recoverable",
                "true needs a dead letter queue, but dead_letter_queue = false: "
                "drop one of the two",
            )
        if dead_letter_queue:
            # Memory-based as in MessageQ unless asked: journaled, it survives SIGKILL.
            queues.append(replace(DEAD_LETTER_QUEUE_CONFIG, recoverable=recoverable_dlq))
        ops = parse_ops(self, raw, where, limits.journal_bytes_max)
        return GroupConfig(
            id=group_id,
            name=name,
            listen_host=host,
            listen_port=port,
            data_dir=data_dir,
            pcj_default=pcj_default,
            limits=limits,
            queues={q.id: q for q in sorted(queues, key=lambda q: q.id)},
            dead_letter_queue=dead_letter_queue,
            guards=guards,
            ops=ops,
            tls=parse_tls(self, raw, where),
            instances=instances,
        )

    def limits(self, group: dict[str, Any], group_where: str) -> Limits:
        where = f"{group_where}.limits"
        if "limits" not in group:
            return Limits()
        raw = group["limits"]
        if not isinstance(raw, dict):
            self.fail(where, f"must be a table ([group.limits]), got {_describe(raw)}")
        self.check_keys(raw, where, _LIMITS_KEYS, ())
        defaults = Limits()
        values = {
            key: self.integer(raw, key, where, low=1, default=getattr(defaults, key))
            for key in sorted(_LIMITS_KEYS)
        }
        for key, (low, high) in LIMIT_RANGES.items():
            if not low <= values[key] <= high:
                self.fail(
                    f"{where}.{key}",
                    f"must be in {low}..{high} (what the protocol and LMDB allow), "
                    f"got {values[key]}",
                )
        if values["message_bytes_max"] * 2 > values["journal_bytes_max"]:
            self.fail(
                f"{where}.message_bytes_max",
                f"must be at most half of journal_bytes_max ({values['journal_bytes_max']}) "
                f"so a message fits the journal, got {values['message_bytes_max']}",
            )
        return Limits(**values)

    def guards(self, raw: Any, group_where: str, limits: Limits) -> Guards:
        """[group.guards]; the two byte bounds one message must fit in
        (connection_bytes_max, queue_bytes_max), when the file leaves them to their
        default (256 MiB), at least `message_bytes_max`: under a larger
        message_bytes_max, a message the limits let in answered EXCEEDQUOTA on an idle
        connection, and nothing said the group's real bound was the guard's default."""
        guards = parse_guards(raw)
        if isinstance(guards, tuple):
            key, problem = guards
            self.fail(f"{group_where}.guards" + (f".{key}" if key else ""), problem)
        raised = {
            key: limits.message_bytes_max
            for key in ("connection_bytes_max", "queue_bytes_max")
            if not (raw and key in raw) and getattr(guards, key) < limits.message_bytes_max
        }
        return replace(guards, **raised)

    def queue(self, raw: dict[str, Any], where: str) -> QueueConfig:
        self.check_keys(raw, where, _QUEUE_KEYS, _QUEUE_REQUIRED)
        queue_id = self.integer(raw, "id", where, low=QUEUE_ID_MIN, high=QUEUE_ID_MAX)
        if queue_id == DEAD_LETTER_QUEUE:
            self.fail(
                f"{where}.id",
                f"queue {DEAD_LETTER_QUEUE} is the dead letter queue and is always present",
            )
        return QueueConfig(
            id=queue_id,
            name=self.name(raw, "name", where),
            confirm=self.confirm_style(raw, where),
            messages_max=self.integer(
                raw,
                "messages_max",
                where,
                low=1,
                high=CONFIG_COUNT_MAX,
                default=QUEUE_MESSAGES_MAX_DEFAULT,
            ),
            unconfirmed_max=self.integer(
                raw,
                "unconfirmed_max",
                where,
                low=1,
                high=CONFIG_COUNT_MAX,
                default=QUEUE_UNCONFIRMED_MAX_DEFAULT,
            ),
            permanent=self.boolean(raw, "permanent", where, default=True),
            recoverable=self.boolean(raw, "recoverable", where, default=True),
        )

    def link(self, raw: dict[str, Any], where: str, groups: dict[int, GroupConfig]) -> LinkConfig:
        self.check_keys(raw, where, _LINK_KEYS, _LINK_REQUIRED)
        key = f"{where}.groups"
        pair = raw["groups"]
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(isinstance(g, int) and not isinstance(g, bool) for g in pair)
        ):
            shown = _describe(pair) if not isinstance(pair, list) else _toml_list(pair)
            self.fail(key, f"must be an array of two group ids, e.g. [1, 2], got {shown}")
        for group_id in pair:
            if group_id not in groups:
                self.fail(
                    key,
                    f"group {group_id} is not configured "
                    f"(groups: {_id_list(dict(sorted(groups.items())))})",
                )
        if pair[0] == pair[1]:
            self.fail(key, f"a link joins two different groups, got {_toml_list(pair)}")
        host: str | None = None
        port: int | None = None
        if "address" in raw:
            host, port = self.host_port(raw, "address", where, port_min=1)
            if host in WILDCARD_HOSTS:  # what a group listens on, never a host to dial
                self.fail(
                    f"{where}.address",
                    f"{host_port(host, port)} listens on every address; the lower group "
                    f"dials this address: give the host group {max(pair)} is reached at "
                    f"(e.g. 127.0.0.1:{port} or its host name)",
                )
        return LinkConfig(groups=(min(pair), max(pair)), address_host=host, address_port=port)

    # -- cross-checks -----------------------------------------------------------

    def check_groups_unique(self, groups: list[GroupConfig]) -> None:
        ids: dict[int, int] = {}
        names: dict[str, int] = {}
        for i, group in enumerate(groups):
            if group.id in ids:
                self.fail(
                    f"group[{i}].id", f"duplicate group id {group.id} (also group[{ids[group.id]}])"
                )
            ids[group.id] = i
            if group.name in names:
                self.fail(
                    f"group[{i}].name",
                    f"duplicate group name {group.name!r} (also group[{names[group.name]}])",
                )
            names[group.name] = i
        self._check_addresses_unique(groups)

    def _check_addresses_unique(self, groups: list[GroupConfig]) -> None:
        """Every address a server of the bus listens on, once: a group's, or a
        replicated group's instances' client and replication addresses, and its
        `[group.ops]` metrics_listen and web_listen (within one group
        `mrs.config.instances` and `mrs.config.ops` check them; here across groups,
        where an instance on another group's port would take that group's clients,
        and one group's metrics on another's listen failed that group's start with
        "the port is in use by another process", naming neither key). A wildcard
        host overlaps a loopback or wildcard one on its port (`addresses.overlap`)."""
        on_port: dict[int, list[tuple[str, str]]] = {}  # port: (host, key) seen
        for i, group in enumerate(groups):
            for where, host, port in _addresses(group, f"group[{i}]"):
                if port == 0:
                    continue
                for other_host, other in on_port.get(port, []):
                    if not other.startswith(f"group[{i}].") and overlap(
                        host, other_host, port, port
                    ):
                        self.fail(where, _overlap_problem(host, other_host, port, other))
                on_port.setdefault(port, []).append((host, where))

    def check_link_addresses(
        self, links: tuple[LinkConfig, ...], groups: list[GroupConfig]
    ) -> None:
        """A link's `address` is where the lower group reaches the higher one: of what
        the bus listens on, only the higher group's own listen (a port has one
        listener, so another of the bus's addresses is not a proxy either). Why:
        `address` copied from the lower group's own `listen` loaded, and the group
        dialed itself for ever, logging "group 1 has no link from group 1", which
        names neither the link nor its key."""
        owners = [
            (host, port, group.id, where)
            for i, group in enumerate(groups)
            for where, host, port in _addresses(group, f"group[{i}]")
            if port != 0
        ]
        for i, link in enumerate(links):
            if link.address_host is None or link.address_port is None:
                continue
            link_host, link_port = link.address_host, link.address_port
            # the same listener: `same_address`, or a wildcard listen's loopback
            # (`overlap`): a group on 0.0.0.0:7001 whose link said 127.0.0.1:7001
            # dialed itself for ever, as one given its own spelling did
            owner = next(
                (o for o in owners if overlap(link_host, o[0], link_port, o[1])), None
            )
            if owner is None:
                continue
            host, port, group_id, where = owner
            if group_id != link.groups[1] or not where.endswith(".listen"):  # not ops_listen
                shown = host_port(link_host, link_port)
                if same_address(link_host, link_port) != same_address(host, port):
                    shown += f" (the listener of {host_port(host, port)})"
                self.fail(
                    f"link[{i}].address",
                    f"{shown} is {where}, not where group "
                    f"{link.groups[1]} takes links (its listen): the lower group dials it there",
                )

    def check_queues_unique(self, queues: list[QueueConfig], where: str, group_id: int) -> None:
        ids: dict[int, int] = {}
        names: dict[str, int] = {}
        for i, queue in enumerate(queues):
            if queue.id in ids:
                self.fail(
                    f"{where}.queue[{i}].id",
                    f"duplicate queue id {queue.id} in group {group_id} "
                    f"(also {where}.queue[{ids[queue.id]}])",
                )
            ids[queue.id] = i
            if queue.name in (DEAD_LETTER_QUEUE_NAME, DEAD_LETTER_QUEUE_MESSAGEQ_NAME):
                self.fail(
                    f"{where}.queue[{i}].name",
                    f"queue name {queue.name!r} belongs to the dead letter "
                    f"queue ({DEAD_LETTER_QUEUE}) of every group",
                )
            if queue.name in names:
                self.fail(
                    f"{where}.queue[{i}].name",
                    f"duplicate queue name {queue.name!r} in group {group_id} "
                    f"(also {where}.queue[{names[queue.name]}])",
                )
            names[queue.name] = i

    def check_links_unique(self, links: tuple[LinkConfig, ...]) -> None:
        seen: dict[tuple[int, int], int] = {}
        for i, link in enumerate(links):
            if link.groups in seen:
                low, high = link.groups
                self.fail(
                    f"link[{i}].groups",
                    f"duplicate link between groups {low} and {high} "
                    f"(also link[{seen[link.groups]}])",
                )
            seen[link.groups] = i


def _overlap_problem(host: str, other_host: str, port: int, other: str) -> str:
    """The one line for a listening address that overlaps `other`'s."""
    problem = f"{host_port(host, port)} is also the address of {other}"
    if other_host == host:
        return problem
    if {host, other_host} & WILDCARD_HOSTS:
        return (
            f"{problem} ({host_port(other_host, port)}: a 0.0.0.0 or :: host takes "
            "its port on every address of the machine)"
        )
    return f"{problem} ({host_port(other_host, port)})"


def _addresses(group: GroupConfig, where: str) -> list[tuple[str, str, int]]:
    """(key, host, port) of every address the group's servers listen on: its listen
    (or, replicated, its instances' listen and replication addresses), and its
    metrics and web endpoints when they are on."""
    addresses = [(f"{where}.listen", group.listen_host, group.listen_port)]
    if group.instances:
        addresses = [
            (f"{where}.instance[{n}].{key}", host, port)
            for n, instance in enumerate(group.instances)
            for key, host, port in (
                ("listen", instance.listen_host, instance.listen_port),
                ("replication", instance.replication_host, instance.replication_port),
            )
        ]
    ops = group.ops
    for key, host, port in (
        ("metrics_listen", ops.metrics_host, ops.metrics_port),
        ("web_listen", ops.web_host, ops.web_port),
    ):
        if host is not None and port is not None:
            addresses.append((f"{where}.ops.{key}", host, port))
    return addresses
