"""Protocol errors: what broke the protocol, and the status to answer with."""

from __future__ import annotations

from mrs.model import Status


class ProtocolError(Exception):
    """A frame or an event broke the protocol. `.status` is the status to answer with."""

    def __init__(self, message: str, status: Status = Status.PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class LocalProtocolError(ProtocolError):
    """Our side tried to build or send something the protocol forbids."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids; the connection is broken."""
