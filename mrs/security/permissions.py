"""Per-queue permissions of a principal, and the rule that says what a request needs.

A principal's grants live with its verifier in the credentials file (mrs.security.creds):

    attach  = ["1.10", "ORDERS"]   queues it may attach to (and get from)
    put     = ["2.*", "1.20"]      targets it may put to
    confirm = ["1.10"]             queues on which it may confirm (any force_j)
    admin   = ["status", "dlq"]    status, dlq, dlj, replay, pcj, config
    manage  = ["1.10", "1.2*"]     queues it may administer (`mrs admin`): browse,
                                   purge, move from and to, change limits

Locating a queue (Locate) or counting its pending messages (ShowPending) needs an
attach or a put grant on it, or the admin right status.

A pattern is matched (fnmatch: "*" and "?" match any characters, the dot included)
against every spelling of the queue's address that the bus's address resolver
reads as that queue (mrs.config.schema `BusConfig.resolve`) from the group that
checks: "G.Q", "G.NAME", "GNAME.Q" and "GNAME.NAME", and for a queue of that group
(the one the principal is connected to) "Q" and "NAME" alone (`spellings`). So
"2.*" and "LDN.*" are every queue of group 2 (named LDN), "*.ORDERS" every group's
ORDERS, "*" everything, and "ORDERS" one queue: the connected group's ORDERS, as a
put to target "ORDERS" means (an IBM MQ authority record names one queue manager's
queue). Why: a grant was matched against "G.Q" and the bare name only, so
"LDN.SHIPPING" matched nothing, and "ORDERS" matched every group's ORDERS (a
credentials file written before keeps loading; a group warns of a grant whose
meaning narrowed, `load_warnings`). `mrs creds` refuses a grant that names a group
or a queue the bus does not have (`named_problem`), and one of no queue's shape
("1.", ".ORDERS": `shape_problem`). Nothing is granted by default:
a principal without grants can authenticate and nothing else. What each admin
right opens:

    status  the group status (seqs, epochs, link state: no longer public)
    dlq     attach to / put to a dead letter queue, pass a dead-letter header or a
            DLQ reader's context (the dlq-handler's rights)
    dlj     replay a DLJ record (with replay)
    replay  put a message carrying a replay header (mrs jplay), and read the PCJ or
            the DLJ over the wire (ReadJournal: `Client.open_journal`)
    pcj     set the group's default journaling action of confirmations and roll
            its PCJ segment (SetPcj, MessageQ's MRS_SET_PCJ: `Client.set_pcj`)
    config  add a queue at run time, replace a principal's grants (`mrs admin
            add-queue`, `mrs admin grant`)

`mrs admin connections` needs the admin right status; the DLQ is managed with the
manage right on its address ("1.96") like any queue.

Pure: the server hands in the request's facts; the answer is None (allowed) or the
sentence that goes into the NOTAUTHORIZED answer and the log.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

from mrs.address import id_number
from mrs.config.schema import (
    DEAD_LETTER_QUEUE_MESSAGEQ_NAMES,
    BusConfig,
    GroupConfig,
    queue_shape_problem,
)
from mrs.model import DEAD_LETTER_QUEUE, Address

Names = tuple[str, ...] | str | None
"""The texts a queue is matched under besides its address: its `spellings` (what
the server passes), a single text (one more spelling), or None (the address alone)."""
ADMIN_RIGHTS = frozenset({"status", "dlq", "dlj", "replay", "pcj", "config"})
GRANT_KINDS = ("attach", "put", "confirm", "admin", "manage")


@dataclass(frozen=True, slots=True)
class Permissions:
    attach: tuple[str, ...] = ()
    put: tuple[str, ...] = ()
    confirm: tuple[str, ...] = ()
    admin: frozenset[str] = frozenset()
    manage: tuple[str, ...] = ()
    """Queue patterns the principal administers (`mrs admin`: browse, purge, move)."""

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "attach": list(self.attach),
            "put": list(self.put),
            "confirm": list(self.confirm),
            "admin": sorted(self.admin),
            "manage": list(self.manage),
        }


NONE = Permissions()


def pattern_problem(pattern: str) -> str | None:
    """Why a grant pattern is unusable (None if fine): kept to what fnmatch reads plainly."""
    if not pattern or len(pattern) > 200:
        return f"pattern {pattern!r} must be 1..200 characters"
    if any(ch.isspace() for ch in pattern):
        return f"pattern {pattern!r} contains whitespace"
    return None


def parse_permissions(raw: dict) -> Permissions | str:
    """Grants from a credentials-file table; a problem sentence when malformed."""
    lists: dict[str, tuple[str, ...]] = {}
    for kind in GRANT_KINDS:
        value = raw.get(kind, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            return f"{kind} must be a list of strings"
        for item in value:
            if (problem := pattern_problem(item)) is not None:
                return f"{kind}: {problem}"
        lists[kind] = tuple(value)
    unknown = set(lists["admin"]) - ADMIN_RIGHTS
    if unknown:
        return f"admin: unknown rights {sorted(unknown)} (known: {sorted(ADMIN_RIGHTS)})"
    return Permissions(
        lists["attach"],
        lists["put"],
        lists["confirm"],
        frozenset(lists["admin"]),
        lists["manage"],
    )


def spellings(bus: BusConfig, here: int, address: Address) -> tuple[str, ...]:
    """Every text the bus's address resolver reads as `address` for a client of group
    `here` ("G.Q" first): what a grant pattern is matched against. Why all of them:
    every tool that takes a queue (put targets, attach, jplay --to, the DLQ handler,
    mrs admin) takes each spelling, and a grant written with a group's name
    ("LDN.SHIPPING") was accepted and then matched nothing."""
    group_texts = [str(address.group)]
    queue_texts = [str(address.queue)]
    group = bus.groups.get(address.group)
    if group is not None:
        group_texts.append(group.name)
        queue = group.queues.get(address.queue)
        if queue is not None:
            queue_texts.append(queue.name)
            if address.queue == DEAD_LETTER_QUEUE:
                queue_texts.extend(_dead_letter_queue_names(group))
    texts = [f"{g}.{q}" for g in group_texts for q in queue_texts]
    if address.group == here:  # a queue alone names one of the connected group's
        texts.extend(queue_texts)
    return tuple(dict.fromkeys(texts))


def _dead_letter_queue_names(group: GroupConfig) -> list[str]:
    """The MessageQ names that group's resolver reads as its DLQ: each one no queue of
    the bus file took (`GroupConfig.queue_by_name`)."""
    declared = {queue.name for queue in group.queues.values()}
    return sorted(name for name in DEAD_LETTER_QUEUE_MESSAGEQ_NAMES if name not in declared)


def queue_facts(bus: BusConfig, here: int, address: Address) -> tuple[str, tuple[str, ...], bool]:
    """What the rules below take of a queue, checked by group `here`: its address
    "G.Q" (what a refusal names), its `spellings`, and whether it is a DLQ."""
    text = f"{address.group}.{address.queue}"
    return text, spellings(bus, here, address), address.queue == DEAD_LETTER_QUEUE


def matches(patterns: Iterable[str], address: str, names: Names) -> bool:
    """Whether a pattern matches the queue at `address` under one of its `names` (its
    `spellings`; a single text is one more spelling; None: the address alone)."""
    texts = (address,) if names is None else (address, names) if isinstance(names, str) else names
    for pattern in patterns:
        for text in texts:
            if fnmatch.fnmatchcase(text, pattern):
                return True
    return False


WILDCARD_CHARACTERS = frozenset("*?[")


def _literal(text: str) -> bool:
    return not WILDCARD_CHARACTERS.intersection(text)


def _has_queue(group: GroupConfig, text: str) -> bool:
    """Whether `group` has the queue `text` names (a number or a name). A number is
    0-9 only, as long as an id can be: "²" is isdigit() and int() refused it (and 5000
    digits), and `mrs creds grant --put 1.²` ended as an unexpected error."""
    if id_number(text):
        return int(text) in group.queues
    try:
        group.queue_by_name(text)
    except LookupError:
        return False
    return True


GRANT_FORMS = (
    "a grant is a queue pattern: GROUP.QUEUE or QUEUE, by name or number, '*' and '?' "
    "matching any characters (e.g. 1.10, LDN.*, *.ORDERS)"
)
"""The second half of the refusal of a grant of no queue's shape (`shape_problem`)."""


