"""The error tree: catch one class per case, or MrsError for all. Run against a group
server:

python docs/examples/errors.py 127.0.0.1:7001
"""

import sys

import trio

from clients import (
    BadParameter,
    BadSequence,
    DeliveryMode,
    MessageTooBig,
    MrsError,
    NoMoreMessages,
    NoSuchQueue,
    QueueBusy,
    Uma,
    connect,
)


async def main(address: str) -> None:
    async with connect(address, queue="SENDER") as sender:
        try:
            await sender.put(b"x", target="NO_SUCH_QUEUE", delivery=DeliveryMode.WF_MEM)
        except NoSuchQueue as error:
            print(f"NoSuchQueue: status {error.status.name}")
        big = b"x" * (sender.message_bytes_max + 1)
        try:
            await sender.put(big, target="ORDERS", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
        except MessageTooBig as error:
            print(f"MessageTooBig: status {error.status.name}")
        try:
            await sender.confirm(123456789)
        except BadSequence as error:
            print(f"BadSequence: status {error.status.name}")
        try:
            await sender.get(timeout=0)
        except NoMoreMessages as error:
            print(f"NoMoreMessages: status {error.status.name}")
        try:
            async with connect(address, queue="SENDER"):
                pass
        except QueueBusy as error:
            print(f"QueueBusy: status {error.status.name}")
        try:
            await sender.confirm(-1)  # checked by the library before it is sent
        except BadParameter as error:
            print(f"BadParameter: status {error.status.name}")
        try:
            await sender.put(b"x", target="NOWHERE", delivery=DeliveryMode.WF_MEM)
        except MrsError as error:  # the root catches every case
            print(f"MrsError: {error}")


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7001")
