"""docs/links.md's example: an MRS_ACK owed to another group's queue survives a kill -9
of the group that owes it while the link is down, and arrives once.

    python docs/examples/remote_acks.py [DIRECTORY]

Writes a two-group bus into DIRECTORY (default: a scratch directory) and starts only
group 1, so its link to group 2 is down. An AK_DQF put in group 1 names group 2's
REPLIES queue as its response queue: the message is stored, and the MRS_ACK it owes
waits in group 1's journal. Group 1 is killed (SIGKILL) and started again; then
group 2 starts, the link comes up, and REPLIES gets the MRS_ACK, once.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import trio

from clients import DeliveryMode, NoMoreMessages, connect
from sim.ports import free_port

QUEUES = {1: [(10, "ORDERS")], 2: [(12, "REPLIES")]}


def write_bus(directory: Path) -> Path:
    text = ""
    for group_id, queues in QUEUES.items():
        text += textwrap.dedent(f"""\
            [[group]]
            id = {group_id}
            name = "G{group_id}"
            listen = "127.0.0.1:{free_port()}"
            data_dir = "g{group_id}"
            """)
        for queue_id, name in queues:
            text += f'[[group.queue]]\nid = {queue_id}\nname = "{name}"\n'
    text += "[[link]]\ngroups = [1, 2]\n"
    path = directory / "bus.toml"
    path.write_text(text)
    return path


def serve(config: Path, group: int) -> tuple[subprocess.Popen, str]:
    """`mrs serve` in the background; returns the process and its HOST:PORT."""
    log = open(config.parent / f"group{group}.log", "ab")  # noqa: SIM115 - the child's
    server = subprocess.Popen(
        [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", str(group)],
        stdout=subprocess.PIPE,
        stderr=log,
    )
    ready = server.stdout.readline().decode().split()
    if ready[:1] != ["READY"]:
        sys.exit(f"group {group} did not start: see {log.name}")
    return server, ready[1]


async def acks_owed(address: str) -> int:
    """What `mrs status --json` shows as links.2.mrs_acks_owed."""
    async with connect(address, None) as client:
        return (await client.status())["links"]["2"]["mrs_acks_owed"]


async def wait_for(address: str, owed: int) -> None:
    with trio.fail_after(30):
        while await acks_owed(address) != owed:
            await trio.sleep(0.05)


async def main(directory: Path) -> None:
    config = write_bus(directory)
    servers = []
    try:
        group1, address1 = serve(config, 1)
        servers.append(group1)
        async with connect(address1, "ORDERS") as sender:
            psb = await sender.put(
                b"order 1", target="1.10", delivery=DeliveryMode.AK_DQF, resp_q="2.12"
            )
        print(f"AK_DQF put answered: seq {psb.seq}")
        await wait_for(address1, 1)
        print("group 1 owes 1 MRS_ACK to group 2 (link down)")
        group1.kill()  # SIGKILL: no shutdown code runs
        group1.wait()
        group1, address1 = serve(config, 1)
        servers.append(group1)
        print(f"after kill -9 and restart, group 1 still owes {await acks_owed(address1)}")
        group2, address2 = serve(config, 2)
        servers.append(group2)
        async with connect(address2, "REPLIES") as replies:
            ack = await replies.get(timeout=30)
            psb_acked = ack.ack_psb()
            print(
                f"REPLIES got the MRS_ACK for seq {psb_acked.seq}: {psb_acked.delivery_status.name}"
            )
            await wait_for(address1, 0)
            try:
                await replies.get(timeout=0)
                print("a second copy arrived")
            except NoMoreMessages:
                print("no second copy; group 1 owes 0")
    finally:
        for server in servers:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        trio.run(main, Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as scratch:
            trio.run(main, Path(scratch))
