"""End-to-end message protection: SHOP encrypts for BILLING; nobody else can read it.

Run against the example group: `python docs/examples/protection.py 127.0.0.1:7001`
(docs/security-protection.md explains each step).

Its gets select its own two messages (a correlation id made for this run), so what
other pages' examples left on ORDERS or the DLQ is neither taken nor in its way: a
plain get took the oldest message on ORDERS, refused it to the DLJ (it was not sealed
for this run's policy) and stopped with a traceback.
"""

import os
import sys
import tempfile
from pathlib import Path

import trio

from clients import DeliveryMode, Protection, ProtectionRefused, connect
from mrs.core.selection import by_correlation_id
from mrs.protection.keys import Identity, write_identity

POLICIES = """
keys_dir = "keys"

[[policy]]
queue = "1.10"              # ORDERS of group 1 (NYC)
protection = "privacy"      # signed by the putter, encrypted for the recipients
signers = ["SHOP"]
recipients = ["BILLING"]
"""


async def main(address: str, scratch: Path) -> None:
    for name in ("SHOP", "BILLING", "MALLORY"):  # what `mrs keys new NAME --out keys` does
        write_identity(Identity.generate(name), scratch / "keys")
    (scratch / "protection.toml").write_text(POLICIES)

    def keys_of(name: str) -> Protection:
        return Protection.load(scratch / "protection.toml", identity=scratch / f"keys/{name}.key")

    run = os.urandom(4).hex()  # this run's messages, whatever else waits on ORDERS
    card_17, card_18 = (f"order {n} {run}".encode() for n in (17, 18))
    async with connect(address, queue="SENDER", protection=keys_of("SHOP")) as shop:
        psb = await shop.put(
            b"card 4111 for order 17",
            target="1.10",
            delivery=DeliveryMode.WF_DQF,
            correlation_id=card_17,
        )
        print("SHOP put seq", psb.seq, psb.delivery_status.name)
        # A memory message: refused, it goes to the (memory) DLQ; a refused recoverable
        # message goes to the DLJ, or to the DLQ when it is journaled.
        await shop.put(
            b"card 4242 for order 18",
            target="1.10",
            delivery=DeliveryMode.WF_MEM,
            correlation_id=card_18,
        )

    async with connect(address, queue="ORDERS", protection=keys_of("BILLING")) as billing:
        message = await billing.get(timeout=5, select=by_correlation_id(card_17))
        print(
            "BILLING read:", message.body, "signed by", message.headers["mrs_protection"]["signer"]
        )
        await message.confirm()

    async with connect(address, queue="ORDERS", protection=keys_of("MALLORY")) as thief:
        try:
            await thief.get(timeout=5, select=by_correlation_id(card_18))
        except ProtectionRefused as refused:
            print("MALLORY refused:", refused.status.name, refused.reason)

    async with connect(address, queue="DLQ") as handler:  # works from the header alone
        dead = await handler.get(timeout=5, select=by_correlation_id(card_18))
        header = dead.dead_letter_header
        print(
            "DLQ: reason",
            header["reason"],
            "from",
            header["dest_q_mgr_name"] + "." + header["dest_q_name"],
        )
        print("DLQ body is still sealed:", dead.body[:8], b"4242" not in dead.body)
        await dead.confirm()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        trio.run(main, sys.argv[1], Path(scratch))
