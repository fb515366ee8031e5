"""The client's error tree: one root `MrsError` carrying the MessageQ status.

Callers catch the root to handle everything, or a subclass for the cases they
handle differently (a get that timed out, an out-of-order confirm...).
"""

from __future__ import annotations

from mrs.model import Psb, Status, status_of


class MrsError(Exception):
    """An MRS request failed; `status` says how (a `Status` member)."""

    def __init__(self, status: Status | int, message: str, psb: Psb | None = None) -> None:
        self.status = status_of(int(status))
        self.message = message
        self.psb = psb
        name = self.status.name if isinstance(self.status, Status) else str(self.status)
        super().__init__(f"mrs: {name}: {message}")


class MrsTimeout(MrsError, TimeoutError):
    """TIMEOUT: a get found nothing in time, or a WF put did not reach its interest
    point in time (the message may or may not have been stored)."""


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


class ConnectionLost(MrsError):
    """The connection to the group server closed before the answer came."""


class PutOutcomeUnknown(ConnectionLost):
    """The connection dropped after a put was sent and before its answer came: the
    message may or may not be stored. Re-sending may store it twice; put an
    idempotency key in its headers (headers={"idempotency_key": ...}) to make a
    re-send safe."""


class ProtocolFailure(MrsError):
    """The server rejected a frame as malformed (a client library bug)."""


class NotAuthorized(MrsError):
    """NOTAUTHORIZED: authentication failed, or the credentials lack the permission."""


_BY_STATUS: dict[int, type[MrsError]] = {
    Status.TIMEOUT: MrsTimeout,
    Status.NOMOREMSG: NoMoreMessages,
    Status.NOTSUPPORTED: NotSupported,
    Status.BADDELIVERY: NotSupported,
    Status.BADUMA: NotSupported,
    Status.BADSEQ: BadSequence,
    Status.EXCMAXUNCONF: TooManyUnconfirmed,
    Status.NOSUCHQUEUE: NoSuchQueue,
    Status.PROTOCOL_ERROR: ProtocolFailure,
    Status.NOTAUTHORIZED: NotAuthorized,
}


def error_for(status: int, message: str, psb: Psb | None = None) -> MrsError:
    return _BY_STATUS.get(status, MrsError)(status, message, psb)
