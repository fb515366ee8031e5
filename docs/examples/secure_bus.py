"""docs/security.md's worked example: auth, permissions, TLS and end-to-end protection
on a two-group bus.

    python docs/examples/secure_bus.py [DIRECTORY]

Writes a two-group bus config into DIRECTORY (default: a scratch directory) and
turns security on with the shell commands an operator would use: `mrs certs
--apply` (TLS), `mrs creds` (a link secret per group, a password and grants per
application), `mrs keys new` and a policy file (AMS-style protection). Then it
starts both groups with `mrs serve` and shows that SHOP's order crosses the TLS
link sealed, `mrs dump` of LDN's journal sees only the envelope, BILLING reads it;
and that SHOP reading BILLING's queue, a wrong password, a client trusting another
CA and a plaintext client are each refused.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import trio

from clients import (
    ClientCredentials,
    DeliveryMode,
    MrsError,
    NotAuthorized,
    Protection,
    TlsRefused,
    connect,
    tls_context,
)
from sim.ports import free_port

POLICIES = """\
keys_dir = "keys"

[[policy]]
queue = "LDN.SHIPPING"      # group 2's queue 20
protection = "privacy"      # signed by SHOP, encrypted for BILLING
signers = ["SHOP"]
recipients = ["BILLING"]
"""
APPLICATIONS = {  # principal -> grants (mrs creds add NAME --config bus.toml ...)
    "shop": ["--attach", "1.10", "--put", "2.20"],
    "billing": ["--attach", "2.20", "--confirm", "2.20", "--admin", "dlq"],  # moves refusals
    "operator": ["--admin", "status"],
}


def write_bus(directory: Path) -> Path:
    """Two groups, NYC (1) and LDN (2), one queue each, linked; auth on."""
    text = '[auth]\ncredentials = "creds.toml"\nlink_secrets = "secrets"\n\n'
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


def password_file(directory: Path, name: str) -> Path:
    """A generated password in an owner-only file (what the application is given)."""
    path = directory / f"{name}.pw"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(secrets.token_urlsafe(24))
    return path


def turn_security_on(directory: Path, config: Path) -> None:
    # 1. TLS: a test CA, a certificate per group and one for clients; [group.tls].
    print(mrs("certs", "--config", str(config), "--out", str(directory / "certs"), "--apply"))
    # 2. Authentication and permissions: link secrets, then each application.
    for group in ("1", "2"):
        mrs("creds", "add-group", group, "--config", str(config))
    for name, grants in APPLICATIONS.items():
        pw = str(password_file(directory, name))
        mrs("creds", "add", name, "--config", str(config), "--password-file", pw, *grants)
    # 3. End-to-end protection: each application's keys, and the policy.
    for name in ("SHOP", "BILLING"):
        mrs("keys", "new", name, "--out", str(directory / "keys"))
    (directory / "protection.toml").write_text(POLICIES)


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
    turn_security_on(directory, config)
    servers = [serve(config, group) for group in (1, 2)]
    try:
        await exchange(Session(directory), servers[0][1], servers[1][1])
    finally:
        for server, _ in servers:
            server.terminate()
            server.wait()


class Session:
    """What each application holds: the TLS context, its password, its keys."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        certs = directory / "certs"
        self.tls = tls_context(certs / "ca.pem", certs / "client.pem", certs / "client.key")

    def credentials(self, name: str) -> ClientCredentials:
        return ClientCredentials.from_file(name, self.directory / f"{name}.pw")

    def options(self, name: str) -> dict:
        options = {"tls": self.tls, "credentials": self.credentials(name)}
        if name in ("shop", "billing"):
            options["protection"] = Protection.load(
                self.directory / "protection.toml",
                identity=self.directory / "keys" / f"{name.upper()}.key",
                bus_config=self.directory / "bus.toml",
            )
        return options


async def exchange(session: Session, nyc: str, ldn: str) -> None:
    async with connect(nyc, None, **session.options("operator")) as operator:
        with trio.fail_after(30):  # the groups prove to each other who they are
            while (await operator.status())["links"]["2"]["state"] != "up":
                await trio.sleep(0.1)
    print("link 1 -> 2 is up: TLS (certificates) and link credentials checked both ways")
    async with connect(nyc, "ORDERS", **session.options("shop")) as shop:
        body = b"order 1: 12 crates, card 4111"
        psb = await shop.put(body, "LDN.SHIPPING", delivery=DeliveryMode.WF_DQF)
        print(f"shop put over TLS, sealed for BILLING: {psb.status.name}")
    show_what_the_group_holds(session.directory)
    async with connect(ldn, "SHIPPING", **session.options("billing")) as billing:
        message = await billing.get(timeout=10)
        await billing.confirm(message.seq)
        signer = message.headers["mrs_protection"]["signer"]
        print(f"billing at LDN.SHIPPING read: {message.body.decode()} (signed by {signer})")
    await show_refusals(session, nyc, ldn)


def show_what_the_group_holds(directory: Path) -> None:
    """`mrs dump` reads the journal files (owner-only): the body is the envelope."""
    bus = str(directory / "bus.toml")
    dump = mrs("dump", "--config", bus, "--group", "2", "dqf", "--json", "--body-full")
    stored = [record_body(line) for line in dump.splitlines() if line.startswith("{")]
    print(
        f"mrs dump of LDN's DQF: {len(stored)} record, an envelope ({stored[0][:8].decode()}), "
        f"card number readable: {b'4111' in stored[0]}"
    )


def record_body(json_line: str) -> bytes:
    """The body of one `mrs dump --json --body-full` line ("hex:..." or text)."""
    body = json.loads(json_line)["body"]
    return bytes.fromhex(body[4:]) if body.startswith("hex:") else body.encode()


async def show_refusals(session: Session, nyc: str, ldn: str) -> None:
    try:  # shop's password and certificate are fine, but it has no grant on SHIPPING
        async with connect(ldn, "SHIPPING", reconnect=None, **session.options("shop")):
            pass
    except NotAuthorized as refused:
        print(f"shop attaching LDN.SHIPPING: {refused.status.name}")
    wrong = {"tls": session.tls, "credentials": ClientCredentials("shop", "guess")}
    try:
        async with connect(nyc, "ORDERS", reconnect=None, **wrong):
            pass
    except NotAuthorized as refused:
        print(f"a wrong password: {refused.status.name}")
    other_ca = tls_context(ca=session.directory / "certs" / "group-1.pem")
    try:
        async with connect(nyc, "ORDERS", tls=other_ca, reconnect=None):
            pass
    except TlsRefused as refused:
        print(f"a client trusting another CA: refused ({refused.message})")
    try:
        async with connect(nyc, "ORDERS", reconnect=None):
            pass
    except MrsError as refused:
        print(f"a plaintext client: {refused.message}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        target = Path(sys.argv[1])
        target.mkdir(parents=True, exist_ok=True)
        trio.run(main, target)
    else:
        with tempfile.TemporaryDirectory(prefix="mrs-secure-") as scratch:
            trio.run(main, Path(scratch))