def shape_problem(pattern: str) -> str | None:
    """Why `pattern` has no queue address's shape, so that it matches no spelling of
    any queue (`spellings` are "G.Q" and "Q", each part one name or number), or None.
    Why: `mrs creds grant --put 1.` (or ".", ".ORDERS", "1.2.3") was stored and granted
    nothing. The shape is the one rule `mrs admin` and the web page read a queue by
    (mrs.config.schema `queue_shape_problem`); a wildcard stays a part ("2.*", "*")."""
    if (wrong := queue_shape_problem(pattern)) is None:
        return None
    return f"{wrong}: {GRANT_FORMS}"


def named_problem(bus: BusConfig, pattern: str) -> tuple[str, bool] | None:
    """Why `pattern` can match no queue of `bus`, or None: no queue's shape
    (`shape_problem`: refused), or a group or a queue it names without wildcards that
    the bus does not have; with whether it is refused (named by name, or no shape).
    A name the bus does not have is a mistake (`mrs creds` refuses it, as every tool
    refuses it in an address); a number may be of a group or queue to come (as the
    resolver takes `2.10` unconfigured): said, and taken. A wildcard leaves its part
    open ("2.3*" grants queues added later). A group warns of each at load."""
    if (wrong := shape_problem(pattern)) is not None:
        return wrong, True
    group_text, dot, queue_text = pattern.partition(".")
    if not dot:
        if not _literal(pattern) or any(_has_queue(g, pattern) for g in bus.groups.values()):
            return None
        problem = (
            f"no group of the bus has a queue {_shown(pattern)} (a queue without its "
            "group names the connected group's; write GROUP.QUEUE)"
        )
        return problem, not pattern.isdigit()
    groups = [
        group
        for group in bus.groups.values()
        if fnmatch.fnmatchcase(str(group.id), group_text)
        or fnmatch.fnmatchcase(group.name, group_text)
    ]
    if not groups:
        known = ", ".join(f"{g.id} {g.name}" for g in bus.groups.values())
        problem = f"the bus has no group {_shown(group_text)} (groups: {known})"
        return problem, _literal(group_text) and not group_text.isdigit()
    if not _literal(queue_text) or any(_has_queue(g, queue_text) for g in groups):
        return None
    if len(groups) == 1:
        where = f"group {groups[0].id} ({groups[0].name}) has no queue"
    else:
        where = f"none of groups {', '.join(f'{g.id} ({g.name})' for g in groups)} has a queue"
    return f"{where} {_shown(queue_text)}", not queue_text.isdigit()


