"""Upgrading MRS in place, as an operator does: a data directory an earlier build
wrote, served by this one; and a bus whose groups run two releases for a while
(a rolling upgrade), with real `mrs serve` processes and real LMDB files.

`tests/data/upgrade_23_74436e6.tar.gz` holds what build 74436e6 (before links carried
their journals' incarnation) wrote: group 1's data directory (`g1/`: a SAF backlog for
group 2, a DQF with two messages handed out and never confirmed, a PCJ record
replayed once by `mrs jplay` with its ledger, two dead letters, idempotency keys) and
a client SAF journal (`client.saf/`, three puts journaled while group 1 was down).
Made with that build (`git worktree add /tmp/old 74436e6`, then from /tmp with
`PYTHONPATH=/tmp/old MRS_PURE_PYTHON=1`): `mrs serve` of group 1 of the bus that
`_bus_text` writes (group 2 not started, `dedupe_window_s = 3000000000` so its keys
outlive this test), the puts and gets `EXPECTED` describes, `mrs jplay ... pcj --to
RESTORE`, SIGKILL, then the client SAF journal's puts; `mrs.lock` and `owner.lock`
left out."""

from __future__ import annotations

import json
import struct
import tarfile
import textwrap
from pathlib import Path

import msgspec
import trio

from clients import DeliveryMode, ForceJrn, NoMoreMessages, Status, Uma, connect
from mrs.group.link_driver import EARLIER_RELEASE_REFUSAL
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.cli_helpers import run_mrs

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "upgrade_23_74436e6.tar.gz"
K1_FIRST_SEQ = 562949953421325
"""The seq build 74436e6 gave the put with idempotency key "k1" to ANYORDER."""
EXPECTED = {  # journal -> the bodies the earlier build left in it
    "saf": [b"saf-0", b"saf-1", b"saf-2", b"saf-3", b"saf-4", b"saf-key"],
    "dqf": [b"ord-1", b"ord-2", b"ord-3", b"ord-4", b"ord-5", b"key-body", b"ord-0"],
    "dlj": [b"dead-0", b"dead-1"],
    "pcj": [b"ord-0"],
}
EARLIER_HELLO_FIELDS = 5
"""The fields of a Hello that a group of an earlier release reads (no incarnation)."""


def _bus_text(listen: dict[int, int], link_port: int | None = None) -> str:
    """The bus the fixture was written with, on these ports (and the link dialed at
    `link_port`, when given)."""
    link_address = f'address = "127.0.0.1:{link_port}"' if link_port else ""
    return textwrap.dedent(f"""\
        [[group]]
        id = 1
        name = "NYC"
        listen = "127.0.0.1:{listen[1]}"
        data_dir = "g1"
        pcj_default = true
        [group.limits]
        dedupe_window_s = 3000000000
        [[group.queue]]
        id = 10
        name = "ORDERS"
        confirm = "explicit-in-order"
        [[group.queue]]
        id = 11
        name = "ANYORDER"
        confirm = "explicit-out-of-order"
        [[group.queue]]
        id = 13
        name = "SENDER"
        confirm = "explicit-out-of-order"
        [[group.queue]]
        id = 16
        name = "REPLAY"
        [[group.queue]]
        id = 17
        name = "RESTORE"

        [[group]]
        id = 2
        name = "LDN"
        listen = "127.0.0.1:{listen[2]}"
        data_dir = "g2"
        [[group.queue]]
        id = 20
        name = "INBOX"
        confirm = "explicit-out-of-order"

        [[link]]
        groups = [1, 2]
        {link_address}
        """)


def _write_bus(directory: Path, link_port: int | None = None) -> tuple[Path, dict[int, str]]:
    listen = {1: free_port(), 2: free_port()}
    path = directory / "bus.toml"
    path.write_text(_bus_text(listen, link_port))
    return path, {group: f"127.0.0.1:{port}" for group, port in listen.items()}


