"""docs/protocol.md as a third-party implementer reads it, against a real `mrs serve`.

A raw-socket client here uses only msgpack, the standard library and the page: its
frames are the page's own (the answers to invalid frames table, the session
transcript, the authentication frames), so a page that says what the server does not
do fails here. The page's tables against the event structs: tests/unit/
test_protocol_doc_23.py.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import os
import re
import socket
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest

from mrs.core.seqspace import GROUP_SHIFT as SEQ_GROUP_SHIFT
from mrs.model import DeliveryMode, Status
from tests.unit.test_protocol_doc_23 import page_text, section, table_rows

EOF = "EOF"
"""What `RawClient.read` returns once the server closed the connection."""

QUEUES = "\n".join(
    f'[[group.queue]]\nid = {queue_id}\nname = "{name}"\nconfirm = "explicit-out-of-order"'
    for queue_id, name in [(10, "ORDERS"), *((20 + i, f"R{i}") for i in range(60))]
)
"""ORDERS (the page's frames name it) and one queue per row that attaches, so no row
waits for the detach of the row before it (an attach of a queue still attached is
QUEUE_BUSY)."""


class RawClient:
    """A socket that speaks frames: u32 big-endian length, msgpack."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.buffer = b""

    def send(self, value: Any) -> None:
        self.send_bytes(frame_bytes(value))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> Any:
        """The next frame's value, or EOF; a frame not in within 10 s fails the test."""
        while True:
            if len(self.buffer) >= 4:
                (size,) = struct.unpack_from(">I", self.buffer)
                if len(self.buffer) >= 4 + size:
                    payload, self.buffer = self.buffer[4 : 4 + size], self.buffer[4 + size :]
                    return msgpack.unpackb(payload, raw=False, strict_map_key=False)
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                return EOF
            self.buffer += data

    def ask(self, value: Any) -> Any:
        self.send(value)
        return self.read()

    def hello(self) -> list:
        welcome = self.ask([1, page_version(), "rawdoc"])
        assert welcome[0] == 2 and welcome[1] == page_version(), welcome
        return welcome

    def close(self) -> None:
        self.sock.close()


def frame_bytes(value: Any) -> bytes:
    payload = msgpack.packb(value, use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def page_version() -> int:
    match = re.search(r"`protocol_version` is (\d+)", page_text())
    assert match
    return int(match.group(1))


def page_value(text: str) -> Any:
    """A frame as the page writes it: msgpack with nil/true/false, or hex bytes."""
    if re.fullmatch(r"[0-9a-f]{2}( [0-9a-f]{2})*", text):
        return bytes.fromhex(text)
    words = {"nil": "None", "true": "True", "false": "False"}
    return ast.literal_eval(re.sub(r"\b(nil|true|false)\b", lambda m: words[m.group(1)], text))


def status_of(name: str) -> int:
    return int(Status[name])


@pytest.fixture
def doc_bus(make_bus):
    return make_bus(queues=QUEUES, group_extra="[group.guards]\nheartbeat_interval_s = 0.3")


def test_every_invalid_frame_is_answered_as_the_page_says(doc_bus) -> None:
    rows = table_rows(section(page_text(), "Errors"))
    assert len(rows) >= 30
    for index, (before, frames, answer, connection) in enumerate(rows):
        client = RawClient(doc_bus.address)
        if before.startswith("Hello"):
            client.hello()
        if before == "Hello, Attach":
            assert client.ask([10, 10_000, f"R{index}"])[0] == 11
        for text in re.findall(r"`([^`]+)`", frames):
            value = page_value(text)
            client.send_bytes(value) if isinstance(value, bytes) else client.send(value)
        if answer == "nothing":  # the Pong comes first: nothing was answered before it
            assert client.ask([50, 77]) == [51, 77], frames
        else:
            said = re.fullmatch(r"`(Fatal|Failure)\((\w+)\)`", answer)
            assert said, answer
            kind, status = said.groups()
            got = client.read()
            code = 31 if kind == "Fatal" else 30
            assert got != EOF and got[0] == code, (frames, got)
            assert got[-2] == status_of(status), (frames, got)
        if connection == "closed":
            assert client.read() == EOF, frames
        else:
            assert client.ask([50, 78]) == [51, 78], frames
        client.close()


def transcript(heading: str) -> list[tuple[str, Any]]:
    """The (side, frame) lines of the first ```text block under `heading`."""
    block = re.search(r"```text\n(.*?)```", section(page_text(), heading), re.S)
    assert block
    lines = []
    for line in block.group(1).splitlines():
        side, rest = line.split(None, 1)
        end = rest.index("]  ") + 1 if "]  " in rest else len(rest)
        lines.append((side, page_value(rest[:end].strip())))
    return lines


def with_seqs(frame: Any, seqs: dict[int, int]) -> Any:
    """`frame` with each of the page's seqs written as the group gave it: a new group
    counts its seqs from its wall clock, so the page shows one run's, not every run's."""
    if isinstance(frame, list):
        return [with_seqs(item, seqs) for item in frame]
    return seqs.get(frame, frame) if type(frame) is int else frame


def same_answer(said: Any, got: Any) -> bool:
    """`got` is the page's answer: equal but for a time in ns (now, not the page's)."""
    if isinstance(said, list) and isinstance(got, list) and len(said) == len(got):
        return all(same_answer(a, b) for a, b in zip(said, got, strict=True))
    time_ns = isinstance(said, int) and isinstance(got, int) and said > 10**18 and got > 10**18
    return time_ns or (said == got and type(said) is type(got))


def test_the_pages_handshake_and_session_are_what_a_server_answers(doc_bus) -> None:
    """The Handshake and A session transcripts, sent as the page writes them to a new
    group: every answer is the page's (its seq is the group's first), and a quiet
    client is pinged as Heartbeats says."""
    client = RawClient(doc_bus.address)
    seqs: dict[int, int] = {}  # the page's seq -> this group's (mrs.core.seqspace.fresh_start)
    for side, value in transcript("Handshake and version") + transcript("A session"):
        if side == "client":
            client.send(with_seqs(value, seqs))
        else:
            got = client.read()
            if value[0] == 2:  # the Welcome names the group and its limit: this bus's
                assert got[:2] == value[:2] and len(got) == len(value), got
                continue
            if value[0] == 13:  # a PutDone: the seq a new group's clock gave
                assert got[4] >> SEQ_GROUP_SHIFT == value[4] >> SEQ_GROUP_SHIFT == 1, got
                seqs[value[4]] = got[4]
            assert same_answer(with_seqs(value, seqs), got), (value, got)
    assert client.read()[0] == 50  # quiet for heartbeat_interval_s: a Ping
    assert client.ask([14, 9, 0])[:3] == [30, 9, status_of("NOMOREMSG")]
    client.close()


def answers(client: RawClient, count: int) -> dict[int, list]:
    """`count` answers by request id, AnswerBatch items taken one by one."""
    out: dict[int, list] = {}
    while len(out) < count:
        got = client.read()
        assert got != EOF
        for item in got[1] if got[0] == 26 else [got]:
            out[item[1]] = item
    return out


def test_put_batch_of_every_mode_then_get_batch_and_confirm(doc_bus) -> None:
    """Each mode that does not wait for its receiver, put in one PutBatch by a client
    that reads AnswerBatch frames, then taken in one GetBatch: each put answered on
    its own, each message delivered once, and those the page says wait for a Confirm
    (CONFIRMREQ) confirmed."""
    modes = [m for m in DeliveryMode if not (m.name.startswith("WF_") and m.waits_for_receiver)]
    client = RawClient(doc_bus.address)
    assert client.ask([1, page_version(), "rawdoc", "app", 0, True])[0] == 2
    assert client.ask([10, 1, "R59"]) == [11, 1, 1, 79]
    puts = [
        [
            12,
            100 + i,
            "R59",
            mode.name.encode(),
            int(mode),
            2 if mode.recoverable else 5,
            0,
            0,
            0,
            0,
            b"",
            "",
            None,
        ]  # fmt: skip
        for i, mode in enumerate(modes)
    ]
    client.send([22, puts])
    done = answers(client, len(puts))
    assert {row[0] for row in done.values()} == {13}, done
    assert all(row[2] == status_of("SUCCESS") for row in done.values()), done
    batch = client.ask([23, 1, 1000, 0])
    assert batch[:2] == [24, 1]
    bodies = [delivery[3] for delivery in batch[2] if delivery[6] != 28]  # not an MRS_ACK
    assert sorted(bodies) == sorted(mode.name.encode() for mode in modes)
    to_confirm = [d for d in batch[2] if d[10] == status_of("CONFIRMREQ")]
    assert {d[3] for d in to_confirm} >= {m.name.encode() for m in modes if m.recoverable}
    for i, delivery in enumerate(to_confirm):
        client.send([16, 500 + i, delivery[2], 0, 0])
    confirmed = answers(client, len(to_confirm))
    assert {row[0] for row in confirmed.values()} == {17}, confirmed
    client.close()


def test_authentication_from_the_page_alone(tmp_path: Path) -> None:
    """The Authentication frames section, done with hashlib and hmac only: the server
    takes the proof, its signature checks, and the Hello is answered."""
    from tests.auth_helpers import SecureBus, password_of

    bus = SecureBus(tmp_path / "auth", group_ids=(1,))
    bus.start()
    try:
        client = RawClient(bus.address(1))
        name, client_nonce = "consumer", os.urandom(24)
        challenge = client.ask({"auth": 1, "name": name, "nonce": client_nonce})
        auth_message = msgpack.packb(
            ["mrs-scram-sha256", 1, name, client_nonce, challenge["nonce"], challenge["salt"],
             challenge["iterations"], challenge["group"]], use_bin_type=True)  # fmt: skip
        salted = hashlib.pbkdf2_hmac(
            "sha256", password_of(name).encode(), challenge["salt"], challenge["iterations"], 32
        )
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        stored_key = hashlib.sha256(client_key).digest()
        signature = hmac.new(stored_key, auth_message, "sha256").digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        answer = client.ask({"proof": proof})
        server_key = hmac.new(salted, b"Server Key", "sha256").digest()
        assert answer["ok"] is True
        assert answer["signature"] == hmac.new(server_key, auth_message, "sha256").digest()
        assert client.hello()[2] == 1
        assert client.ask([10, 1, "IN"])[0] == 11
        client.close()
    finally:
        bus.stop()
