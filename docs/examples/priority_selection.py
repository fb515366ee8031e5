"""Priority order and selective gets (MessageQ's priorities and pams_get_msg's
sel_filter / pams_set_select): docs/delivery-modes.md, docs/client-library.md.

python docs/examples/priority_selection.py 127.0.0.1:7001
"""

import sys

import trio

from clients import BadParameter, NoMoreMessages, Selection, connect, connect_sync
from mrs.core.selection import Key, by_class_type, by_correlation_id


async def main(address: str) -> None:
    async with connect(address, queue="SENDER") as q:
        # a queue hands out the highest priority first, then in arrival order
        for body, priority in [
            (b"routine 1", 0),
            (b"urgent 1", 9),
            (b"routine 2", 0),
            (b"urgent 2", 9),
        ]:
            await q.put(body, "SENDER", priority=priority)
        got = [await q.get(timeout=0) for _ in range(4)]
        print("priority order:", ", ".join(m.body.decode() for m in got))
        await q.confirm_many([m.seq for m in got])

        # a selective get takes the first message its Selection matches
        for n in range(5):
            await q.put(f"reply {n}".encode(), "SENDER", msg_class=7, msg_type=n,
                        correlation_id=b"request-%d" % n)  # fmt: skip
        reply = await q.get(timeout=0, select=by_correlation_id(b"request-3"))
        print("by correlation id:", reply.body.decode())
        await q.confirm(reply.seq)

        # a Selection is built once and reused, as a pams_set_select index is
        late = Selection(Key("msg_class", "eq", 7), Key("msg_type", "ge", 2))
        taken = await q.get_many(10, timeout=0, select=late)
        print("class 7, type >= 2:", ", ".join(m.body.decode() for m in taken))
        await q.confirm_many([m.seq for m in taken])
        try:
            await q.get(timeout=0, select=late)
        except NoMoreMessages as none:
            print("none left:", none.status.name)
        try:
            Selection(Key("msg_class", "like", 7))
        except BadParameter as refused:
            print("refused:", refused.status.name, refused)
        for message in [await q.get(timeout=0) for _ in range(2)]:
            await q.confirm(message.seq)


def blocking(address: str) -> None:
    """The blocking client takes the same `select`."""
    with connect_sync(address, "SENDER") as q:
        q.put(b"class 3 type 1", "SENDER", msg_class=3, msg_type=1)
        message = q.get(timeout=0, select=by_class_type(3, 1))
        print("blocking:", message.body.decode())
        message.confirm()


if __name__ == "__main__":
    address = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7001"
    trio.run(main, address)
    blocking(address)
