"""The server's permission check: one call before a request touches the group.

`Gate.check(session, event)` looks up the session's principal's grants *now* (so a
rotated or removed principal loses its rights at its next request), asks
mrs.security.permissions whether the request is allowed, and if not logs who asked
for what and raises Refused(NOTAUTHORIZED) before anything changed: a denied attach
locks no queue, a denied put stores nothing, a denied confirm removes nothing.
"""

from __future__ import annotations

import logging
from typing import cast

from mrs import protocol as wire
from mrs.config.bus import BusConfig
from mrs.core.delivery import Refused
from mrs.core.refusals import RefusalLog
from mrs.group.dlq_leases import CONTEXT_HEADER
from mrs.group.queue_lookup import locate_in
from mrs.group.shapes import DEAD_LETTER_HEADER
from mrs.limits import DENIAL_LOG_INTERVAL_S
from mrs.model import Address, Status
from mrs.security import permissions as rules
from mrs.security.authority import Authority

log = logging.getLogger("mrs.security")

REPLAY_HEADER = "replay"
"""Set by mrs.tools.journal.replay_keys.replay_headers on every replayed message."""
DECISIONS_MAX = 4096
"""Remembered answers (principal, request kind, queue) -> problem; cleared when the
credentials reload, when the group's queues change (`forget_decisions`) or when full.
A put costs a dict lookup instead of resolving the target, spelling it every way the
resolver reads it and matching each pattern against each spelling (19 us per put
measured without it; a put carrying headers, as every put of a resending client
does, is keyed on what its headers say to the rules: benchmarks/auth_overhead.py
--check)."""

HeaderFacts = tuple[bool, bool, str | None]
"""What a put's headers say to the rules (`rules.PutFacts`): a dead-letter header,
a DLQ reader's context, the journal of a replay header ("pcj", "dlj", "?": any
other value) or None. Nothing else of the headers changes a decision, so a put's
remembered decision is keyed on these (a client's own headers, its idempotency key
among them, do not make each put a new decision)."""
NO_HEADER_FACTS: HeaderFacts = (False, False, None)


def header_facts(headers: dict) -> HeaderFacts:
    replay = headers.get(REPLAY_HEADER)
    replay_journal = None
    if replay is not None:
        journal = replay.get("journal") if isinstance(replay, dict) else None
        # only these two mean anything to the rules: any other text is "?", so a
        # client cannot make each put a new remembered decision with a new text
        replay_journal = journal if journal in ("pcj", "dlj") else "?"
    return (DEAD_LETTER_HEADER in headers, CONTEXT_HEADER in headers, replay_journal)


