"""The one error tree of MRS: a root `MrsError` carrying a MessageQ `Status`.

Server, tools and the client library raise from this tree, and `clients` re-exports
it, so an application catches `MrsError` for everything or a subclass for the cases
it handles differently. Each status a user can see has its class (`error_for` picks
it for a status that came over the wire). Two timeouts are kept apart on purpose:
`MrsTimeout` is the server's answer TIMEOUT (a get found nothing, a WF put did not
reach its interest point), `ReplyTimeout` is the client giving up on an answer that
never came, so the request may or may not have been acted on.

Three families sit under the root besides the client-visible ones: `Refused` (the
server answers a request with a failure status), `ProtocolError` (a frame or event
broke the protocol, h11-style Local/Remote subclasses live in `mrs.protocol`) and
`OperatorError` (a bad config, command line or selection: one line, no traceback).

`journals` keeps its own small root (`journals.JournalError`): it is a library that
imports nothing of `mrs`, and the group turns its errors into JOURNAL_FAIL/JOURNAL_FULL
answers (`JournalFailed`, `JournalFull` here).
"""

from __future__ import annotations

from typing import ClassVar

from mrs.model import Psb, Status, status_of

__all__ = [
    "BadParameter",
    "BadSequence",
    "ConnectionLost",
    "FieldRefused",
    "JournalBusy",
    "JournalFailed",
    "JournalFull",
    "KeyReused",
    "MessageTooBig",
    "MrsError",
    "MrsTimeout",
    "NoMoreMessages",
    "NoSuchQueue",
    "NotAttached",
    "NotAuthorized",
    "NotSupported",
    "OperatorError",
    "ProtocolError",
    "ProtocolFailure",
    "PutOutcomeUnknown",
    "QueueBusy",
    "QuotaExceeded",
    "Refused",
    "ReplyTimeout",
    "ServerError",
    "ShuttingDown",
    "TooManyUnconfirmed",
    "error_for",
]


class MrsError(Exception):
    """An MRS request or operation failed; `status` says how (a `Status` member).

    `str(error)` is one line, ``"mrs: STATUS: message"``; the families whose text is
    shown as it is (`Refused`, `ProtocolError`, `OperatorError`) print the message.
    """

    status_prefix: ClassVar[bool] = True
    """Whether str() starts with "mrs: STATUS: "."""

    def __init__(self, status: Status | int, message: str, psb: Psb | None = None) -> None:
        super().__init__(status, message)
        self.status: Status | int = status_of(int(status))
        self.message = message
        self.psb = psb

    def __str__(self) -> str:
        if not self.status_prefix:
            return self.message
        name = self.status.name if isinstance(self.status, Status) else str(self.status)
        return f"mrs: {name}: {self.message}"

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle by state, since subclasses take other constructor arguments."""
        return (_rebuild, (type(self), self.__dict__))


def _rebuild(cls: type[MrsError], state: dict[str, object]) -> MrsError:
    error = cls.__new__(cls)
    error.__dict__.update(state)
    Exception.__init__(error, state.get("status"), state.get("message"))
    return error


# ------------------------------------------------------- what a client can see
class MrsTimeout(MrsError, TimeoutError):
    """TIMEOUT answered by the server: a get found nothing in time, or a WF put did
    not reach its interest point in time (the message may or may not be stored)."""


class ReplyTimeout(MrsError, TimeoutError):
    """The client stopped waiting for an answer that never came (status TIMEOUT).

    Unlike `MrsTimeout` the server said nothing: the request may or may not have
    been acted on. A re-sent put may store the message twice unless it carries an
    idempotency key."""


class NoMoreMessages(MrsError):
    """NOMOREMSG: a get with timeout=0 found the queue empty."""


class NotSupported(MrsError):
    """NOTSUPPORTED / BADDELIVERY / BADUMA: the mode/UMA pair does not exist."""


class BadSequence(MrsError):
    """BADSEQ: confirm of an unknown seq, or out of order on an in-order queue."""


class TooManyUnconfirmed(MrsError):
    """EXCMAXUNCONF: confirm some messages before getting more."""


class NoSuchQueue(MrsError):
    """NOSUCHQUEUE: the address names no queue of this bus."""


class NotAttached(MrsError):
    """NOTATTACHED: get or confirm on a connection that attached to no queue."""


class NotAuthorized(MrsError):
    """NOTAUTHORIZED: authentication failed, or the credentials lack the permission."""


class QueueBusy(MrsError):
    """QUEUE_BUSY: another connection is attached to that queue (or a bounded wait
    list of the server is full: try again later)."""


class MessageTooBig(MrsError):
    """MSGTOOBIG: the body is larger than the target group's message_bytes_max."""


