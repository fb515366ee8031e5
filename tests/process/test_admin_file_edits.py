"""What `mrs admin` changes in the bus file, with the other groups of the bus and the
operator's editor at work on the same file: real `mrs serve` processes, real
AdminRequests, the file read back with the real parser."""

from __future__ import annotations

import trio

from clients import DeliveryMode, Status, Uma
from mrs.config.bus import load_config
from sim.bus import LinkedBus
from tests.process.test_links import QUEUES

ADDED_PER_GROUP = 12


async def test_add_queue_on_two_groups_at_once_keeps_every_queue_in_the_file(
    tmp_path, nursery
) -> None:
    """Both groups of a bus add queues to the one file at the same time. Before, each
    read the file, added its queue and renamed its text over the other's: some of
    the queues answered "added" were gone from the file (live until the next
    restart). Now each edit holds the file's lock from its read to its write."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, direct=True)
    await trio.to_thread.run_sync(bus.start)
    try:

        async def add(group: int) -> None:
            async with bus.connect(group, None) as client, trio.open_nursery() as adding:
                for index in range(ADDED_PER_GROUP):
                    queue_id = 40 + index
                    adding.start_soon(
                        lambda q=queue_id: client.admin("add_queue", id=q, name=f"NEW{q}")
                    )

        async with trio.open_nursery() as both:
            both.start_soon(add, 1)
            both.start_soon(add, 2)
    finally:
        bus.stop()
    assert bus.config_path is not None
    config = load_config(bus.config_path)
    for group in (1, 2):
        added = {q for q in config.group(group).queues if 40 <= q < 40 + ADDED_PER_GROUP * 2}
        assert added == set(range(40, 40 + ADDED_PER_GROUP)), (group, sorted(added))


async def test_set_limits_takes_only_the_limits_from_the_file(tmp_path, nursery) -> None:
    """The operator has written `recoverable = false` into a queue's entry for the
    next restart; `set-limits` on that queue meanwhile used to take the whole entry
    live, so its recoverable puts were answered NO_DQF and dropped. Now only the
    limits change; the queue stays recoverable until the restart reads the rest."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, direct=True)
    await trio.to_thread.run_sync(bus.start)
    try:
        assert bus.config_path is not None
        text = bus.config_path.read_text()
        assert text.count('name = "IN"\n') == 2
        edited = text.replace('name = "IN"\n', 'name = "IN"\nrecoverable = false\n', 1)
        bus.config_path.write_text(edited)
        async with bus.connect(1, "OUT") as client:
            result = await client.admin("set_limits", queue="1.10", messages_max=77)
            assert result["messages_max"] == 77
            psb = await client.put(b"kept", "1.10", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
            assert (psb.status, psb.delivery_status) == (Status.SUCCESS, Status.STORED)
        fresh = load_config(bus.config_path).group(1).queues[10]
        assert (fresh.messages_max, fresh.recoverable) == (77, False)  # the file has both
    finally:
        bus.stop()