def _dumped_bodies(*args: str) -> list[bytes]:
    """The bodies `mrs dump ARGS --json --body` prints, in order."""
    result = run_mrs("dump", *args, "--json", "--body")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return [line["body"].encode() for line in lines]


async def _take(address: str, queue: str, count: int) -> list[tuple[bytes, int]]:
    """`count` messages of `queue` (waiting for each), confirmed to the PCJ, and then
    nothing more: (body, delivery status) each."""
    taken = []
    async with connect(address, queue) as client:
        for _ in range(count):
            message = await client.get(timeout=20)
            await client.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)
            taken.append((message.body, message.delivery_status))
        try:
            extra = await client.get(timeout=0)
        except NoMoreMessages:
            return taken
    raise AssertionError(f"{queue}: one more than expected: {extra}")


async def test_an_earlier_builds_data_directory_is_served_by_this_one(tmp_path: Path) -> None:
    """Every message the earlier build acknowledged is delivered once, the two it had
    handed out marked POSSDUPL; its SAF backlog drains to the other group; its client
    SAF journal drains through this client library; a keyed put re-sent after the
    upgrade is answered as the first copy; its replay ledger still skips what it
    replayed; and the journal tools read its journals before anything serves them."""
    with tarfile.open(FIXTURE) as archive:
        archive.extractall(tmp_path)  # this tree's own fixture
    config, address = _write_bus(tmp_path)
    data_dir = str(tmp_path / "g1")
    for journal, bodies in EXPECTED.items():
        assert _dumped_bodies("--data-dir", data_dir, journal) == bodies
    assert _dumped_bodies("--client-saf", str(tmp_path / "client.saf")) == [
        b"csaf-0",
        b"csaf-1",
        b"csaf-2",
    ]
    verify = run_mrs("journal", "verify", "--data-dir", data_dir)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    groups = [GroupProcess(config, 2), GroupProcess(config, 1)]
    try:
        for group in groups:
            group.start()
        replay = run_mrs(
            "jplay",
            "--config",
            str(config),
            "--group",
            "1",
            "--address",
            address[1],
            "pcj",
            "--to",
            "RESTORE",
        )
        assert "sent 0, skipped 1 (already replayed)" in replay.stderr, replay.stderr
        await _drain_client_journal_and_resend(address[1], tmp_path / "client.saf")
        await _check_deliveries(address)
    finally:
        for group in groups:
            group.terminate()


async def _drain_client_journal_and_resend(address: str, journal: Path) -> None:
    async with connect(address, "SENDER", saf_journal=str(journal)) as client:
        with trio.fail_after(30):
            await client.wait_journal_status(Status.LINK_UP)
        again = await client.put(
            b"key-body",
            target="1.11",
            delivery=DeliveryMode.WF_DQF,
            uma=Uma.DLJ,
            timeout=10,
            headers={"idempotency_key": "k1"},
        )
    assert (again.delivery_status, again.seq) == (Status.STORED, K1_FIRST_SEQ)


async def _check_deliveries(address: dict[int, str]) -> None:
    first, again = Status.CONFIRMREQ, Status.POSSDUPL
    assert await _take(address[2], "INBOX", 6) == [(body, first) for body in EXPECTED["saf"]]
    assert await _take(address[1], "ORDERS", 5) == [
        (b"ord-1", again),
        (b"ord-2", again),
        (b"ord-3", first),
        (b"ord-4", first),
        (b"ord-5", first),
    ]
    anyorder = await _take(address[1], "ANYORDER", 4)
    assert sorted(anyorder) == [
        (b"csaf-0", first),
        (b"csaf-1", first),
        (b"csaf-2", first),
        (b"key-body", first),
    ]
    assert await _take(address[1], "RESTORE", 1) == [(b"ord-0", first)]


# ---------------------------------------------------------------- a mixed-release bus
def _fatal_frame(message: str) -> bytes:
    """A Fatal frame as every release writes it: length, then [31, status, message]."""
    payload = msgspec.msgpack.encode([31, int(Status.PROTOCOL_ERROR), message])
    return struct.pack(">I", len(payload)) + payload