class Gate:
    def __init__(self, authority: Authority, bus: BusConfig, group_id: int) -> None:
        self.authority = authority
        self.bus = bus
        self.group_id = group_id
        self.denied = 0
        self._decisions: dict[tuple, str | None] = {}
        self._generation = authority.reloads
        self._denials = RefusalLog(
            log, every_s=DENIAL_LOG_INTERVAL_S, line_format="denied {message}"
        )
        """One line per (principal, problem) per second, so a client repeating a
        denied request cannot flood the log; the next line says how many were not."""

    def check(self, session, event: object) -> None:
        """Raise Refused(NOTAUTHORIZED) if the session's principal may not do `event`."""
        key = self._key(session, event)
        if key is None:
            problem = self._problem(session, event)
        else:
            if self._generation != self.authority.reloads or len(self._decisions) >= DECISIONS_MAX:
                self._decisions.clear()
                self._generation = self.authority.reloads
            try:
                problem = self._decisions[key]
            except KeyError:
                problem = self._decisions[key] = self._problem(session, event)
        if problem is None:
            return
        self.denied += 1
        who = getattr(session, "principal", None) or "(unauthenticated)"
        self._denials.refused(
            "permission",
            str(session.peer),
            f"{type(event).__name__} from {who!r} at {session.peer}: {problem}",
            key=(who, problem),
        )
        raise Refused(Status.NOTAUTHORIZED, f"{who}: {problem}")

    def forget_decisions(self) -> None:
        """Decide every request afresh: the group's queues changed at run time (a
        name that named nothing before may name a queue now)."""
        self._decisions.clear()

    def may_read_status(self, session) -> bool:
        """Whether the session's principal holds the status right: what lets it read
        an operator's detail in a refusal (the group's queue names, the config path)."""
        perms = self.authority.permissions(getattr(session, "principal", None))
        return rules.may_admin(perms, "status") is None

    def get_problem(self, session) -> str | None:
        """Why the session may no longer get from its queue (None: it may): asked
        when the credentials reload, for the gets it has parked."""
        perms = self.authority.permissions(getattr(session, "principal", None))
        return self._on_attached(session, perms, rules.may_get)

    @staticmethod
    def _key(session, event: object) -> tuple | None:
        """What a decision depends on, for the common requests; None: decide afresh."""
        principal = getattr(session, "principal", None)
        kind = type(event)
        if kind is wire.Put:
            put = cast(wire.Put, event)
            said = header_facts(put.headers) if put.headers else None
            if not put.resp_q:
                return (principal, "put", put.target, said)
            # a response queue is allowed when it is the sender's own: key on that too
            queue = getattr(session, "attached", None)
            own = None if queue is None else queue.address
            return (principal, "put", put.target, said, put.resp_q, own)
        if kind is wire.Get or kind is wire.Confirm:
            queue = getattr(session, "attached", None)
            return None if queue is None else (principal, kind, queue.address)
        return None

    def _problem(self, session, event: object) -> str | None:
        perms = self.authority.permissions(getattr(session, "principal", None))
        match event:
            case wire.Attach():
                address = self._resolve(event.queue)
                if address is None:
                    return None  # the group answers NOSUCHQUEUE
                return rules.may_attach(perms, *self._facts(address))
            case wire.Get() | wire.GetBatch():
                return self._on_attached(session, perms, rules.may_get)
            case wire.Confirm():
                return self._on_attached(session, perms, rules.may_confirm)
            case wire.Put():
                return self._put(perms, event) or self._response_queue(session, perms, event)
            case wire.StatusRequest():
                return rules.may_admin(perms, "status")
            case wire.Locate():
                return self._look_up(perms, "locate", [event.name])
            case wire.ShowPending():
                return self._look_up(perms, "pending count", event.queues)
            case wire.SetPcj():
                return rules.may_admin(perms, "pcj", "MRS_SET_PCJ (set_pcj)")
            case wire.ReadJournal():
                return rules.may_admin(perms, "replay", f"reading the {event.journal.upper()}")
        return None

    def _look_up(self, perms: rules.Permissions, what: str, texts: list[str]) -> str | None:
        for text in texts:
            try:
                address = locate_in(self.bus, self.group_id, text)
            except Refused:
                continue  # the group answers NOSUCHQUEUE or BADPARAM
            problem = rules.may_look_up(perms, what, *self._facts(address))
            if problem is not None:
                return problem
        return None

    def _on_attached(self, session, perms: rules.Permissions, rule) -> str | None:
        queue = getattr(session, "attached", None)
        if queue is None:
            return None  # the group answers NOTATTACHED
        return rule(perms, *self._facts(queue.address))

    def _put(self, perms: rules.Permissions, put: wire.Put) -> str | None:
        address = self._resolve(put.target)
        if address is None:
            return None
        text, names, is_dlq = self._facts(address)
        dead_letter_header, dlq_context, replay_journal = (
            header_facts(put.headers) if put.headers else NO_HEADER_FACTS
        )
        facts = rules.PutFacts(
            target=text,
            target_names=names,
            target_is_dlq=is_dlq,
            dead_letter_header=dead_letter_header,
            dlq_context=dlq_context,
            replay_journal=replay_journal,
        )
        return rules.may_put(perms, facts)

    def _response_queue(self, session, perms: rules.Permissions, put: wire.Put) -> str | None:
        """A put's resp_q receives its MRS_ACK or its returned (RTS) body, so naming
        another queue there is a put to that queue: allowed when it is the sender's
        own queue, or a queue the sender may put to."""
        if not put.resp_q:
            return None
        address = self._resolve(put.resp_q)
        if address is None:
            return None  # the group answers NOSUCHQUEUE
        queue = getattr(session, "attached", None)
        if queue is not None and queue.address == address:
            return None
        return rules.may_respond_to(perms, *self._facts(address))

    def _resolve(self, text: str) -> Address | None:
        try:
            address = self.bus.resolve(text, self.group_id)
        except (LookupError, ValueError):
            return None
        return address if address.group in self.bus.groups else None

    def _facts(self, address: Address) -> tuple[str, tuple[str, ...], bool]:
        return rules.queue_facts(self.bus, self.group_id, address)
