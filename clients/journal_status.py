"""What a client tells its application about its SAF journal and its connection: the
journal status (JOURNAL_ON, LINK_UP, JOURNAL_FAIL), the listeners that hear each
change, and the wake-up of tasks waiting for a change (`wait_connected`,
`wait_journal_status`).

One part of `Client` (clients.connection) that the others are given: the request
table tells it a connection was lost, the connection's loops that one is up, the
drain that the journal is empty or failed. Imports no other part, so each can.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from clients.errors import BadParameter
from mrs.model import Psb, Status

log = logging.getLogger("clients")


@dataclass(frozen=True, slots=True)
class JournalEvent:
    """What a SAF-journal listener hears.

    kind "status": `status` is now JOURNAL_ON, LINK_UP or JOURNAL_FAIL. kind
    "drained": the record with client seq `local_seq` was stored by the server; `psb`
    is the server's PSB (its seq is the one the receiver sees). kind "rejected": the
    server refused the record for good (`status`, `message`); it left the journal.
    kind "corrupt": the record cannot be read from the journal (`message` says why);
    it was not sent and stays in the journal.
    """

    kind: str
    status: Status | int
    local_seq: int = 0
    psb: Psb | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class RefusedRecord:
    """A journaled put the group refused for good when it drained (`Client.refused_records`):
    kept in the client journal, not sent again until `Client.redrive_refused`."""

    local_seq: int
    """Its client journal seq (the seq its put's PSB gave)."""
    target: str
    """The target as the put gave it."""
    body: bytes
    status: Status | int
    """Why the group refused it: NOTAUTHORIZED, NOSUCHQUEUE, NO_DQF, MSGTOOBIG, ..."""
    message: str
    """The group's words (or the client's, for a body over the group's limit)."""
    refused_time_ns: int
    msg_class: int = 0
    msg_type: int = 0
    correlation_id: bytes = b""
    headers: dict | None = None


JOURNAL_STATUSES = (Status.JOURNAL_ON, Status.LINK_UP, Status.JOURNAL_FAIL)
"""The values `Client.journal_status` takes with a journal."""


class JournalStatus:
    """The journal status, its listeners, and the event that wakes a change's waiters."""

    def __init__(self, journaling: bool) -> None:
        self.journaling = journaling
        """The client has a SAF journal (else the status stays None)."""
        self.status: Status | None = None
        """See `Client.journal_status`."""
        self.failure = ""
        """Why status is JOURNAL_FAIL."""
        self.listeners: list[Callable[[JournalEvent], None]] = []
        self.changed = trio.Event()
        """Set (and replaced) on every change of the connection or the journal status."""

    def check_wanted(self, status: object) -> None:
        """Refuse (BadParameter, one line) a wait for a journal status that can never
        come: any status on a client without a journal (its status stays None), or a
        value that is no journal status. Why: such a wait hung for ever."""
        if not self.journaling:
            raise BadParameter(
                Status.BADPARAM,
                "wait_journal_status: this client has no SAF journal (connect with "
                "saf_journal=PATH); its journal_status stays None",
            )
        if status not in JOURNAL_STATUSES:
            names = ", ".join(wanted.name for wanted in JOURNAL_STATUSES)
            raise BadParameter(
                Status.BADPARAM, f"wait_journal_status: status is one of {names}, got {status!r}"
            )

    def wake(self) -> None:
        """Something a waiter may wait for changed: wake them all."""
        self.changed.set()
        self.changed = trio.Event()

    def notify(self, event: JournalEvent) -> None:
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the client
                log.exception("journal listener failed")

    def set(self, status: Status) -> None:
        """The journal's status is now `status` (nothing without a journal)."""
        if not self.journaling or self.status == status:
            return
        self.status = status
        self.wake()
        self.notify(JournalEvent("status", status))

    def fail(self, why: str) -> None:
        """JOURNAL_FAIL instead of LINK_UP: puts go to the server again, and a wait
        for LINK_UP raises JournalFailed with `why`."""
        if self.status != Status.JOURNAL_FAIL:
            log.error("%s", why)
        self.failure = why
        self.set(Status.JOURNAL_FAIL)

    def lost(self, closing: bool) -> None:
        """The connection was lost: journal again (unless the client is closing)."""
        if not closing:
            self.set(Status.JOURNAL_ON)
        self.wake()
