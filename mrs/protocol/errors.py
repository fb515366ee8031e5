"""Protocol errors: what broke the protocol, and the status to answer with."""

from __future__ import annotations

from mrs.errors import ProtocolError

__all__ = ["LocalProtocolError", "ProtocolError", "RemoteProtocolError"]


class LocalProtocolError(ProtocolError):
    """Our side tried to build or send something the protocol forbids."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids; the connection is broken."""
