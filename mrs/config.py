"""Bus configuration: one TOML file describes every group, queue and link of a bus.

Why a module of its own: every `mrs serve` process of a bus reads the same file, and
a mistake in it (a typo in a key, a port out of range, a link to a group that does
not exist) would otherwise surface much later as a strange delivery status. So the
file is validated completely when it is loaded, and every problem is reported as
one line naming the file, the dotted key (`group[0].queue[1].confirm`) and what is
wrong with it. The result is a tree of frozen dataclasses the rest of MRS can trust
without checking again; it also resolves queue names (`NYC.ORDERS`) to addresses.

The schema:

    [[group]]
    id = 1                         # 1..32000
    name = "NYC"
    listen = "127.0.0.1:7001"      # host:port; port 0 = the server picks one
    data_dir = "g1"                # relative to this file's directory
    pcj_default = true             # optional, default false
    [group.limits]                 # optional, every key optional
    dqf_messages_max = 100000
    saf_messages_max = 100000
    message_bytes_max = 1048576
    journal_bytes_max = 1073741824
    [[group.queue]]
    id = 10                        # 1..999, not 96 (the dead letter queue)
    name = "ORDERS"
    confirm = "explicit-in-order"  # or "explicit-out-of-order", "implicit"
    messages_max = 10000
    unconfirmed_max = 1000
    permanent = true
    recoverable = true             # false: no DQF (recoverable puts answer NO_DQF)
    [group.tls]                    # optional: TLS on the port and links (mrs.security.tls)
    ca = "certs/ca.pem"
    cert = "certs/group-1.pem"
    key = "certs/group-1.key"
    [[link]]
    groups = [1, 2]
    address = "127.0.0.1:9000"     # optional: where the lower group dials
"""

from __future__ import annotations

import datetime
import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from mrs.errors import OperatorError
from mrs.guards import Guards, parse_guards
from mrs.limits import (
    CONFIG_COUNT_MAX,
    CONFIG_JOURNAL_BYTES_MAX,
    CONFIG_JOURNAL_BYTES_MIN,
    CONFIG_MESSAGE_BYTES_MAX,
    QUEUE_MESSAGES_MAX_DEFAULT,
    QUEUE_UNCONFIRMED_MAX_DEFAULT,
)
from mrs.model import DEAD_LETTER_QUEUE, Address, ConfirmStyle
from mrs.ops_config import OpsConfig, parse_ops
from mrs.security.config import AuthConfig, parse_auth
from mrs.security.tls import TlsConfig, check_link_tls, parse_tls

GROUP_ID_MIN = 1
GROUP_ID_MAX = 32000
QUEUE_ID_MIN = 1
QUEUE_ID_MAX = 999
PORT_MAX = 65535

DEAD_LETTER_QUEUE_NAME = "DLQ"
DEAD_LETTER_QUEUE_MESSAGEQ_NAME = "PAMS_DEAD_LETTER_QUEUE"
"""MessageQ's name for the DLQ: attachable and addressable by it in every group."""

_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER_PATTERN = re.compile(r"[0-9]+")

_TOP_KEYS = frozenset({"group", "link", "protection", "auth"})
_GROUP_KEYS = frozenset(
    {"id", "name", "listen", "data_dir", "pcj_default", "dead_letter_queue", "limits", "queue"}
    | {"guards", "dead_letter_queue_recoverable", "ops", "tls"}
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
}
"""(low, high) of each [group.limits] key: what the protocol and LMDB allow."""


