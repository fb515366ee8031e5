"""The client's authentication exchange, when the server sends more after its answer:
its Fatal frame is its refusal (NOTAUTHORIZED: the principal was removed and added
again while the exchange ran), not the client's "data after the authentication
answer" PROTOCOL_ERROR. CI saw the latter when both came in one receive."""

from __future__ import annotations

from mrs.model import Status
from mrs.protocol import Fatal
from mrs.protocol.connection import Connection
from mrs.security.handshake import FrameReader

WHY = "principal 'producer' was removed and added again since this connection proved it"


def test_a_fatal_frame_after_the_answer_is_the_servers_refusal() -> None:
    reader = FrameReader(stream=None)  # type: ignore[arg-type]  # reads only its buffer
    reader.buffer += Connection("server").send(Fatal(int(Status.NOTAUTHORIZED), WHY))
    refusal = reader.after_answer()
    assert (refusal.status, refusal.message) == (Status.NOTAUTHORIZED, WHY)


def test_other_bytes_after_the_answer_are_a_protocol_error() -> None:
    reader = FrameReader(stream=None)  # type: ignore[arg-type]
    reader.buffer += b"\x00\x00\x00\x02hi"
    refusal = reader.after_answer()
    assert (refusal.status, refusal.message) == (
        Status.PROTOCOL_ERROR,
        "data after the authentication answer",
    )