class BadParameter(MrsError):
    """BADPARAM: a request argument is out of range (priority, timeout, force_j...)."""


class FieldRefused(BadParameter):
    """BADPARAM found by the library itself: a field the wire format cannot carry
    (out of range, wrong type). Nothing was sent."""


class QuotaExceeded(MrsError):
    """EXCEEDQUOTA: the target queue or the connection is over its quota."""


class JournalFailed(MrsError):
    """JOURNAL_FAIL: a journal write could not be made durable."""


class JournalBusy(JournalFailed):
    """JOURNAL_FAIL: another process owns this client SAF journal."""


class JournalFull(MrsError):
    """JOURNAL_FULL: a journal (the server's, or the client SAF journal) is at its
    message or byte cap."""


class ServerError(MrsError):
    """SERVER_ERROR: an unexpected fault while serving the request; nothing stored
    was lost, and the server goes on serving."""


class ShuttingDown(MrsError):
    """SHUTTING_DOWN: the server is stopping and takes no new work."""


class KeyReused(MrsError):
    """KEY_REUSED: an idempotency key was reused within its window for another body."""


class ProtocolFailure(MrsError):
    """PROTOCOL_ERROR from the other side: it rejected a frame as malformed (a
    client library bug, or a version mismatch)."""


class ConnectionLost(MrsError):
    """LINK_DOWN: the connection to the group server closed before the answer came."""

    closed_unanswered: bool = False
    """The server took the connection and closed it before answering the handshake
    (no Welcome, no Attached, no Fatal saying why): set where the client reads that
    end (clients.link), so `mrs status` can say it in words (mrs.tools.bus_status
    `down_reason`) without reading the message's text, which wrappers prefix."""


class PutOutcomeUnknown(ConnectionLost):
    """The connection dropped after a put was sent and before its answer came: the
    message may or may not be stored. Re-sending may store it twice; put an
    idempotency key in its headers (headers={"idempotency_key": ...}) to make a
    re-send safe."""


# ------------------------------------------------------------- server families
class Refused(MrsError):
    """A request the server answers with a failure status and a message."""

    status_prefix = False
    detail: str | None = None
    """A fuller message only an operator may read (the group's queue names, the
    config file's path): sent instead of `message` when the caller may read the
    status (or auth is off), since it tells what the status would (the dispatcher
    decides)."""

    @classmethod
    def detailed(cls, status: Status, message: str, detail: str) -> Refused:
        refused = cls(status, message)
        refused.detail = detail
        return refused


class ProtocolError(MrsError):
    """A frame or an event broke the protocol. `.status` is the status to answer with."""

    status_prefix = False

    def __init__(self, message: str, status: Status = Status.PROTOCOL_ERROR) -> None:
        super().__init__(status, message)


class OperatorError(MrsError):
    """An operator's mistake (config, command line, selection, data directory): one
    clear line, status BADPARAM, never a traceback."""

    status_prefix = False

    def __init__(self, message: str, status: Status = Status.BADPARAM) -> None:
        super().__init__(status, message)


# ------------------------------------------------------------------- by status
_BY_STATUS: dict[int, type[MrsError]] = {
    Status.TIMEOUT: MrsTimeout,
    Status.NOMOREMSG: NoMoreMessages,
    Status.NOTSUPPORTED: NotSupported,
    Status.BADDELIVERY: NotSupported,
    Status.BADUMA: NotSupported,
    Status.BADSEQ: BadSequence,
    Status.EXCMAXUNCONF: TooManyUnconfirmed,
    Status.NOSUCHQUEUE: NoSuchQueue,
    Status.NOTATTACHED: NotAttached,
    Status.NOTAUTHORIZED: NotAuthorized,
    Status.QUEUE_BUSY: QueueBusy,
    Status.MSGTOOBIG: MessageTooBig,
    Status.BADPARAM: BadParameter,
    Status.EXCEEDQUOTA: QuotaExceeded,
    Status.JOURNAL_FAIL: JournalFailed,
    Status.JOURNAL_FULL: JournalFull,
    Status.SERVER_ERROR: ServerError,
    Status.SHUTTING_DOWN: ShuttingDown,
    Status.KEY_REUSED: KeyReused,
    Status.PROTOCOL_ERROR: ProtocolFailure,
}


def error_for(status: int, message: str, psb: Psb | None = None) -> MrsError:
    """The typed error for a failure status that came over the wire."""
    return _BY_STATUS.get(int(status), MrsError)(status, message, psb)
