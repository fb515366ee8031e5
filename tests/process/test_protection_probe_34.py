"""Where a protected message's replies and returns go, against a real `mrs serve`: a
message a reader refuses is copied to the DLQ naming its sender's reply queue (the
copy is put from the reader's queue, and named that queue: a DLQ handler returning
dead letters to their senders forwarded it back to be refused again), and a sender's
own envelope returned (UMA RTS) to its unprotected queue comes opened, as the page
says a returned message does (it came as the envelope)."""

from __future__ import annotations

from clients import Address, DeliveryMode, Status, Uma, connect
from clients.protection import ProtectionRefused
from mrs.dlq.handler import letter_of
from mrs.dlq.match import letter_values
from mrs.protection import is_protected
from tests.process.test_protection_bus import (  # the group with a policy file
    SECRET,
    app,
    keys,  # noqa: F401 (a fixture)
    start_group,  # noqa: F401 (a fixture)
)

MODE = DeliveryMode


async def test_a_refused_messages_dlq_copy_names_its_senders_reply_queue(
    start_group,  # noqa: F811 (the fixture imported above)
    keys,  # noqa: F811
) -> None:
    group, directory = start_group()
    async with connect(group.address, "PLAIN") as plain:  # no protection: sent unsigned
        await plain.put(b"asks on SENDER", target="1.11", delivery=MODE.WF_MEM, resp_q="1.13")
        await plain.put(b"asks on PLAIN", target="1.11", delivery=MODE.WF_MEM)
    async with connect(group.address, "1.11", protection=app(directory, keys, "BILLING")) as q:
        for _ in range(2):
            try:
                await q.get(timeout=5)
            except ProtectionRefused as refused:
                assert refused.dead_lettered
    async with connect(group.address, "DLQ") as dead:
        copies = [await dead.get(timeout=5) for _ in range(2)]
    assert [copy.body for copy in copies] == [b"asks on SENDER", b"asks on PLAIN"]
    # Put from 1.11, the queue that refused them; they name their senders' queues.
    assert [copy.source for copy in copies] == [Address(1, 11)] * 2
    assert [copy.resp_q for copy in copies] == [Address(1, 13), Address(1, 14)]
    # ... which is what the DLQ handler's REPLYQ matches and &REPLYQ forwards to
    assert letter_values(letter_of(copies[0]))["REPLYQ"] == ("13",)


async def test_a_senders_own_returned_envelope_comes_opened_on_its_plain_queue(
    start_group,  # noqa: F811
    keys,  # noqa: F811
) -> None:
    group, directory = start_group()
    shop = app(directory, keys, "SHOP")
    # BILLING's signed body returned to SENDER too (a put naming it as resp_q).
    foreign = app(directory, keys, "BILLING").seal_for("1.11", b"billing's", 1)
    async with connect(group.address, "PLAIN") as plain:
        psb = await plain.put(
            foreign, target="1.50", delivery=MODE.WF_MEM, uma=Uma.RTS, resp_q="1.13"
        )
        assert psb.uma_status == Status.RTS_SUCCESS
    async with connect(group.address, "SENDER", protection=shop) as sender:  # 1.13: no policy
        psb = await sender.put(SECRET, target="1.50", delivery=MODE.WF_MEM, uma=Uma.RTS)
        assert psb.uma_status == Status.RTS_SUCCESS
        first, second = [await sender.get(timeout=5) for _ in range(2)]
    assert first.delivery_status == second.delivery_status == Status.MSGUNDEL
    assert first.body == foreign and "mrs_protection" not in first.headers  # not its own: as is
    assert is_protected(first.body)
    assert (second.body, second.original_target) == (SECRET, Address(1, 50))
    assert second.headers["mrs_protection"] == {"signer": "SHOP", "quality": "privacy"}