def _shown(text: str) -> str:
    return text if text.isdigit() else repr(text)


def grants_problem(perms: Permissions, bus: BusConfig | None) -> str | None:
    """The first grant of `perms` of no queue's shape (`shape_problem`) or that names
    by name what `bus` does not have, in one line (what `mrs creds`, `mrs admin grant`
    and the web page's grant refuse), or None. Without a bus (`mrs creds --file`:
    none to check names against) the shape alone."""
    if bus is None:
        for kind, patterns in _queue_grants(perms):
            for pattern in patterns:
                if (wrong := shape_problem(pattern)) is not None:
                    return f"{kind} {pattern!r}: {wrong}"
        return None
    for line, refused in _unknown(perms, bus):
        if refused:
            return line
    return None


def grants_notes(perms: Permissions, bus: BusConfig) -> list[str]:
    """The grants of `perms` that name a group or queue number `bus` does not have
    (yet): `mrs creds` says so and writes them."""
    return [line for line, refused in _unknown(perms, bus) if not refused]


def _unknown(perms: Permissions, bus: BusConfig) -> list[tuple[str, bool]]:
    found = []
    for kind, patterns in _queue_grants(perms):
        for pattern in patterns:
            if (unknown := named_problem(bus, pattern)) is not None:
                found.append((f"{kind} {pattern!r}: {unknown[0]}", unknown[1]))
    return found


def load_warnings(perms: Permissions, bus: BusConfig, here: int) -> list[str]:
    """What group `here` warns of when it loads these grants (it never refuses a file
    an earlier release wrote): a grant naming what the bus does not have, and a put
    grant of a queue name alone that this group does not have but another group does
    (earlier releases matched every group's queue of that name: now it names the
    connected group's, so from here it grants nothing)."""
    warnings = []
    for kind, patterns in _queue_grants(perms):
        for pattern in patterns:
            if (unknown := named_problem(bus, pattern)) is not None:
                warnings.append(f"{kind} {pattern!r} grants nothing: {unknown[0]}")
                continue
            own = bus.groups.get(here)
            if kind != "put" or "." in pattern or not _literal(pattern) or own is None:
                continue
            if not _has_queue(own, pattern):
                warnings.append(
                    f"put {pattern!r} grants nothing from group {here} ({own.name}), which "
                    f"has no queue {pattern!r}: a queue without its group names the "
                    f"connected group's (every group's before this release); write "
                    f"GROUP.{pattern}, or '*.{pattern}' for every group's"
                )
    return warnings


