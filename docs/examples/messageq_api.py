"""MessageQ calls beyond put/get/confirm: pams_locate_q (`locate`), putil_show_pending
(`pending`), pams_open_jrn/read_jrn/close_jrn (`clients.open_journal` from the files,
`q.open_journal` through the group) and MRS_SET_PCJ (`q.set_pcj`).

python docs/examples/messageq_api.py 127.0.0.1:7001 docs/examples/g1
(the second argument: the group's data_dir from bus.toml, read on the group's host)
"""

import sys

import trio

from clients import ForceJrn, NoSuchQueue, connect, connect_sync, open_journal


async def main(address: str, data_dir: str) -> None:
    async with connect(address, queue="ORDERS") as q:
        # pams_locate_q: a queue's address by its name (here, or anywhere on the bus)
        orders = await q.locate("ORDERS")
        print(f"ORDERS is {orders}")
        try:
            await q.locate("NO_SUCH_QUEUE")
        except NoSuchQueue as error:
            print(f"locate NO_SUCH_QUEUE: {error.status.name}")

        for n in range(3):
            await q.put(f"order {n}".encode(), "ORDERS", msg_class=7)
        # putil_show_pending: messages waiting to be got, one count per queue
        print(f"pending on ORDERS, SENDER: {await q.pending(['ORDERS', 'SENDER'])}")

        confirmed = []
        for value in range(3):
            message = await q.get(timeout=10)
            await q.confirm(message.seq, confirm_value=100 + value, force_j=ForceJrn.FORCE_JRN)
            confirmed.append(message.seq)
        print(f"pending after the gets: {await q.pending([orders])}")

    # pams_open_jrn / pams_read_jrn / pams_close_jrn: the PCJ read from its files,
    # read-only (safe while the group runs), selected by seq and class; `async for`
    # reads in a worker thread (a plain `for` blocks: for scripts).
    async with open_journal(data_dir, "pcj", seq=(confirmed[0], confirmed[-1]), msg_class=7) as pcj:
        async for record in pcj:
            print(
                f"pcj seq={record.seq} target={record.target} body={record.body!r} "
                f"confirm_value={record.confirm_value} status={record.status.name}"
            )

    await pcj_control_and_the_wire(address)


async def pcj_control_and_the_wire(address: str) -> None:
    """MRS_SET_PCJ and the journal read through the group (a reader on another host;
    with [auth], the admin rights 'pcj' and 'replay')."""
    async with connect(address, queue="ORDERS") as q:
        # MRS_SET_PCJ: the default journaling action (kept across restarts), and a
        # roll: segment 0 is closed, confirmations now go to segment 1
        state = await q.set_pcj(default=True, roll=True)
        closed = state.closed_segment
        print(f"set_pcj: default={state.default} segment={state.segment} closed={closed}")
        await q.put(b"after the roll", "ORDERS", msg_class=7)
        message = await q.get(timeout=10)
        await q.confirm(message.seq)  # DEFAULT_JRN: journaled, the group's default now
        # pams_open_jrn / pams_read_jrn over the wire: the same records and selection,
        # in pages the group reads in short read transactions
        async with q.open_journal("pcj", msg_class=7, page_records=2) as pcj:
            async for record in pcj:
                print(f"wire pcj seq={record.seq} segment={record.segment} body={record.body!r}")


def blocking(address: str) -> None:
    """The blocking client has the same calls (outside any trio run)."""
    with connect_sync(address, None) as q:
        print(f"blocking: SENDER is {q.locate('SENDER')}, pending {q.pending(['SENDER'])}")
        print(f"blocking: the PCJ's default is {q.set_pcj().default}")  # None: only asks
        with q.open_journal("pcj", segment=1) as pcj:
            print(f"blocking: segment 1 holds {[record.body for record in pcj]}")


if __name__ == "__main__":
    address = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7001"
    trio.run(main, address, sys.argv[2] if len(sys.argv) > 2 else "docs/examples/g1")
    blocking(address)
