"""Rotating a recipient's key: what was sealed for BILLING's old key still opens.

Run against the example group: `python docs/examples/key_rotation.py 127.0.0.1:7001`
(docs/security-protection.md, "Rotating a key", explains each step).
"""

import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from clients import DeliveryMode, Protection, connect

POLICIES = """
keys_dir = "keys"

[[policy]]
queue = "1.10"              # ORDERS of group 1 (NYC)
protection = "privacy"
signers = ["SHOP"]
recipients = ["BILLING"]
"""


def mrs_keys(*args: str) -> None:
    """`mrs keys ...`, as an operator types it."""
    subprocess.run([sys.executable, "-m", "mrs", "keys", *args], check=True, capture_output=True)


async def main(address: str, scratch: Path) -> None:
    keys = str(scratch / "keys")
    for name in ("SHOP", "BILLING"):
        mrs_keys("new", name, "--out", keys)
    (scratch / "protection.toml").write_text(POLICIES)

    def keys_of(name: str) -> Protection:
        return Protection.load(scratch / "protection.toml", identity=scratch / f"keys/{name}.key")

    shop = keys_of("SHOP")
    async with connect(address, queue="SENDER", protection=shop) as sender:
        await sender.put(b"order 17", target="1.10", delivery=DeliveryMode.WF_DQF)  # old key
        mrs_keys("rotate", "BILLING", "--out", keys)  # new BILLING.key and BILLING.pub
        await sender.put(b"order 18", target="1.10", delivery=DeliveryMode.WF_DQF)  # new key

    async with connect(address, queue="ORDERS", protection=keys_of("BILLING")) as billing:
        for _ in range(2):
            message = await billing.get(timeout=5)
            print("BILLING read:", message.body)
            await message.confirm()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        trio.run(main, sys.argv[1], Path(scratch))
