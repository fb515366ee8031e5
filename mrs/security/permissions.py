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

A pattern is matched (fnmatch) against the queue's address "G.Q" and against its
configured name, so "2.*" is every queue of group 2, "*" everything, "ORDERS" one
queue by name. Nothing is granted by default: a principal without grants can
authenticate and nothing else. What each admin right opens:

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


def matches(patterns: Iterable[str], address: str, name: str | None) -> bool:
    for pattern in patterns:
        if fnmatch.fnmatchcase(address, pattern):
            return True
        if name is not None and fnmatch.fnmatchcase(name, pattern):
            return True
    return False


def may_attach(perms: Permissions, address: str, name: str | None, is_dlq: bool) -> str | None:
    if is_dlq:
        if "dlq" in perms.admin:
            return None
        return f"attach to dead letter queue {address} needs the admin right 'dlq'"
    if matches(perms.attach, address, name):
        return None
    return f"attach to {address} is not granted"


def may_get(perms: Permissions, address: str, name: str | None, is_dlq: bool) -> str | None:
    """Get from the attached queue: the attach grant, still held (grants reload live)."""
    problem = may_attach(perms, address, name, is_dlq)
    return None if problem is None else problem.replace("attach to", "get from", 1)


def may_confirm(perms: Permissions, address: str, name: str | None, is_dlq: bool) -> str | None:
    if is_dlq and "dlq" in perms.admin:
        return None
    if matches(perms.confirm, address, name):
        return None
    return f"confirm on {address} is not granted"


@dataclass(frozen=True, slots=True)
class PutFacts:
    """What a put asks for, as far as permissions care."""

    target: str
    target_name: str | None
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
    if facts.target_is_dlq or matches(perms.put, facts.target, facts.target_name):
        return None
    return f"put to {facts.target} is not granted"


def may_respond_to(perms: Permissions, address: str, name: str | None, is_dlq: bool) -> str | None:
    """A put naming `address` as its response queue (not the sender's own): MRS puts
    the MRS_ACK or the returned message there, so it needs what a put there needs."""
    if is_dlq:
        if "dlq" in perms.admin:
            return None
        return f"response queue {address} is a dead letter queue: needs the admin right 'dlq'"
    if matches(perms.put, address, name):
        return None
    return f"response queue {address} is not granted (a put to {address} would be needed)"


def may_look_up(
    perms: Permissions, what: str, address: str, name: str | None, is_dlq: bool
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
    if matches(perms.attach, address, name) or matches(perms.put, address, name):
        return None
    return f"{what} of {address} needs a grant to attach to it or put to it"


def may_admin(perms: Permissions, right: str, what: str | None = None) -> str | None:
    """The admin right `right`; `what` names the request in the refusal (the right's
    own name when not given)."""
    if right in perms.admin:
        return None
    return f"{what or right} needs the admin right {right!r}"


def may_manage(perms: Permissions, action: str, address: str, name: str | None) -> str | None:
    """An operator's action on a queue (`mrs admin browse/purge/move/set-limits`):
    the manage grant on it (the DLQ included: it is named like any queue)."""
    if matches(perms.manage, address, name):
        return None
    return f"{action} on {address} needs the manage right on it"
