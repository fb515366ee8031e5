"""A link that ends inside a frame is said to be cut, not to have broken the protocol."""

from __future__ import annotations

import pytest

from mrs import protocol as wire
from mrs.group.link_driver import protocol_down_line


def test_a_connection_ended_mid_frame_is_a_cut() -> None:
    """Before: "link to group 2 down: protocol error: connection closed mid-frame" for
    a cable pulled or a peer killed while it sent, the words of a peer's bug."""
    connection = wire.Connection("client")
    connection.receive_data(b"\x00\x00\x01\x00partial")
    connection.receive_data(b"")  # the end of the stream, inside the frame
    with pytest.raises(wire.ProtocolError) as cut:
        connection.events()
    line = protocol_down_line("link to group 2", cut.value)
    assert line == (
        "link to group 2 down: connection cut mid-frame (a network cut, or the peer stopped)"
    )
    other = protocol_down_line("link to group 2", wire.RemoteProtocolError("frame of 9 GB"))
    assert other == "link to group 2 down: protocol error: frame of 9 GB"
