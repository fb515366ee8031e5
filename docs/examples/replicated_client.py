"""Put orders to a replicated group, then read them back: run it, SIGKILL the active
instance while it puts, and every order is still delivered once, in order.

    python replicated_client.py replicated.toml [COUNT]    # COUNT orders, 300 by default

The client is given the three instances' addresses (`instance_addresses`) and tries
them in turn, on connect and on every reconnect: only the active listens. Given
several addresses, the client gives each recoverable put an idempotency key and
re-sends a put whose answer was lost in the failover to the new active by itself, so
`put()` returns its real answer and the order is stored once (clients.resend).
"""

from __future__ import annotations

import sys

import trio

from clients import ConnectionLost, connect, instance_addresses
from mrs.model import Status


async def main(config: str, orders: int) -> None:
    async with connect(instance_addresses(config, "NYC"), "ORDERS") as client:
        status = await client.status()
        print(f"active: {status['replication']['instance']}", flush=True)
        for number in range(orders):
            psb = await client.put(b"order %d" % number, "ORDERS")  # WF_DQF
            assert psb.status == Status.SUCCESS, psb
            if number + 1 == orders // 3:
                print(f"{number + 1} puts answered so far", flush=True)
            await trio.sleep(0.01)  # a steady stream, so a failover lands in the middle
        print(f"{orders} puts answered, {client.resent_puts} re-sent after a lost answer")
        seen, possdupl = [], 0
        while len(seen) < orders:
            try:  # the active may be killed while we read too
                message = await client.get(timeout=30)
                number = int(message.body.split()[1])
                possdupl += message.delivery_status == Status.POSSDUPL
                if number not in seen:  # one handed out before the kill comes again, POSSDUPL
                    seen.append(number)
                await client.confirm(message.seq)
            except ConnectionLost:  # a get or confirm in flight: the message comes again
                continue
        in_order = seen == list(range(orders))
        print(f"{len(seen)} delivered, in order: {in_order}, POSSDUPL: {possdupl}")
        status = await client.status()
        print(f"active now: {status['replication']['instance']}")


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 300)
