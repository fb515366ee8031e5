"""A replicated group with `[group.tls]`: its instances speak TLS to each other over the
replication link, each proving it holds the group's certificate, and a stranger who
reaches a replica's replication address can neither stream to it nor fence the active
off. Real processes: etcd, three `mrs serve --instance`, certificates from `mrs certs`.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import trio

from clients import DeliveryMode, connect, instance_addresses, tls_context
from mrs.config.bus import load_config
from mrs.model import Status
from mrs.replication.wire import frame
from mrs.tools.certs import make_certs
from sim.etcd import wait_active
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config
from tests.process.test_replication import wait_in_sync

__all__ = ["etcd"]  # the fixture, used by name

TLS_TABLE = (
    '[group.tls]\nca = "certs/ca.pem"\ncert = "certs/group-1.pem"\nkey = "certs/group-1.key"\n'
)


def tls_group(directory: Path, endpoint: str) -> Path:
    """A three-instance group with `[group.tls]` and the certificates it names."""
    config = write_replicated_config(directory, endpoint, STANDARD_QUEUES)
    named = config.rename(config.with_name(f"bus_{directory.name}.toml"))
    make_certs(load_config(named), directory / "certs")
    text = named.read_text()
    at = text.index("[[group.instance]]")
    named.write_text(f"{text[:at]}{TLS_TABLE}\n{text[at:]}")
    return named


def stranger_hello(port: int, context: ssl.SSLContext | None) -> bytes:
    """Dial a replica's replication address as an active of a far newer term would,
    plain or over TLS with `context`; what came back before the replica closed."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        conn = raw if context is None else context.wrap_socket(raw, server_hostname="mrs-group-1")
        conn.sendall(frame({"t": "hello", "group": 1, "term": 10**6, "from": "stranger"}))
        received = b""
        while chunk := conn.recv(4096):
            received += chunk
        return received
    except (ssl.SSLError, ConnectionError):
        return b""
    finally:
        raw.close()


def test_instances_speak_tls_to_each_other_and_refuse_a_stranger(etcd, tmp_path) -> None:
    config = tls_group(tmp_path, etcd.endpoint)
    certs = tmp_path / "certs"
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    try:
        for process in processes.values():
            process.start()
        active = wait_active(processes, 30)
        replica = next(name for name in processes if name != active)
        bus = load_config(config)
        port = bus.group(1).instance(replica).replication_port
        client_tls = tls_context(certs / "ca.pem")

        async def in_sync_then_put(body: bytes) -> int:
            async with connect(instance_addresses(config, "NYC"), "ORDERS", tls=client_tls) as q:
                await wait_in_sync(q, {"a", "b", "c"})  # both replicas acknowledge over TLS
                psb = await q.put(body, "ORDERS", delivery=DeliveryMode.WF_DQF)
                assert psb.delivery_status == Status.STORED
                return psb.seq

        trio.run(in_sync_then_put, b"before")
        # a plain dial, and a TLS dial with a certificate of the CA that is not the group's
        plain = stranger_hello(port, None)
        other = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(certs / "ca.pem"))
        other.load_cert_chain(str(certs / "client.pem"), str(certs / "client.key"))
        with_client_cert = stranger_hello(port, other)
        assert plain == b"" and with_client_cert == b""  # no hello answered, nothing taken
        trio.run(in_sync_then_put, b"after")  # the term was not raised: the active answers
    finally:
        for process in processes.values():
            process.terminate()
    log = (config.parent / f"{replica}.log").read_text()
    refusals = [line for line in log.splitlines() if "replication link from 127.0.0.1" in line]
    assert len(refusals) == 2, refusals
    assert "its certificate names mrs-client, not mrs-group-1" in refusals[1]
