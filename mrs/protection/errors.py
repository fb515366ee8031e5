"""The errors of message protection, in the one tree (`mrs.errors`): a body that could
not be sealed or opened (PROTECTION_ERROR), and a bad policy or key file (an
operator's mistake)."""

from __future__ import annotations

from mrs.errors import MrsError, OperatorError
from mrs.model import Status

MQRC_NOT_AUTHORIZED = 2035
"""IBM MQ's reason when the putter may not protect for this policy (not a signer)."""
MQRC_SECURITY_ERROR = 2063
"""IBM MQ's reason for a message that fails its policy on get (AMS moves it to
SYSTEM.PROTECTION.ERROR.QUEUE; MRS moves it to the receiver's DLQ with this reason)."""


class ProtectionError(MrsError):
    """PROTECTION_ERROR: a body could not be sealed or opened under its queue's
    policy. `reason` is the MQRC code a dead-letter header carries for it."""

    status_prefix = False

    def __init__(self, message: str, reason: int = MQRC_SECURITY_ERROR) -> None:
        super().__init__(Status.PROTECTION_ERROR, message)
        self.reason = reason


class PolicyError(OperatorError):
    """The policy file or a key file is unreadable or wrong; the text says where."""
