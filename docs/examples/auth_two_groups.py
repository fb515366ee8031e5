"""A two-group bus with authentication and per-queue permissions (docs/security-auth.md).

Run:  python docs/examples/auth_two_groups.py
It makes a scratch directory, writes the config, makes the credentials with
`mrs creds`, starts both groups with `mrs serve`, then shows what is allowed and
what is refused.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import trio

from clients import ClientCredentials, DeliveryMode, NoSuchQueue, NotAuthorized, Uma, connect
from sim.ports import free_port


def mrs(*argv: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mrs", *argv], input=stdin, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"mrs {' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


def write_config(directory: Path, ports: dict[int, int]) -> Path:
    groups = "".join(
        textwrap.dedent(f"""\
        [[group]]
        id = {group}
        name = "G{group}"
        listen = "127.0.0.1:{ports[group]}"
        data_dir = "g{group}"
        [[group.queue]]
        id = 10
        name = "ORDERS"
        [[group.queue]]
        id = 20
        name = "BILLING"

        """)
        for group in (1, 2)
    )
    config = directory / "bus.toml"
    config.write_text(
        groups
        + "[[link]]\ngroups = [1, 2]\n\n"
        + '[auth]\ncredentials = "creds.toml"\nlink_secrets = "secrets"\n'
    )
    return config


def make_credentials(config: Path) -> None:
    for group in (1, 2):  # each group's link secret (secrets/group-N.secret) + verifier
        mrs("creds", "add-group", str(group), "--config", str(config))
    mrs("creds", "add", "shop", "--config", str(config), "--password-stdin",
        "--attach", "1.10", "--put", "2.10", stdin="shop-password\n")  # fmt: skip
    mrs("creds", "add", "warehouse", "--config", str(config), "--password-stdin",
        "--attach", "2.10", "--confirm", "2.10", stdin="warehouse-password\n")  # fmt: skip
    mrs("creds", "add", "billing", "--config", str(config), "--password-stdin",
        "--attach", "2.20", "--confirm", "2.20", stdin="billing-password\n")  # fmt: skip
    mrs("creds", "add", "operator", "--config", str(config), "--password-stdin",
        "--admin", "status", stdin="operator-password\n")  # fmt: skip


def start(config: Path, group: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", str(group)],
        stdout=subprocess.PIPE,
        stderr=(config.parent / f"group{group}.log").open("w"),
    )
    line = server.stdout.readline().decode()
    assert line.startswith("READY"), line
    return server


async def show(ports: dict[int, int], config: Path) -> None:
    group1, group2 = (f"127.0.0.1:{ports[g]}" for g in (1, 2))
    shop = ClientCredentials("shop", "shop-password")
    operator = ClientCredentials("operator", "operator-password")
    async with connect(group1, None, credentials=operator) as ops:
        with trio.fail_after(20):  # the link authenticates both ways, then comes up
            while (await ops.status())["links"]["2"]["state"] != "up":
                await trio.sleep(0.05)
        print("link 1-2: up (each group proved which group it is)")
    async with connect(group1, "1.10", credentials=shop) as client:
        psb = await client.put(b"order 1", target="2.10", delivery=DeliveryMode.WF_DQF,
                               uma=Uma.SAF)  # fmt: skip
        print(f"shop put to 2.10: {psb.delivery_status.name}")
        try:
            await client.put(b"sneaky", target="2.20", delivery=DeliveryMode.WF_MEM, uma=Uma.DISC)
        except NotAuthorized as refused:
            print(f"shop put to 2.20: {refused.status.name}")
        try:
            await client.status()
        except NotAuthorized as refused:
            print(f"shop asks for status: {refused.status.name}")
        try:  # RTS would put its body on 1.20, so 1.20 must be granted too
            await client.put(b"forged", target="2.10", delivery=DeliveryMode.WF_MEM,
                             uma=Uma.RTS, resp_q="1.20")  # fmt: skip
        except NotAuthorized as refused:
            print(f"shop names 1.20 as its response queue: {refused.status.name}")
        try:
            await client.put(b"lost", target="NOWHERE", delivery=DeliveryMode.WF_MEM, uma=Uma.DISC)
        except NoSuchQueue as refused:  # no queue names, no paths without the status right
            print(f"shop put to NOWHERE: {refused.status.name}: {refused.message}")
    warehouse = ClientCredentials("warehouse", "warehouse-password")
    async with connect(group2, "2.10", credentials=warehouse) as client:
        message = await client.get(timeout=10)
        await client.confirm(message.seq)
        print(f"warehouse got and confirmed: {message.body.decode()}")
    for name, credentials in (
        ("billing on ORDERS", ClientCredentials("billing", "billing-password")),
        ("no credentials", None),
        ("wrong password", ClientCredentials("warehouse", "guess")),
    ):
        try:
            async with connect(group2, "2.10", credentials=credentials, reconnect=None):
                pass
        except NotAuthorized as refused:
            print(f"attach 2.10 with {name}: {refused.status.name}")
    await revoke_while_waiting(group2, config)


async def revoke_while_waiting(group2: str, config: Path) -> None:
    """`mrs creds remove` while warehouse waits for a message: the wait ends at once."""
    warehouse = ClientCredentials("warehouse", "warehouse-password")
    async with connect(group2, "2.10", credentials=warehouse) as client:

        async def wait_for_an_order() -> None:
            try:
                await client.get(timeout=30)
            except NotAuthorized as refused:
                print(f"warehouse removed while it waits: {refused.status.name}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_an_order)
            remove = ("creds", "remove", "warehouse", "--config", str(config))
            await trio.to_thread.run_sync(lambda: mrs(*remove))


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        ports = {1: free_port(), 2: free_port()}
        config = write_config(directory, ports)
        make_credentials(config)
        servers = [start(config, group) for group in (1, 2)]
        try:
            trio.run(show, ports, config)
        finally:
            for server in servers:
                server.terminate()
                server.wait(timeout=30)


if __name__ == "__main__":
    main()
