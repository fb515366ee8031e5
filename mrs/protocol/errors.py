"""Protocol errors: what broke the protocol, and the status to answer with."""

from __future__ import annotations

from mrs.errors import ProtocolError

__all__ = ["FrameRefused", "LocalProtocolError", "ProtocolError", "RemoteProtocolError"]


class LocalProtocolError(ProtocolError):
    """Our side tried to build or send something the protocol forbids."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids; the connection is broken."""


class FrameRefused(RemoteProtocolError):
    """The peer's next four bytes are no frame length MRS takes (0, or past
    frame_bytes_max): `head` is those bytes, `named` whether they are a protocol the
    message already names (a TLS record, an HTTP request). Why the bytes: whoever read
    the error (`mrs status`) told another program's first bytes (b"HTTP", b"SSH-")
    only by parsing them back out of the message's number."""

    def __init__(self, message: str, head: bytes, named: bool) -> None:
        super().__init__(message)
        self.head = head
        self.named = named