def _queue_grants(perms: Permissions) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return (
        ("attach", perms.attach),
        ("put", perms.put),
        ("confirm", perms.confirm),
        ("manage", perms.manage),
    )


def may_attach(perms: Permissions, address: str, names: Names, is_dlq: bool) -> str | None:
    if is_dlq:
        if "dlq" in perms.admin:
            return None
        return f"attach to dead letter queue {address} needs the admin right 'dlq'"
    if matches(perms.attach, address, names):
        return None
    return f"attach to {address} is not granted"


def may_get(perms: Permissions, address: str, names: Names, is_dlq: bool) -> str | None:
    """Get from the attached queue: the attach grant, still held (grants reload live)."""
    problem = may_attach(perms, address, names, is_dlq)
    return None if problem is None else problem.replace("attach to", "get from", 1)


def may_confirm(perms: Permissions, address: str, names: Names, is_dlq: bool) -> str | None:
    if is_dlq and "dlq" in perms.admin:
        return None
    if matches(perms.confirm, address, names):
        return None
    return f"confirm on {address} is not granted"


@dataclass(frozen=True, slots=True)
class PutFacts:
    """What a put asks for, as far as permissions care."""

    target: str
    target_names: Names
    """The target's `spellings` (a single text: one more spelling)."""
    target_is_dlq: bool
    dead_letter_header: bool
    dlq_context: bool
    replay_journal: str | None
    """"pcj"/"dlj" when the put carries a replay header, else None."""


def may_put(perms: Permissions, facts: PutFacts) -> str | None:
    dead_letter = facts.target_is_dlq or facts.dead_letter_header or facts.dlq_context
    if dead_letter and "dlq" not in perms.admin:
        what = (
            f"put to dead letter queue {facts.target}"
            if facts.target_is_dlq
            else "put with a dead-letter header or DLQ context"
        )
        return f"{what} needs the admin right 'dlq'"
    if facts.replay_journal is not None:
        if "replay" not in perms.admin:
            return "put with a replay header needs the admin right 'replay'"
        if facts.replay_journal == "dlj" and "dlj" not in perms.admin:
            return "replaying a DLJ record needs the admin right 'dlj'"
    if facts.target_is_dlq or matches(perms.put, facts.target, facts.target_names):
        return None
    return f"put to {facts.target} is not granted"


def may_respond_to(perms: Permissions, address: str, names: Names, is_dlq: bool) -> str | None:
    """A put naming `address` as its response queue (not the sender's own): MRS puts
    the MRS_ACK or the returned message there, so it needs what a put there needs."""
    if is_dlq:
        if "dlq" in perms.admin:
            return None
        return f"response queue {address} is a dead letter queue: needs the admin right 'dlq'"
    if matches(perms.put, address, names):
        return None
    return f"response queue {address} is not granted (a put to {address} would be needed)"


def may_look_up(
    perms: Permissions, what: str, address: str, names: Names, is_dlq: bool
) -> str | None:
    """Locate a queue or count its pending messages (`what`): what a principal may
    use it may find and count, so an attach or a put grant on it (or the admin right
    'status', which sees every queue); the DLQ needs 'dlq'."""
    if "status" in perms.admin:
        return None
    if is_dlq:
        if "dlq" in perms.admin:
            return None
        return f"{what} of dead letter queue {address} needs the admin right 'dlq'"
    if matches(perms.attach, address, names) or matches(perms.put, address, names):
        return None
    return f"{what} of {address} needs a grant to attach to it or put to it"


def may_admin(perms: Permissions, right: str, what: str | None = None) -> str | None:
    """The admin right `right`; `what` names the request in the refusal (the right's
    own name when not given)."""
    if right in perms.admin:
        return None
    return f"{what or right} needs the admin right {right!r}"


def may_manage(perms: Permissions, action: str, address: str, names: Names) -> str | None:
    """An operator's action on a queue (`mrs admin browse/purge/move/set-limits`):
    the manage grant on it (the DLQ included: it is named like any queue)."""
    if matches(perms.manage, address, names):
        return None
    return f"{action} on {address} needs the manage right on it"