class ConfigError(OperatorError):
    """A bus configuration that cannot be used.

    `str(err)` is one line: ``"{path}: {key}: {problem}"``, where `key` is a dotted
    path into the file (``group[0].queue[1].confirm``), ``(syntax)`` for a TOML
    syntax error, or ``(file)`` when the file cannot be read.
    """

    def __init__(self, path: str | os.PathLike[str], key: str, problem: str) -> None:
        self.path = Path(path)
        self.key = key
        self.problem = " ".join(problem.split())
        super().__init__(f"{path}: {key}: {self.problem}")
        self.args = (path, key, problem)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.key, self.problem))


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-group bounds: journal record counts, message size, LMDB map size."""

    dqf_messages_max: int = 100_000
    saf_messages_max: int = 100_000
    dlj_messages_max: int = 1_000_000
    message_bytes_max: int = 1_048_576
    journal_bytes_max: int = 1 << 30
    dedupe_window_s: int = 7 * 24 * 3600
    """How long an idempotency key dedupes (mrs.idempotency)."""


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """One target queue of a group."""

    id: int
    name: str
    confirm: ConfirmStyle = ConfirmStyle.EXPLICIT_IN_ORDER
    messages_max: int = QUEUE_MESSAGES_MAX_DEFAULT
    unconfirmed_max: int = QUEUE_UNCONFIRMED_MAX_DEFAULT
    permanent: bool = True
    recoverable: bool = True
    """False: the queue has no DQF; recoverable puts to it answer NO_DQF."""


DEAD_LETTER_QUEUE_CONFIG = QueueConfig(
    id=DEAD_LETTER_QUEUE,
    name=DEAD_LETTER_QUEUE_NAME,
    confirm=ConfirmStyle.EXPLICIT_OUT_OF_ORDER,
    messages_max=10000,
    unconfirmed_max=10000,
    permanent=True,
    recoverable=False,
)
"""Queue 96: present in every group without being declared; memory only."""


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """One group: one `mrs serve` process, its data directory and its queues."""

    id: int
    name: str
    listen_host: str
    listen_port: int
    data_dir: Path
    pcj_default: bool
    limits: Limits
    queues: dict[int, QueueConfig]
    linked_group_ids: tuple[int, ...] = ()
    dead_letter_queue: bool = True
    """False: the group has no queue 96 (DLQ UMA fails; links apply the no-DLQ rules)."""
    guards: Guards = field(default_factory=Guards)
    """Heartbeats, deadlines, memory and flood bounds ([group.guards], mrs.guards)."""
    ops: OpsConfig = OpsConfig()
    """Metrics, web view, journal warnings and growth, PCJ retention (mrs.ops_config)."""
    tls: TlsConfig | None = None
    """[group.tls]: TLS on the port and links (mrs.security.tls); None: plaintext."""

    def queue_by_name(self, name: str) -> QueueConfig:
        """The queue called `name` (exact, case-sensitive); LookupError if none."""
        for queue in self.queues.values():
            if queue.name == name:
                return queue
        if name == DEAD_LETTER_QUEUE_MESSAGEQ_NAME and DEAD_LETTER_QUEUE in self.queues:
            return self.queues[DEAD_LETTER_QUEUE]
        known = ", ".join(q.name for q in self.queues.values())
        raise LookupError(
            f"group {self.id} ({self.name}) has no queue named {name!r} (queues: {known})"
        )

    def queue(self, queue_id: int) -> QueueConfig:
        """The queue with id `queue_id`; LookupError if it is not configured."""
        try:
            return self.queues[queue_id]
        except KeyError:
            known = ", ".join(str(q) for q in self.queues)
            raise LookupError(
                f"group {self.id} ({self.name}) has no queue {queue_id} (queues: {known})"
            ) from None

    def links_to(self) -> tuple[int, ...]:
        """Ids of the groups linked to this one, ascending."""
        return self.linked_group_ids


@dataclass(frozen=True, slots=True)
class LinkConfig:
    """A link between two groups; the lower group id dials the higher one.

    `address_host`/`address_port` override where the lower group dials (e.g. a
    proxy); when None it dials the higher group's listen address.
    """

    groups: tuple[int, int]
    address_host: str | None = None
    address_port: int | None = None


@dataclass(frozen=True, slots=True)
class BusConfig:
    """The whole bus: groups by id (ascending) and links."""

    path: Path
    groups: dict[int, GroupConfig]
    links: tuple[LinkConfig, ...]
    protection: Path | None = None
    """The message protection policy file (mrs.protection.policy), if any."""
    auth: AuthConfig | None = None
    """[auth] (mrs.security.config): None = every connection trusted (the default)."""

    def group(self, group_id: int) -> GroupConfig:
        """The group with id `group_id`; LookupError if it is not configured."""
        try:
            return self.groups[group_id]
        except KeyError:
            raise LookupError(
                f"no group {group_id} in {self.path} (groups: {_id_list(self.groups)})"
            ) from None

    def group_by_name(self, name: str) -> GroupConfig:
        """The group called `name` (exact, case-sensitive); LookupError if none."""
        for group in self.groups.values():
            if group.name == name:
                return group
        known = ", ".join(g.name for g in self.groups.values())
        raise LookupError(f"no group named {name!r} in {self.path} (groups: {known})")

    def link_between(self, group_a: int, group_b: int) -> LinkConfig | None:
        """The link joining the two groups, or None."""
        wanted = (min(group_a, group_b), max(group_a, group_b))
        for link in self.links:
            if link.groups == wanted:
                return link
        return None

    def resolve(self, text: str, default_group: int) -> Address:
        """Turn an address as people write it into an Address.

        Accepted: ``2.20`` (numbers), ``20`` or ``ORDERS`` (a queue of
        `default_group`), ``NYC.ORDERS``, ``NYC.20``, ``2.ORDERS`` (group by name or
        id, queue by name or id). A numeric queue is returned even when it is not
        configured: the server decides what an unknown queue means. A name that
        does not exist, or text that is not an address, raises LookupError.
        """
        group_text, dot, queue_text = text.strip().partition(".")
        if not dot:
            group_text, queue_text = str(default_group), group_text
        if not group_text or not queue_text or "." in queue_text:
            raise LookupError(f"not a queue address (GROUP.QUEUE, QUEUE or names): {text!r}")
        if _NUMBER_PATTERN.fullmatch(group_text):
            group_id = _in_range(int(group_text), GROUP_ID_MIN, GROUP_ID_MAX, "group", text)
            if _NUMBER_PATTERN.fullmatch(queue_text):
                queue_id = _in_range(int(queue_text), QUEUE_ID_MIN, QUEUE_ID_MAX, "queue", text)
                return Address(group_id, queue_id)
            group = self.group(group_id)
        elif _NAME_PATTERN.fullmatch(group_text):
            group = self.group_by_name(group_text)
        else:
            raise LookupError(f"not a group id or name in address {text!r}: {group_text!r}")
        if _NUMBER_PATTERN.fullmatch(queue_text):
            queue_id = _in_range(int(queue_text), QUEUE_ID_MIN, QUEUE_ID_MAX, "queue", text)
            return Address(group.id, queue_id)
        if not _NAME_PATTERN.fullmatch(queue_text):
            raise LookupError(f"not a queue id or name in address {text!r}: {queue_text!r}")
        return Address(group.id, group.queue_by_name(queue_text).id)


def load_config(path: str | os.PathLike[str]) -> BusConfig:
    """Read and validate the bus configuration file at `path`."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise ConfigError(path, "(file)", f"cannot read: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(path, "(file)", f"not UTF-8 text: {err}") from None
    return parse_config(text, Path(path))


