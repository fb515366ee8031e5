"""Adversarial peers on the listening surfaces of a real `mrs serve`, over real sockets:
what a lying peer group sends on the link port must cost the group a bounded amount
(memory, log), be answered, and leave other clients served."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import Status, connect_sync
from mrs import protocol as wire
from mrs.protocol.link_events import LinkTransfer, TransferredMessage
from sim.processes import GroupProcess
from tests.process.test_bad_clients_25c import _address
from tests.process.test_web_bus_admin import _plain_bus

GROUP_1_SEQ = 1 << 49
"""Group 1's first seq (a group's seqs carry its id: mrs.core.seqspace)."""


@pytest.fixture
def group_2(tmp_path: Path) -> Iterator[GroupProcess]:
    """Group 2 of a two-group bus, running alone: the test dials it as group 1."""
    group = GroupProcess(_plain_bus(tmp_path), 2)
    group.start()
    yield group
    if group.running:
        group.terminate()


def _poison(seq: int) -> TransferredMessage:
    """A message of the right shape that no client could put (delivery mode 0)."""
    return TransferredMessage(seq, 10, 1, 10, b"x", 0, 0, 1, 0, 5, b"", 1, None, False)


def _link_as_group_1(address: str, frames: list[object]) -> list[object]:
    """Say group 1's link Hello, send `frames` and a Ping; the events answered up to
    the Pong."""
    connection = wire.Connection("client")
    hello = wire.Hello(wire.PROTOCOL_VERSION, "liar", "link", 1, incarnation=b"liar" * 4)
    data = connection.send(hello) + connection.send_many([*frames, wire.Ping(7)])
    answered: list[object] = []
    with socket.create_connection(_address(address), timeout=30) as sock:
        sock.sendall(data)
        while not any(isinstance(event, wire.Pong) for event in answered):
            received = sock.recv(1 << 20)
            assert received, f"closed after {answered[-1:]}"
            connection.receive_data(received)
            answered.extend(connection.events())
    return answered


def test_a_peer_sending_poison_messages_writes_one_log_line_not_one_each(group_2) -> None:
    """Each message of a transfer that no client could put is refused BADPARAM alone;
    its ERROR line used to be written for every one, so a lying or broken peer wrote
    256 lines per frame as fast as it could send (1,024 for the four frames here).
    Now one line per peer per interval, and the count of the others is told (here as
    the group stops)."""
    transfers = [
        LinkTransfer(number + 1, [_poison(GROUP_1_SEQ + number * 256 + i) for i in range(256)])
        for number in range(4)
    ]
    answered = _link_as_group_1(group_2.address, transfers)
    acks = [event for event in answered if isinstance(event, wire.LinkAck)]
    assert [len(ack.results) for ack in acks] == [256] * 4
    assert {result.status for ack in acks for result in ack.results} == {Status.BADPARAM}
    with connect_sync(group_2.address, None) as other:  # the group serves on
        assert other.status()["group"] == 2
    assert group_2.terminate() == 0
    log = (group_2.config_path.parent / "group2.log").read_text()
    lines = [line for line in log.splitlines() if "that no client could put" in line]
    assert len(lines) == 2, lines
    assert "ERROR" in lines[0] and "group 1 sent message" in lines[0]
    assert "(1023 more since the last such line; logged as the server stops)" in lines[1]
    assert "Traceback" not in log
