"""Authentication and TLS probed as an attacker meets them (thirty-third session):
whether a clock tells an unknown name from a known one, what a client with
credentials is told at a TLS-only port it reached without TLS, and the status of a
link Hello whose certificate does not name the group it claims. The group's own
`Authority` over a memory stream, its TLS listener on a real TCP port, and one real
`mrs serve` where the answer of the whole server is the point."""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio
import trio.testing

from clients import ClientCredentials, ProtocolFailure, connect
from mrs import protocol as wire
from mrs.config.auth import AuthConfig
from mrs.model import Status
from mrs.security import creds as store
from mrs.security import handshake, scram
from mrs.security.authority import Authority
from mrs.security.permissions import NONE
from mrs.security.tls import PLAINTEXT_REFUSAL, TlsNetwork
from tests.process.test_tls import TlsBus

ITERATIONS = scram.ITERATIONS_MIN
PRINCIPALS = 20_000
"""A large file: the time an unknown name's decoy took grew with it (0.4 ms per
2,000 principals in a file without `decoy_key`)."""
TRIES = 15


def _authority(tmp_path: Path) -> Authority:
    """A group's Authority whose file has PRINCIPALS principals and no decoy_key (a
    file written before it existed: its decoys come from a digest of the verifiers)."""
    creds = store.Credentials()
    store.add(creds, "app", "pw", NONE, ITERATIONS)
    store.save(tmp_path / "creds.toml", creds)
    authority = Authority(AuthConfig(tmp_path / "creds.toml", tmp_path / "secrets"), 1, ())
    app = authority.creds.principals["app"]
    many = {f"app{n}": replace(app, name=f"app{n}") for n in range(PRINCIPALS)}
    authority.creds = replace(authority.creds, principals={**many, "app": app}, decoy_key=None)
    return authority


async def _challenge_s(authority: Authority, name: str) -> float:
    """Seconds from a client's hello to the group's challenge for `name`."""
    client, server = trio.testing.memory_stream_pair()
    reader = handshake.FrameReader(client)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(authority.accept, server)
        started = time.perf_counter()
        await client.send_all(handshake.encode({"auth": 1, "name": name, "nonce": b"n" * 24}))
        await reader.frame()
        taken = time.perf_counter() - started
        nursery.cancel_scope.cancel()
    return taken


async def test_an_unknown_names_challenge_comes_as_soon_as_a_known_ones(tmp_path: Path) -> None:
    """Defect: docs/security-auth.md says an unknown name and a wrong password cannot be
    told apart. An unknown name's decoy salt and rounds were worked out per name from
    the whole file (its principals' rounds sorted; without a `decoy_key`, a digest of
    every verifier), so its challenge came later than a known name's by a time that
    grew with the file: 4 ms here, a clock's way to probe names. The file's part is
    now worked out once per load, and every name, known or not, takes the same steps."""
    authority = _authority(tmp_path)
    known, unknown = [], []
    for attempt in range(TRIES):
        known.append(await _challenge_s(authority, "app"))
        unknown.append(await _challenge_s(authority, f"nobody{attempt}"))
    gap_s = statistics.median(unknown) - statistics.median(known)
    assert gap_s < 0.001, f"an unknown name's challenge came {gap_s * 1e3:.2f} ms later"


async def test_a_client_with_credentials_at_a_tls_port_is_told_to_use_tls() -> None:
    """Defect: a client with credentials but without TLS, at a group with
    `[group.tls]` and `[auth]`, was told "the server does not take authentication
    (this group speaks TLS only ...)": auth is on there, and the first half sent the
    operator after the wrong setting. It is told what a client without credentials
    is told: that the group speaks TLS only, and how to connect."""
    config = SimpleNamespace(server_context=lambda: None, dial_context=lambda: None)
    network = TlsNetwork(config, {})  # the plaintext refusal comes before any TLS work

    async def never_reached(stream: trio.abc.Stream) -> None:
        raise AssertionError("a plaintext client reached the handler")

    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(network.serve, never_reached, "127.0.0.1", 0)
        credentials = ClientCredentials("app", "pw")
        with pytest.raises(ProtocolFailure) as refused:
            await connect(f"{host}:{port}", "1.10", credentials=credentials).__aenter__()
        nursery.cancel_scope.cancel()
    assert refused.value.message == PLAINTEXT_REFUSAL


async def test_a_link_hello_over_a_certificate_naming_another_is_not_authorized(
    tmp_path: Path,
) -> None:
    """Defect: a link Hello claiming group 1 over the bus's client certificate (it
    names mrs-client, not mrs-group-1) was answered PROTOCOL_ERROR, as if the
    peer had broken the protocol; it is refused NOTAUTHORIZED, the answer of a link
    Hello from whoever cannot prove it is that group."""
    bus = TlsBus(tmp_path / "bus")
    group = bus.processes[2]  # group 1, the dialer, is not needed: the claim is refused
    group.start()
    try:
        host, port = group.address.rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        tls = trio.SSLStream(stream, bus.client_tls(), server_hostname="mrs-group-2")
        connection = wire.Connection("client")
        events: list = []
        async with tls:
            await tls.send_all(connection.send(wire.Hello(wire.PROTOCOL_VERSION, "x", "link", 1)))
            with trio.fail_after(10):
                while not events and (data := await tls.receive_some(65536)):
                    connection.receive_data(data)
                    events = [e for e in connection.events() if e is not wire.CLOSED]
    finally:
        group.terminate()
    assert isinstance(events[0], wire.Fatal), events
    assert events[0].status == Status.NOTAUTHORIZED, events[0]
    assert "certificate names mrs-client" in events[0].message
