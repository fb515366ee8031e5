"""TLS with real processes: a two-group bus made TLS-only by `mrs certs --apply`.

Clients and the link deliver over TLS; a wrong CA, a missing client certificate, a
plaintext client and a certificate posing as another group are each refused with a
clear error while the server goes on serving everyone else.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from clients import (
    BadParameter,
    ClientCredentials,
    ConnectionLost,
    DeliveryMode,
    MrsError,
    TlsRefused,
    connect,
    tls_context,
)
from mrs import protocol as wire
from sim.ports import free_port
from sim.processes import GroupProcess

QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 11
name = "OUT"
confirm = "explicit-out-of-order"
"""
LINK_WAIT_S = 30.0


def write_bus(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    groups = []
    for group_id in (1, 2):
        groups.append(
            textwrap.dedent(f"""\
                [[group]]
                id = {group_id}
                name = "G{group_id}"
                listen = "127.0.0.1:{free_port()}"
                data_dir = "g{group_id}"
                """)
            + textwrap.dedent(QUEUES)
        )
    path = directory / "bus.toml"
    path.write_text("\n".join(groups) + "\n[[link]]\ngroups = [1, 2]\n")
    return path


def mrs(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mrs", *args], capture_output=True, text=True, cwd=cwd
    )


class TlsBus:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.config = write_bus(directory)
        made = mrs(
            "certs", "--config", str(self.config), "--out", str(directory / "certs"), "--apply"
        )
        assert made.returncode == 0, made.stderr
        self.certs = directory / "certs"
        self.processes = {g: GroupProcess(self.config, g) for g in (1, 2)}

    def start(self) -> None:
        for process in self.processes.values():
            process.start()

    def stop(self) -> None:
        for process in self.processes.values():
            process.terminate()

    def address(self, group: int) -> str:
        return self.processes[group].address

    def client_tls(self) -> ssl.SSLContext:
        c = self.certs
        return tls_context(ca=c / "ca.pem", cert=c / "client.pem", key=c / "client.key")

    def log(self, group: int) -> str:
        return (self.directory / f"group{group}.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def tls_bus(tmp_path_factory):
    bus = TlsBus(tmp_path_factory.mktemp("tls") / "bus")
    bus.start()
    yield bus
    bus.stop()


async def wait_link_up(bus: TlsBus) -> None:
    with trio.fail_after(LINK_WAIT_S):
        while True:
            async with connect(bus.address(1), None, tls=bus.client_tls()) as client:
                if (await client.status())["links"]["2"]["state"] == "up":
                    return
            await trio.sleep(0.05)


async def test_client_and_link_deliver_over_tls(tls_bus) -> None:
    await wait_link_up(tls_bus)
    tls = tls_bus.client_tls()
    async with (
        connect(tls_bus.address(1), "OUT", tls=tls) as sender,
        connect(tls_bus.address(2), "IN", tls=tls) as receiver,
    ):
        for index in range(5):
            psb = await sender.put(
                f"over tls {index}".encode(), "2.10", delivery=DeliveryMode.WF_DQF
            )
            assert psb.status.name == "SUCCESS"
        bodies = []
        for _ in range(5):
            message = await receiver.get(timeout=10)
            bodies.append(message.body)
            await receiver.confirm(message.seq)
    assert bodies == [f"over tls {index}".encode() for index in range(5)]


async def test_a_client_trusting_another_ca_is_refused_clearly(tls_bus, tmp_path) -> None:
    other = tmp_path / "other"
    made = mrs("certs", "--config", str(write_bus(other)), "--out", str(other / "certs"))
    assert made.returncode == 0, made.stderr
    wrong = tls_context(ca=other / "certs" / "ca.pem")
    with pytest.raises(TlsRefused, match="certificate verify failed"):
        async with connect(tls_bus.address(1), "IN", tls=wrong, reconnect=None):
            pass
    await _server_still_serves(tls_bus)


async def test_a_client_without_a_certificate_is_refused(tls_bus) -> None:
    """client_cert = "required" (what mrs certs writes): the CA alone is not enough."""
    no_cert = tls_context(ca=tls_bus.certs / "ca.pem")
    with pytest.raises(TlsRefused, match="TLS handshake with .* failed"):
        async with connect(tls_bus.address(1), "IN", tls=no_cert, reconnect=None):
            pass
    await _server_still_serves(tls_bus)
    assert "peer did not return a certificate" in tls_bus.log(1)
    # With credentials, the refusal surfaces in the SCRAM exchange (TLS 1.3 sends it
    # after the client's handshake is done): still TlsRefused, not a retried drop.
    with pytest.raises(TlsRefused, match="TLS handshake with .* failed"):
        credentials = ClientCredentials("shop", "any")
        async with connect(
            tls_bus.address(1), "IN", tls=no_cert, credentials=credentials, reconnect=None
        ):
            pass


async def test_a_plaintext_client_is_refused_without_harming_the_server(tls_bus) -> None:
    for _ in range(3):  # answered in plaintext, so it stops with a clear error
        with pytest.raises(MrsError, match="speaks TLS only") as refused:
            async with connect(tls_bus.address(1), "IN", connect_timeout_s=5):
                pass
        assert not isinstance(refused.value, ConnectionLost)  # not retried
    assert "a plaintext MRS client (answered: TLS only)" in tls_bus.log(1)
    # Raw junk and a half-open silent connection: each costs only its own handshake.
    host, port = tls_bus.address(1).rsplit(":", 1)
    async with await trio.open_tcp_stream(host, int(port)) as junk:
        await junk.send_all(b"GET / HTTP/1.0\r\n\r\n")
        with trio.fail_after(10):
            while await junk.receive_some(4096):
                pass
    await _server_still_serves(tls_bus)
    assert "TLS handshake from 127.0.0.1" in tls_bus.log(1)


async def test_a_certificate_of_the_ca_cannot_pose_as_a_group(tls_bus) -> None:
    """The client certificate is signed by the bus CA, but it does not name
    mrs-group-1: a link Hello claiming group 1 over it is refused."""
    await wait_link_up(tls_bus)
    host, port = tls_bus.address(2).rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    tls = trio.SSLStream(stream, tls_bus.client_tls(), server_hostname="mrs-group-2")
    connection = wire.Connection("client")
    async with tls:
        hello = wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1)
        await tls.send_all(connection.send(hello))
        events: list = []
        with trio.fail_after(10):
            while not events:
                data = await tls.receive_some(65536)
                connection.receive_data(data)
                events = [e for e in connection.events() if e is not wire.CLOSED]
                if not data:
                    break
    assert events and isinstance(events[0], wire.Fatal), events
    assert "certificate names" in events[0].message
    assert "link claims group 1 but its certificate names mrs-client" in tls_bus.log(2)
    await wait_link_up(tls_bus)  # the real link was not replaced


async def _server_still_serves(bus: TlsBus, **options: object) -> None:
    async with connect(bus.address(1), "OUT", tls=bus.client_tls(), **options) as client:
        psb = await client.put(b"still here", "1.11", delivery=DeliveryMode.WF_DQF)
        assert psb.status.name == "SUCCESS"
        message = await client.get(timeout=10)
        assert message.body == b"still here"
        await client.confirm(message.seq)


async def test_mrs_status_reads_a_tls_bus_from_its_config(tls_bus) -> None:
    """Operator tools reach a TLS group with the CA and certificate its config names."""
    await wait_link_up(tls_bus)
    result = await trio.to_thread.run_sync(
        lambda: mrs("status", "--config", str(tls_bus.config), "--json")
    )
    assert result.returncode == 0, result.stderr
    assert '"up": true' in result.stdout and '"error": null' in result.stdout
    assert result.stdout.count('"up": true') == 2


def test_a_group_whose_certificate_names_another_does_not_start(tmp_path) -> None:
    """Group 2 given a certificate of the bus CA that does not name mrs-group-2 (the
    client certificate): before, it served, and group 1 logged "certificate verify
    failed" for ever on its side. Now `mrs serve` refuses in one line naming the file
    and the name; group 1's dial check stays (`TlsNetwork`, for a stranger at the
    address)."""
    bus = TlsBus(tmp_path / "bus")
    text = bus.config.read_text()
    bus.config.write_text(
        text.replace('cert = "certs/group-2.pem"', 'cert = "certs/client.pem"').replace(
            'key = "certs/group-2.key"', 'key = "certs/client.key"'
        )
    )
    refused = subprocess.run(
        [sys.executable, "-m", "mrs", "serve", "--config", str(bus.config), "--group", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    (line,) = [line for line in refused.stderr.splitlines() if line.strip()]
    assert "client.pem does not name mrs-group-2" in line and "linked groups" in line, line
    unlinked = text.replace("\n[[link]]\ngroups = [1, 2]\n", "\n").replace(
        'cert = "certs/group-2.pem"', 'cert = "certs/client.pem"'
    ).replace('key = "certs/group-2.key"', 'key = "certs/client.key"')
    bus.config.write_text(unlinked)  # no peer verifies its name: it serves
    alone = GroupProcess(bus.config, 2)
    alone.start()  # READY, or it raises with the server's words
    alone.terminate()


async def test_silent_connections_cannot_pile_up_tls_handshakes(tls_bus) -> None:
    """Before TLS there is no session to count against the per-host limits: the
    handshakes in progress from one host are bounded, the oldest closed at once."""
    from mrs.security.tls import HANDSHAKES_PER_HOST_MAX

    host, port = tls_bus.address(1).rsplit(":", 1)
    extra = 6
    silent = [
        await trio.open_tcp_stream(host, int(port)) for _ in range(HANDSHAKES_PER_HOST_MAX + extra)
    ]
    closed_at_once = 0

    async def closed_soon(stream: trio.abc.Stream) -> None:
        nonlocal closed_at_once
        with trio.move_on_after(3):  # a bounded one waits 10 s for a ClientHello
            with contextlib.suppress(trio.BrokenResourceError):
                assert await stream.receive_some(1) == b""
            closed_at_once += 1

    try:
        async with trio.open_nursery() as nursery:  # which ones is up to the scheduler
            for stream in silent:
                nursery.start_soon(closed_soon, stream)
    finally:
        for stream in silent:
            await trio.aclose_forcefully(stream)
    assert closed_at_once == extra, closed_at_once
    assert (
        f"{HANDSHAKES_PER_HOST_MAX} handshakes from 127.0.0.1 in progress: "
        "the oldest gave way to a new connection"
    ) in tls_bus.log(1)
    with trio.fail_after(10):  # until the server has seen the silent ones close
        while True:
            try:
                await _server_still_serves(tls_bus)
                break
            except ConnectionLost:
                await trio.sleep(0.1)


async def _open_silent(address: str, source: str, count: int) -> list[trio.SocketStream]:
    """`count` TCP connections from `source` that never send a byte."""
    host, port = address.rsplit(":", 1)
    silent = []
    for _ in range(count):
        sock = trio.socket.socket()
        await sock.bind((source, 0))
        await sock.connect((host, int(port)))
        silent.append(trio.SocketStream(sock))
    return silent


async def _server_took(address: str, source: str) -> None:
    """Returns once the server has handled a junk connection opened now from
    `source`: it took in every connection accepted before it (one accept loop, in
    order), so the silent ones hold their handshake slots."""
    host, port = address.rsplit(":", 1)
    sock = trio.socket.socket()
    await sock.bind((source, 0))
    await sock.connect((host, int(port)))
    async with trio.SocketStream(sock) as junk:
        await junk.send_all(b"GET / HTTP/1.0\r\n\r\n")
        with trio.fail_after(10), contextlib.suppress(trio.BrokenResourceError):
            while await junk.receive_some(4096):
                pass


def _closed_now(streams: list[trio.SocketStream]) -> int:
    """How many of `streams` the server has closed (EOF or reset) by now: a peek
    that does not wait."""
    closed = 0
    for stream in streams:
        with socket.socket(fileno=os.dup(stream.socket.fileno())) as peek:
            try:
                closed += peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                pass  # open, nothing to read
            except ConnectionResetError:
                closed += 1
    return closed


async def test_silent_sockets_of_a_host_do_not_lock_its_clients_out(tls_bus) -> None:
    """A handshake slot cannot be held by idle sockets: with every slot of its host
    taken by silent connections, a client of that host still connects (the oldest
    silent one gives way) and delivers."""
    from mrs.security.tls import HANDSHAKES_PER_HOST_MAX

    address = tls_bus.address(1)
    silent = await _open_silent(address, "127.0.0.1", HANDSHAKES_PER_HOST_MAX)
    try:
        await _server_took(address, "127.0.0.2")
        async with connect(
            address, "OUT", tls=tls_bus.client_tls(), reconnect=None, connect_timeout_s=5
        ) as client:
            psb = await client.put(b"past the idle", "1.11", delivery=DeliveryMode.WF_DQF)
            assert psb.status.name == "SUCCESS"
            message = await client.get(timeout=10)
            assert message.body == b"past the idle"
            await client.confirm(message.seq)
        assert _closed_now(silent) == 1  # the oldest gave way, the others wait
    finally:
        for stream in silent:
            await trio.aclose_forcefully(stream)


async def test_silent_sockets_of_many_hosts_do_not_lock_everyone_out(tls_bus) -> None:
    """Every handshake slot of the group taken by silent connections from 16 hosts:
    a client from another host still connects and delivers."""
    from mrs.security.tls import HANDSHAKES_MAX, HANDSHAKES_PER_HOST_MAX

    address = tls_bus.address(1)
    hosts = HANDSHAKES_MAX // HANDSHAKES_PER_HOST_MAX
    silent: list[trio.SocketStream] = []
    try:
        for index in range(hosts):
            source = f"127.0.0.{10 + index}"
            silent += await _open_silent(address, source, HANDSHAKES_PER_HOST_MAX)
        await _server_took(address, "127.0.0.2")
        await _server_still_serves(tls_bus, reconnect=None, connect_timeout_s=5)
    finally:
        for stream in silent:
            await trio.aclose_forcefully(stream)


async def test_tools_take_tls_from_the_environment(tls_bus, tmp_path) -> None:
    """MRS_TLS_* at the CLI edge: `mrs status --address` (no config to read) over TLS;
    a file that does not load is one line, exit 2."""
    certs = tls_bus.certs
    env = {
        "MRS_TLS_CA": str(certs / "ca.pem"),
        "MRS_TLS_CERT": str(certs / "client.pem"),
        "MRS_TLS_KEY": str(certs / "client.key"),
    }

    def status(extra: dict) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "mrs", "status", "--address", tls_bus.address(1), "--json"],
            capture_output=True,
            text=True,
            env={**os.environ, **extra},
        )

    good = await trio.to_thread.run_sync(status, env)
    assert good.returncode == 0 and '"name": "G1"' in good.stdout, good.stderr
    missing = await trio.to_thread.run_sync(
        status, {**env, "MRS_TLS_KEY": str(tmp_path / "no.key")}
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert f"MRS_TLS_KEY={tmp_path / 'no.key'}: no such file" in missing.stderr
    bad = await trio.to_thread.run_sync(status, {**env, "MRS_TLS_CA": str(certs / "ca.key")})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "MRS_TLS_*: cannot load" in bad.stderr
    plain = await trio.to_thread.run_sync(status, {})
    assert plain.returncode == 1 and '"name": "G1"' not in plain.stdout
    assert "REFUSED" in plain.stderr and "TLS only" in plain.stderr, plain.stderr
    assert "mrs serve" not in plain.stderr and "MRS_TLS_CA" in plain.stderr


def test_tls_files_that_cannot_be_loaded_are_one_badparam_line(tmp_path) -> None:
    """Before: FileNotFoundError naming no file, or ssl.SSLError."""
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate")
    for ca, words in ((tmp_path / "missing.pem", "No such file"), (not_pem, "no certificate")):
        with pytest.raises(BadParameter) as refused:
            tls_context(ca=ca)
        assert f"tls_context: cannot load {ca}: " in str(refused.value)
        assert words in str(refused.value)
