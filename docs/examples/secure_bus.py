"""docs/security.md's worked example: a two-group bus with TLS turned on in one step.

    python docs/examples/secure_bus.py [DIRECTORY]

Writes a two-group bus config into DIRECTORY (default: a scratch directory), runs
`mrs certs --apply` on it, starts both groups with `mrs serve`, and shows that
a client holding the client certificate delivers across the TLS link, while a
client that trusts another CA and a plaintext client are refused.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import trio

from clients import ConnectionLost, DeliveryMode, TlsRefused, connect, tls_context


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_bus(directory: Path) -> Path:
    """Two groups, NYC (1) and LDN (2), one queue each, linked."""
    text = ""
    for group_id, name, queue in ((1, "NYC", "ORDERS"), (2, "LDN", "SHIPPING")):
        text += textwrap.dedent(f"""\
            [[group]]
            id = {group_id}
            name = "{name}"
            listen = "127.0.0.1:{free_port()}"
            data_dir = "g{group_id}"
            [[group.queue]]
            id = {group_id}0
            name = "{queue}"
            confirm = "explicit-out-of-order"

            """)
    text += "[[link]]\ngroups = [1, 2]\n"
    path = directory / "bus.toml"
    path.write_text(text)
    return path


def mrs(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "mrs", *args], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        sys.exit(f"mrs {args[0]} failed: {result.stderr.strip()}")
    return result.stdout


def serve(config: Path, group: int) -> tuple[subprocess.Popen, str]:
    """`mrs serve` in the background; returns the process and its HOST:PORT."""
    log = open(config.parent / f"group{group}.log", "wb")  # noqa: SIM115 - the child's
    server = subprocess.Popen(
        [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", str(group)],
        stdout=subprocess.PIPE,
        stderr=log,
    )
    ready = server.stdout.readline().decode().split()
    if ready[:1] != ["READY"]:
        sys.exit(f"group {group} did not start: see {log.name}")
    return server, ready[1]


async def main(directory: Path) -> None:
    config = write_bus(directory)
    # Step 1: the one step that turns TLS on (test CA; use your own in production).
    print(mrs("certs", "--config", str(config), "--out", str(directory / "certs"), "--apply"))
    servers = [serve(config, group) for group in (1, 2)]
    try:
        await exchange(directory, servers[0][1], servers[1][1])
    finally:
        for server, _ in servers:
            server.terminate()
            server.wait()


async def exchange(directory: Path, nyc: str, ldn: str) -> None:
    certs = directory / "certs"
    tls = tls_context(ca=certs / "ca.pem", cert=certs / "client.pem", key=certs / "client.key")
    async with connect(nyc, "ORDERS", tls=tls) as sender:
        with trio.fail_after(30):  # the groups dial each other over TLS
            while (await sender.status())["links"]["2"]["state"] != "up":
                await trio.sleep(0.1)
        print("link 1 -> 2 is up over TLS (each side checked the other's certificate)")
        psb = await sender.put(b"order 1: 12 crates", "LDN.SHIPPING", delivery=DeliveryMode.WF_DQF)
        print(f"put over TLS: {psb.status.name}")
    async with connect(ldn, "SHIPPING", tls=tls) as receiver:
        message = await receiver.get(timeout=10)
        await receiver.confirm(message.seq)
        print(f"LDN.SHIPPING received over TLS: {message.body.decode()}")

    other = tls_context(ca=certs / "group-1.pem")  # not the CA that signed the servers
    try:
        async with connect(nyc, "ORDERS", tls=other, reconnect=None):
            pass
    except TlsRefused as refused:
        print(f"a client trusting another CA: refused ({refused.message})")
    try:
        async with connect(nyc, "ORDERS", reconnect=None):
            pass
    except ConnectionLost:
        print("a plaintext client: refused at the TLS handshake")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        target = Path(sys.argv[1])
        target.mkdir(parents=True, exist_ok=True)
        trio.run(main, target)
    else:
        with tempfile.TemporaryDirectory(prefix="mrs-secure-") as scratch:
            trio.run(main, Path(scratch))
