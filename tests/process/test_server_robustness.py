"""Bad input never takes the server down and never loses what is stored (each kind of
malformed frame on the in-process bus; random bytes, a full LMDB map, a corrupt record
and SIGTERM against a real `mrs serve`)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys

import lmdb
import msgpack
import pytest
import trio

from clients import DeliveryMode, JournalFailed, NoMoreMessages, Status, Uma, connect
from mrs import protocol as wire

MODE = DeliveryMode


def _raw_session(address: str, payload: bytes) -> list:
    """Send a Hello then `payload` on a raw socket; return the events the server sent."""
    host, port = address.rsplit(":", 1)
    connection = wire.Connection("client")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(connection.send(wire.Hello(wire.PROTOCOL_VERSION, "raw")) + payload)
        received = []
        while True:
            data = sock.recv(65536)
            connection.receive_data(data)
            while (event := connection.next_event()) not in (wire.NEED_DATA, wire.CLOSED):
                received.append(event)
            if not data or any(isinstance(event, wire.Fatal) for event in received):
                return received


async def _memory_session(bus, payload: bytes) -> list:
    """`_raw_session` to an in-process group (mem_bus) over a memory stream."""
    host, port = bus.address.rsplit(":", 1)
    connection = wire.Connection("client")
    stream = await bus.open_stream(host, int(port))
    await stream.send_all(connection.send(wire.Hello(wire.PROTOCOL_VERSION, "raw")) + payload)
    received: list = []
    with trio.fail_after(10):
        while True:
            try:
                data = await stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            connection.receive_data(data)
            while (event := connection.next_event()) not in (wire.NEED_DATA, wire.CLOSED):
                received.append(event)
            if not data or any(isinstance(event, wire.Fatal) for event in received):
                await stream.aclose()
                return received


def _frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


@pytest.mark.parametrize(
    "payload, expected",
    [
        (struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1", "msgpack"),
        (_frame(msgpack.packb([999, 1])), "unknown"),
        (struct.pack(">I", 2**31), "exceeds"),
        (_frame(msgpack.packb([1, 1, "x", "app"])), "Hello"),
    ],
    ids=["garbage", "unknown-code", "oversized", "second-hello"],
)
async def test_malformed_frames_get_a_fatal_and_others_are_still_served(
    mem_bus, payload, expected
) -> None:
    """In process: a handler that raised instead of answering would fail this test."""
    bus = mem_bus
    async with bus.connect(queue="SENDER") as bystander:
        events = await _memory_session(bus, payload)
        fatal = events[-1]
        assert isinstance(fatal, wire.Fatal) and fatal.status == Status.PROTOCOL_ERROR
        assert expected.lower() in fatal.message.lower()
        psb = await bystander.put(b"still here", target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED


async def test_random_bytes_from_many_clients_do_not_stop_the_server(bus) -> None:
    rng = __import__("random").Random(7)
    for _ in range(20):
        _raw_session(bus.address, bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 300))))
    async with connect(bus.address, queue="SENDER") as sender:
        psb = await sender.put(b"ok", target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED
    assert bus.process.running


def test_bad_config_is_one_line_and_the_server_does_not_start(tmp_path) -> None:
    config = tmp_path / "bus.toml"
    config.write_text(
        '[[group]]\nid = 1\nname = "A"\nlisten = "127.0.0.1:0"\n'
        'data_dir = "g"\n[[group.queue]]\nid = 10\nname = "Q"\nconfrm = "implicit"\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert str(config) in lines[0] and "group[0].queue[0]" in lines[0] and "confrm" in lines[0]
    assert not (tmp_path / "g").exists()


async def test_corrupt_dqf_record_is_reported_and_not_delivered(bus) -> None:
    async with connect(bus.address, queue="SENDER") as sender:
        seqs = [
            (await sender.put(body, target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)).seq
            for body in (b"a", b"b", b"c")
        ]
    assert bus.process.terminate() == 0
    env = lmdb.open(str(bus.data_dir / "journals"), max_dbs=8)
    dqf = env.open_db(b"dqf")
    with env.begin(write=True, db=dqf) as txn:
        key = struct.pack(">IQ", 11, seqs[1])
        value = bytearray(txn.get(key))
        value[-1] ^= 0xFF
        txn.put(key, bytes(value))
    env.close()
    bus.start()
    async with connect(bus.address, queue="ANYORDER") as receiver:
        received = [await receiver.get(timeout=5) for _ in range(2)]
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)
        status = await receiver.status()
    assert [m.body for m in received] == [b"a", b"c"]
    [report] = status["corrupt_records"]
    assert "dqf" in report and key.hex() in report and "checksum" in report


async def test_journal_full_answers_mrs_res_exh_and_keeps_what_is_stored(make_bus) -> None:
    bus = make_bus(limits="journal_bytes_max = 1048576\nmessage_bytes_max = 200000")
    stored, outcome = [], None
    async with connect(bus.address, queue="SENDER") as sender:
        for index in range(50):
            psb = await sender.put(
                bytes([index]) * 150_000, target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC
            )
            if psb.delivery_status != Status.STORED:
                outcome = psb
                break
            stored.append(psb.seq)
    assert outcome is not None, "the 1 MiB journal never filled"
    assert (outcome.delivery_status, outcome.uma_status) == (
        Status.MRS_RES_EXH,
        Status.DISC_SUCCESS,
    )
    async with connect(bus.address, queue="ANYORDER") as receiver:
        for seq in stored:
            message = await receiver.get(timeout=5)
            assert message.seq == seq and len(message.body) == 150_000
            await receiver.confirm(message.seq)
    assert bus.process.running


def test_sigterm_stops_gracefully(bus) -> None:
    assert bus.process.terminate() == 0
    assert "stopped; journals closed" in bus.log_text()
    assert os.path.exists(bus.data_dir / "journals" / "data.mdb")


async def test_journal_device_faults_take_the_uma_and_lose_nothing(make_mem_bus) -> None:
    """In process: each commit fails with the fault word set on the group's store, as
    MRS_FAULT_FILE does to a real process."""
    bus = await make_mem_bus()
    async with (
        bus.connect(queue="SENDER") as sender,
        bus.connect(queue="ANYORDER") as receiver,
    ):
        before = await sender.put(b"before", target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert before.delivery_status == Status.STORED
        delivered = await receiver.get(timeout=5)

        bus.fail_commits("EIO")
        psb = await sender.put(b"x", target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert (psb.delivery_status, psb.uma_status) == (
            Status.DQF_DEVICE_FAIL,
            Status.DISC_SUCCESS,
        )
        psb = await sender.put(b"x", target="1.11", delivery=MODE.WF_DQF, uma=Uma.DLJ)
        assert (psb.delivery_status, psb.uma_status) == (Status.DQF_DEVICE_FAIL, Status.DLJ_FAILED)
        with pytest.raises(JournalFailed) as failed_confirm:
            await receiver.confirm(delivered.seq)
        assert failed_confirm.value.status == Status.JOURNAL_FAIL

        bus.fail_commits("ENOSPC")
        psb = await sender.put(b"x", target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.DQF_DEVICE_FAIL
        bus.fail_commits("MAPFULL")
        psb = await sender.put(b"x", target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.MRS_RES_EXH

        bus.fail_commits(None)
        await receiver.confirm(delivered.seq)  # still unconfirmed, so confirmable now
        after = await sender.put(b"after", target="1.11", delivery=MODE.WF_DQF, uma=Uma.DISC)
        assert after.delivery_status == Status.STORED
        assert (await receiver.get(timeout=5)).body == b"after"
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)
