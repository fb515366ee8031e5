"""Rotating a recipient's key: what was sealed for BILLING's old key still opens.

Run against the example group: `python docs/examples/key_rotation.py 127.0.0.1:7001`
(docs/security-protection.md, "Rotating a key", explains each step).

Its gets select its own two messages (a correlation id made for this run), so what
other pages' examples left on ORDERS is neither taken nor in its way: a plain get took
the oldest message on ORDERS, refused it to the DLJ (it was not sealed for this run's
policy) and stopped with a traceback.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from clients import DeliveryMode, Protection, connect
from mrs.core.selection import by_correlation_id

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

    run = os.urandom(4).hex()  # this run's messages, whatever else waits on ORDERS
    order_17, order_18 = (f"order {n} {run}".encode() for n in (17, 18))
    shop = keys_of("SHOP")
    async with connect(address, queue="SENDER", protection=shop) as sender:
        await sender.put(  # sealed for BILLING's old key
            b"order 17", target="1.10", delivery=DeliveryMode.WF_DQF, correlation_id=order_17
        )
        mrs_keys("rotate", "BILLING", "--out", keys)  # new BILLING.key and BILLING.pub
        await sender.put(  # sealed for the new key
            b"order 18", target="1.10", delivery=DeliveryMode.WF_DQF, correlation_id=order_18
        )

    async with connect(address, queue="ORDERS", protection=keys_of("BILLING")) as billing:
        for correlation_id in (order_17, order_18):
            message = await billing.get(timeout=5, select=by_correlation_id(correlation_id))
            print("BILLING read:", message.body)
            await message.confirm()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        trio.run(main, sys.argv[1], Path(scratch))