async def _receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        if not chunk:
            raise trio.BrokenResourceError("closed")
        data += chunk
    return data


async def _pipe(source: trio.SocketStream, sink: trio.SocketStream) -> None:
    try:
        while chunk := await source.receive_some(65536):
            await sink.send_all(chunk)
    except trio.BrokenResourceError:
        pass
    finally:
        await sink.aclose()


class EarlierReleaseGate:
    """In front of group 2, its handshake as a group of an earlier release answers
    it: a link Hello with more fields than that release reads is refused with its
    Fatal ("Hello frame has 6 fields, expected 5") and the connection closed; one it
    reads goes through to group 2, and so does everything after it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.hello_fields: list[int] = []

    async def serve(
        self, task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        await trio.serve_tcp(self._handle, self.port, host="127.0.0.1", task_status=task_status)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            header = await _receive_exactly(stream, 4)
            payload = await _receive_exactly(stream, struct.unpack(">I", header)[0])
        except trio.BrokenResourceError:
            return
        fields = len(msgspec.msgpack.decode(payload)) - 1
        self.hello_fields.append(fields)
        if fields > EARLIER_HELLO_FIELDS:
            refusal = f"Hello frame has {fields} fields, expected {EARLIER_HELLO_FIELDS}"
            await stream.send_all(_fatal_frame(refusal))
            await stream.aclose()
            return
        upstream = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        await upstream.send_all(header + payload)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pipe, stream, upstream)
            nursery.start_soon(_pipe, upstream, stream)


async def test_the_lower_group_upgraded_first_links_to_its_peer_of_an_earlier_release(
    tmp_path: Path,
) -> None:
    """A rolling upgrade that starts with the lower-numbered group (the dialer): its
    peer, of an earlier release, refuses this release's link Hello (one field more,
    the journals' incarnation, than it reads). The dialer says one WARNING and links
    without it, so its SAF drains to the old group. Before, it was refused at every
    redial until that group was upgraded too, and what it sent there waited."""
    listen_2 = free_port()
    gate = EarlierReleaseGate(listen_2)
    config = tmp_path / "bus.toml"
    config.write_text(_bus_text({1: free_port(), 2: listen_2}, link_port=gate.port))
    groups = {group_id: GroupProcess(config, group_id) for group_id in (2, 1)}
    async with trio.open_nursery() as nursery:
        await nursery.start(gate.serve)
        try:
            for group in groups.values():
                await trio.to_thread.run_sync(group.start)
            async with connect(groups[1].address, "SENDER") as sender:
                psb = await sender.put(
                    b"across releases",
                    target="2.20",
                    delivery=DeliveryMode.WF_SAF,
                    uma=Uma.DLJ,
                    timeout=10,
                )
            assert psb.delivery_status == Status.STORED
            taken = await _take(groups[2].address, "INBOX", 1)
            assert taken == [(b"across releases", Status.CONFIRMREQ)]
        finally:
            for group in groups.values():
                group.terminate()
        nursery.cancel_scope.cancel()
    assert gate.hello_fields[0] > EARLIER_HELLO_FIELDS >= gate.hello_fields[-1]
    log = (tmp_path / "group1.log").read_text()
    assert "group 2 runs an earlier release (it refused this release's link Hello)" in log


def test_only_a_refusal_of_a_longer_hello_reads_as_an_earlier_release() -> None:
    """The pattern matches the refusal every release words the same way; a shorter
    Hello refused (a peer newer still) is not taken for an earlier release."""
    from mrs.group.link_driver import PeerOfEarlierRelease, _refusal

    said = b"\x01" * 16
    earlier = "Hello frame has 6 fields, expected 5"
    assert EARLIER_RELEASE_REFUSAL.search(earlier) is not None
    assert isinstance(_refusal(earlier, said), PeerOfEarlierRelease)
    assert not isinstance(
        _refusal("Hello frame has 4 fields, expected 5", said), PeerOfEarlierRelease
    )
    assert not isinstance(_refusal(earlier, b""), PeerOfEarlierRelease)