def parse_config(text: str, path: str | os.PathLike[str]) -> BusConfig:
    """Validate TOML `text`; `path` names it in errors and anchors relative data_dirs."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(path, "(syntax)", str(err)) from None
    return _Parser(Path(path)).bus(document)


def _id_list(ids: Mapping[int, object]) -> str:
    return ", ".join(str(i) for i in ids) or "none"


def _in_range(value: int, low: int, high: int, what: str, text: str) -> int:
    if not low <= value <= high:
        raise LookupError(f"{what} {value} out of range {low}..{high} in address {text!r}")
    return value


def _describe(value: object) -> str:
    """A short phrase naming a TOML value and its type, for error messages."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"string {shown!r}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, datetime.date | datetime.time):
        return f"date/time {value}"
    return type(value).__name__


def _toml_list(values: list[Any]) -> str:
    """An array as TOML spells it (true, not True), for error messages."""
    return json.dumps(values, default=str)


def _split_host_port(text: str) -> tuple[str, str] | str:
    """('host', 'port') for 'host:port' or '[v6]:port'; a problem string otherwise."""
    host, colon, port = text.rpartition(":")
    if not colon:
        return f"must be 'host:port', got {text!r}"
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not host:
            return f"empty host in {text!r}"
    elif ":" in host:
        return f"an IPv6 host must be in brackets, e.g. '[::1]:7001', got {text!r}"
    if not host or any(c.isspace() for c in host):
        return f"must be 'host:port' with a non-empty host, got {text!r}"
    return host, port


