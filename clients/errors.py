"""The client's view of the one MRS error tree (`mrs.errors`), re-exported.

Callers catch the root `MrsError` to handle everything, or a subclass for the cases
they handle differently (a get that timed out, an out-of-order confirm...).
"""

from __future__ import annotations

from mrs.errors import (
    BadParameter,
    BadSequence,
    ConnectionLost,
    FieldRefused,
    JournalBusy,
    JournalFailed,
    JournalFull,
    KeyReused,
    MessageTooBig,
    MrsError,
    MrsTimeout,
    NoMoreMessages,
    NoSuchQueue,
    NotAttached,
    NotAuthorized,
    NotSupported,
    ProtocolFailure,
    PutOutcomeUnknown,
    QueueBusy,
    QuotaExceeded,
    ReplyTimeout,
    ServerError,
    ShuttingDown,
    TooManyUnconfirmed,
    error_for,
)

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
    "ProtocolFailure",
    "PutOutcomeUnknown",
    "QueueBusy",
    "QuotaExceeded",
    "ReplyTimeout",
    "ServerError",
    "ShuttingDown",
    "TooManyUnconfirmed",
    "error_for",
]
