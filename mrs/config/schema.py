"""The bus configuration as the rest of MRS reads it: frozen dataclasses checked once.

`mrs.config.parse` builds these from the TOML file and raises `ConfigError` on the
first fault; everything else only reads them (and resolves queue names to
addresses through `BusConfig.resolve`), so no caller checks a value again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrs.config.addresses import host_port
from mrs.config.auth import AuthConfig
from mrs.config.guards import Guards
from mrs.config.instance_types import CoordinatorConfig, InstanceConfig
from mrs.config.ops import OpsConfig
from mrs.config.tls import TlsConfig
from mrs.errors import OperatorError
from mrs.limits import (
    GROUP_ID_MAX,
    GROUP_ID_MIN,
    QUEUE_ID_MAX,
    QUEUE_ID_MIN,
    QUEUE_MESSAGES_MAX_DEFAULT,
    QUEUE_NAME_CHARS_MAX,
    QUEUE_UNCONFIRMED_MAX_DEFAULT,
)
from mrs.model import DEAD_LETTER_QUEUE, Address, ConfirmStyle

PORT_MAX = 65535

DEAD_LETTER_QUEUE_NAME = "DLQ"
DEAD_LETTER_QUEUE_MESSAGEQ_NAME = "PAMS_DEAD_LETTER_QUEUE"
"""MessageQ's name for the DLQ: attachable and addressable by it in every group."""
DEAD_LETTER_QUEUE_MESSAGEQ_NAMES = frozenset({DEAD_LETTER_QUEUE_MESSAGEQ_NAME, "dead_letter_queue"})
"""The DLQ's MessageQ names: its constant, and the name MessageQ's default group
configuration gives queue 96 (shared/reference, "dead_letter_queue"). A queue the bus
file declares under one of them is that queue: the names are a fallback, so no file
that used one is refused."""