@dataclass(slots=True)
class _Parser:
    """Walks the TOML document, checking as it goes; raises ConfigError on the first fault."""

    path: Path
    data_dir_owner: dict[Path, str] = field(default_factory=dict)

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ConfigError(self.path, key, problem)

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
            protection = self.path.absolute().parent / self.string(document, "protection", "")
        auth = parse_auth(document.get("auth"), self.path.absolute().parent)
        if isinstance(auth, tuple):
            self.fail(_join("auth", auth[0]), auth[1])
        return BusConfig(
            path=self.path.absolute(), groups=final, links=links, protection=protection, auth=auth
        )

    def group(self, raw: dict[str, Any], where: str) -> GroupConfig:
        self.check_keys(raw, where, _GROUP_KEYS, _GROUP_REQUIRED)
        group_id = self.integer(raw, "id", where, low=GROUP_ID_MIN, high=GROUP_ID_MAX)
        name = self.name(raw, "name", where)
        host, port = self.host_port(raw, "listen", where, port_min=0)
        data_dir = self.data_dir(raw, where)
        pcj_default = self.boolean(raw, "pcj_default", where, default=False)
        limits = self.limits(raw, where)
        raw_queues = self.tables(raw, "queue", where)
        queues = [self.queue(q, f"{where}.queue[{i}]") for i, q in enumerate(raw_queues)]
        self.check_queues_unique(queues, where, group_id)
        dead_letter_queue = self.boolean(raw, "dead_letter_queue", where, default=True)
        guards = parse_guards(raw.get("guards"))
        if isinstance(guards, tuple):
            key, problem = guards
            self.fail(f"{where}.guards" + (f".{key}" if key else ""), problem)
        recoverable_dlq = self.boolean(raw, "dead_letter_queue_recoverable", where, default=False)
        if dead_letter_queue:
            # Memory-based as in MessageQ unless asked: journaled, it survives SIGKILL.
            queues.append(replace(DEAD_LETTER_QUEUE_CONFIG, recoverable=recoverable_dlq))
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
            ops=parse_ops(self, raw, where, limits.journal_bytes_max),
            tls=parse_tls(self, raw, where),
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
                raw, "messages_max", where, low=1, default=QUEUE_MESSAGES_MAX_DEFAULT
            ),
            unconfirmed_max=self.integer(
                raw, "unconfirmed_max", where, low=1, default=QUEUE_UNCONFIRMED_MAX_DEFAULT
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
        return LinkConfig(groups=(min(pair), max(pair)), address_host=host, address_port=port)

    # -- cross-checks -----------------------------------------------------------

    def check_groups_unique(self, groups: list[GroupConfig]) -> None:
        ids: dict[int, int] = {}
        names: dict[str, int] = {}
        listens: dict[tuple[str, int], int] = {}
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
            listen = (group.listen_host, group.listen_port)
            if group.listen_port != 0 and listen in listens:
                self.fail(
                    f"group[{i}].listen",
                    f"{group.listen_host}:{group.listen_port} is also the listen "
                    f"address of group[{listens[listen]}]",
                )
            listens[listen] = i

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

    # -- typed values -----------------------------------------------------------

    def check_keys(
        self, table: dict[str, Any], where: str, allowed: frozenset[str], required: tuple[str, ...]
    ) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.fail(
                    _join(where, key),
                    f"unknown key{hint}; allowed keys: {', '.join(sorted(allowed))}",
                )
        for key in required:
            if key not in table:
                self.fail(_join(where, key), "required key is missing")

    def tables(self, parent: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
        """An optional array of tables ([[key]]); [] when absent."""
        value = parent.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            header = _join(where.split("[")[0], key) if where else key
            self.fail(
                _join(where, key),
                f"must be an array of tables ([[{header}]]), got {_describe(value)}",
            )
        return value

    def integer(
        self,
        table: dict[str, Any],
        key: str,
        where: str,
        *,
        low: int,
        high: int | None = None,
        default: int | None = None,
    ) -> int:
        if key not in table and default is not None:
            return default
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(_join(where, key), f"must be an integer, got {_describe(value)}")
        if value < low or (high is not None and value > high):
            bound = f"in {low}..{high}" if high is not None else f">= {low}"
            self.fail(_join(where, key), f"must be {bound}, got {value}")
        return value

    def boolean(self, table: dict[str, Any], key: str, where: str, *, default: bool) -> bool:
        value = table.get(key, default)
        if not isinstance(value, bool):
            self.fail(_join(where, key), f"must be true or false, got {_describe(value)}")
        return value

    def string(self, table: dict[str, Any], key: str, where: str) -> str:
        value = table[key]
        if not isinstance(value, str):
            self.fail(_join(where, key), f"must be a string, got {_describe(value)}")
        return value

    def name(self, table: dict[str, Any], key: str, where: str) -> str:
        value = self.string(table, key, where)
        if not _NAME_PATTERN.fullmatch(value):
            self.fail(
                _join(where, key),
                f"must be a name: a letter or '_' then letters, digits or '_', got {value!r}",
            )
        return value

    def confirm_style(self, table: dict[str, Any], where: str) -> ConfirmStyle:
        if "confirm" not in table:
            return ConfirmStyle.EXPLICIT_IN_ORDER
        value = self.string(table, "confirm", where)
        try:
            return ConfirmStyle(value)
        except ValueError:
            choices = ", ".join(repr(s.value) for s in ConfirmStyle)
            self.fail(_join(where, "confirm"), f"must be one of {choices}, got {value!r}")

    def host_port(
        self, table: dict[str, Any], key: str, where: str, *, port_min: int
    ) -> tuple[str, int]:
        text = self.string(table, key, where)
        split = _split_host_port(text)
        if isinstance(split, str):
            self.fail(_join(where, key), split)
        host, port_text = split
        port = int(port_text) if _NUMBER_PATTERN.fullmatch(port_text) else -1
        if not port_min <= port <= PORT_MAX:
            self.fail(
                _join(where, key),
                f"port must be a number in {port_min}..{PORT_MAX}, got {port_text!r}",
            )
        return host, port

    def data_dir(self, group: dict[str, Any], where: str) -> Path:
        text = self.string(group, "data_dir", where)
        if not text.strip():
            self.fail(_join(where, "data_dir"), "must not be empty")
        if "\0" in text:  # found by fuzzing: the OS refuses it with a ValueError
            self.fail(_join(where, "data_dir"), "must not contain a NUL character")
        try:
            directory = Path(text).expanduser()
        except RuntimeError:  # "~nosuchuser/..."
            self.fail(_join(where, "data_dir"), f"cannot expand the home directory in {text!r}")
        if not directory.is_absolute():
            directory = self.path.absolute().parent / directory
        directory = directory.resolve()
        if directory in self.data_dir_owner:
            self.fail(
                _join(where, "data_dir"),
                f"{directory} is also the data_dir of {self.data_dir_owner[directory]}",
            )
        self.data_dir_owner[directory] = where
        return directory


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key
