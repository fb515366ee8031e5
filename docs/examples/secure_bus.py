"""docs/security.md's worked example: TLS and end-to-end protection on a two-group bus.

    python docs/examples/secure_bus.py [DIRECTORY]

Writes a two-group bus config into DIRECTORY (default: a scratch directory), runs
`mrs certs --apply` on it (TLS), makes keys for two applications with `mrs keys
new` and a privacy policy for LDN.SHIPPING (AMS-style protection), starts both
groups with `mrs serve`, and shows that: SHOP's message crosses the TLS link sealed,
`mrs dump` of LDN's journal sees only the envelope, BILLING reads it; a client that
trusts another CA and a plaintext client are refused.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import trio

from clients import ConnectionLost, DeliveryMode, Protection, TlsRefused, connect, tls_context

POLICIES = """\
keys_dir = "keys"

[[policy]]
queue = "LDN.SHIPPING"      # group 2's queue 20
protection = "privacy"      # signed by SHOP, encrypted for BILLING
signers = ["SHOP"]
recipients = ["BILLING"]
"""


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
    # Step 2: each application makes its own keys; the policy file names who may do what.
    for name in ("SHOP", "BILLING"):
        mrs("keys", "new", name, "--out", str(directory / "keys"))
    (directory / "protection.toml").write_text(POLICIES)
    servers = [serve(config, group) for group in (1, 2)]
    try:
        await exchange(directory, servers[0][1], servers[1][1])
    finally:
        for server, _ in servers:
            server.terminate()
            server.wait()


FULL = ("--json", "--body-full")


def record_body(json_line: str) -> bytes:
    """The body of one `mrs dump --json --body-full` line ("hex:..." or text)."""
    body = json.loads(json_line)["body"]
    return bytes.fromhex(body[4:]) if body.startswith("hex:") else body.encode()


def keys_of(directory: Path, name: str) -> Protection:
    return Protection.load(
        directory / "protection.toml",
        identity=directory / "keys" / f"{name}.key",
        bus_config=directory / "bus.toml",
    )


async def exchange(directory: Path, nyc: str, ldn: str) -> None:
    certs = directory / "certs"
    tls = tls_context(ca=certs / "ca.pem", cert=certs / "client.pem", key=certs / "client.key")
    async with connect(nyc, "ORDERS", tls=tls, protection=keys_of(directory, "SHOP")) as shop:
        with trio.fail_after(30):  # the groups dial each other over TLS
            while (await shop.status())["links"]["2"]["state"] != "up":
                await trio.sleep(0.1)
        print("link 1 -> 2 is up over TLS (each side checked the other's certificate)")
        body = b"order 1: 12 crates, card 4111"
        psb = await shop.put(body, "LDN.SHIPPING", delivery=DeliveryMode.WF_DQF)
        print(f"SHOP put over TLS, sealed for BILLING: {psb.status.name}")
    # What the group holds (and `mrs dump`, the PCJ audit, an operator) is the envelope.
    dump = mrs("dump", "--config", str(directory / "bus.toml"), "--group", "2", "dqf", *FULL)
    stored = [record_body(line) for line in dump.splitlines() if line.startswith("{")]
    print(
        f"mrs dump of LDN's DQF: {len(stored)} record, an envelope ({stored[0][:8].decode()}), "
        f"card number readable: {b'4111' in stored[0]}"
    )
    async with connect(
        ldn, "SHIPPING", tls=tls, protection=keys_of(directory, "BILLING")
    ) as billing:
        message = await billing.get(timeout=10)
        await billing.confirm(message.seq)
        signer = message.headers["mrs_protection"]["signer"]
        print(f"BILLING at LDN.SHIPPING read: {message.body.decode()} (signed by {signer})")

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