_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NAME_CHARS_MAX = (QUEUE_NAME_CHARS_MAX - 1) // 2
"""The longest group, queue or instance name: `GROUP.QUEUE` of two of them fits what a
Locate, a ShowPending or a journal reader's queue select carries. Why: names were
unbounded, and a queue the file declared with a longer name could be attached but
never located, counted or selected by name (each refused BADPARAM)."""
_NUMBER_PATTERN = re.compile(r"[0-9]+")


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
        # a quoted TOML key may hold a newline or a control character ("a\nb" = 1):
        # escaped, the unknown key's line stays one line, as this class promises
        shown = key if key.isprintable() else key.encode("unicode_escape").decode("ascii")
        super().__init__(f"{path}: {shown}: {self.problem}")
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
    """How long an idempotency key dedupes (mrs.group.idempotency)."""


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
    """Heartbeats, deadlines, memory and flood bounds ([group.guards], mrs.config.guards)."""
    ops: OpsConfig = OpsConfig()
    """Metrics, web view, journal warnings and growth, PCJ retention (mrs.config.ops)."""
    tls: TlsConfig | None = None
    """[group.tls]: TLS on the port and links (mrs.security.tls); None: plaintext."""
    instances: tuple[InstanceConfig, ...] = ()
    """[[group.instance]] (mrs.config.instances): () = one unreplicated instance."""

    @property
    def client_address(self) -> str:
        """Where a client or an operator's command reaches this group: its address, or
        a replicated group's instances' addresses in turn ("H1:P1,H2:P2,H3:P3", which
        `clients.connect` takes: only the active listens)."""
        if self.instances:
            return ",".join(instance.listen for instance in self.instances)
        return host_port(self.listen_host, self.listen_port)

    def data_dir_of(self, instance: str | None) -> Path:
        """The data directory whose journals an offline tool reads (`--instance`): the
        group's, or a replicated group's named instance's. LookupError, naming the
        instances, when a replicated group's instance is not named: each holds its own
        copy (a replica may be behind, or empty while it takes a copy), so reading the
        first one listed unasked could show an operator an old journal as the group's."""
        if not self.instances:
            if instance is not None:
                raise LookupError(f"group {self.id} ({self.name}) has no instances: no --instance")
            return self.data_dir
        if instance is None:
            names = ", ".join(i.name for i in self.instances)
            raise LookupError(
                f"group {self.id} ({self.name}) is replicated: say whose journals with "
                f"--instance NAME ({names}; the active's hold every answered commit, "
                "`mrs status` names it)"
            )
        return self.instance(instance).data_dir

    def instance(self, name: str) -> InstanceConfig:
        """The instance called `name`; LookupError if the group has none of that name."""
        for instance in self.instances:
            if instance.name == name:
                return instance
        known = ", ".join(i.name for i in self.instances) or "none"
        raise LookupError(f"group {self.id} ({self.name}) has no instance {name!r} ({known})")

    def queue_by_name(self, name: str) -> QueueConfig:
        """The queue called `name` (exact, case-sensitive); LookupError if none."""
        for queue in self.queues.values():
            if queue.name == name:
                return queue
        if name in DEAD_LETTER_QUEUE_MESSAGEQ_NAMES and DEAD_LETTER_QUEUE in self.queues:
            return self.queues[DEAD_LETTER_QUEUE]
        names = [q.name for q in self.queues.values()]
        raise LookupError(
            f"group {self.id} ({self.name}) has no queue named {name!r} "
            f"(queues: {', '.join(names)}){case_hint(name, names)}"
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
    """[auth] (mrs.config.auth): None = every connection trusted (the default)."""
    coordinator: CoordinatorConfig | None = None
    """[coordinator] (mrs.config.instances): the etcd of replicated groups."""

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
        names = [g.name for g in self.groups.values()]
        raise LookupError(
            f"no group named {name!r} in {self.path} (groups: {', '.join(names)})"
            + case_hint(name, names)
        )

    def undialable_link(self, group_id: int) -> tuple[str, str] | None:
        """(key, problem) of a link of group `group_id` that can never come up: the
        higher group, unreplicated, listens on port 0 and the link gives no address,
        so the lower one has no port to dial. None when every link can be dialed.

        Why at `mrs serve` and not at load: a bus run in one process (the simulator,
        in-process tests) wires its links without dialing, on port 0. Before, both
        groups started READY, the lower one logged "cannot dial group N" once, and
        every message for the other group waited in the SAF for a link never dialed."""
        for index, link in enumerate(self.links):
            low, high = link.groups
            peer = self.groups[high]
            if group_id not in link.groups or link.address_host is not None:
                continue
            if not peer.instances and peer.listen_port == 0:
                return f"link[{index}]", (
                    f"group {high} ({peer.name}) listens on port 0 (the system picks a "
                    f"port at each start), so group {low} cannot dial it over this link: "
                    f"give group {high}'s listen a fixed port, or the link an address"
                )
        return None

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
        if queue_shape_problem(text) is not None:
            raise LookupError(f"not a queue address (GROUP.QUEUE, QUEUE or names): {text!r}")
        group_text, dot, queue_text = text.strip().partition(".")
        if not dot:
            group_text, queue_text = str(default_group), group_text
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


def case_hint(name: str, names: list[str]) -> str:
    """The words "; names are case-sensitive: did you mean 'NYC'?" when `name`
    differs from exactly one of `names` only in case, else "". Why: `nyc.ORDERS` for
    group NYC was refused with the list of groups only, the one difference unsaid."""
    folded = name.casefold()
    same = [known for known in names if known.casefold() == folded]
    return f"; names are case-sensitive: did you mean {same[0]!r}?" if len(same) == 1 else ""


def _id_list(ids: Mapping[int, object]) -> str:
    return ", ".join(str(i) for i in ids) or "none"


def _in_range(value: int, low: int, high: int, what: str, text: str) -> int:
    if not low <= value <= high:
        raise LookupError(f"{what} {value} out of range {low}..{high} in address {text!r}")
    return value


QUEUE_FORMS = "give a queue's name or id, G.Q or GROUP.NAME (e.g. ORDERS, 1.10, NYC.ORDERS)"
"""What a queue argument may be (names hold no dot: `resolve`): the second half of
`mrs admin`'s and the web page's refusal of a queue `queue_shape_problem` refuses."""


def queue_shape_problem(text: str) -> str | None:
    """What is wrong with the shape of a queue address as people write it
    (`BusConfig.resolve`), in words; None when its shape is one `resolve` reads. Why
    here: `mrs admin` and the web page's admin boxes say what is wrong before asking
    the group, by the same rule."""
    group, dot, queue = text.strip().partition(".")
    if not group and not dot:
        return "is empty"
    if dot and not group and not queue:
        return "is a dot alone"
    if dot and not group:
        return "has nothing before its dot (the group)"
    if dot and not queue:
        return "has nothing after its dot (the queue)"
    return "has more than one dot" if "." in queue else None
