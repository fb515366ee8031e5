"""A SAF record answered again after it was settled: a drain that restarts sends
again what was on its way, and the peer answers each copy. The late answer deletes
nothing and counts nothing. Before, it deleted the key again and counted it again:
the SAF count went below zero and its assertion stopped the group (seen as a client
connection "closed by the server" in CI, 1 run in 20). On the in-process bus."""

from __future__ import annotations

import trio

from clients import DeliveryMode, Status, Uma
from journals import Journal
from tests.conftest import STANDARD_QUEUES
from tests.process.test_links import wait_for_link


async def test_a_record_answered_again_after_its_deletion_is_not_counted_twice(
    make_mem_linked,
) -> None:
    linked = await make_mem_linked(queues=STANDARD_QUEUES, started=(1,))  # 2 is down
    async with linked.connect(1, "1.13") as sender:
        psb = await sender.put(b"x", target="2.10", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC)
    assert psb.delivery_status == Status.STORED  # in the SAF, the link down
    group = linked.server(1).group
    assert group is not None
    (key,) = list(linked.store(1).keys(Journal.SAF))
    counts = group.ctx.counts
    assert counts.saf == 1

    for _ in range(2):  # the answer, then the same answer to the drain's resend
        group.drain.saf_answered(2, [(key, Status.STORED)])
        with trio.fail_after(5):
            while key in group.peers[2].deleting or counts.saf > 0:
                await trio.sleep(0.01)
    assert counts.saf == 0 and group.peers[2].saf_backlog == 0
    assert list(linked.store(1).keys(Journal.SAF)) == []
    await linked.memory.start(2)
    await wait_for_link(linked, 1, 2)  # the group still serves its links
