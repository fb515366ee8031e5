"""Idempotency keys: scoped by sender and target, refused when reused for another body
(durably: against a real server that is killed), expiring after the dedupe window
(in process under MockClock, so the window costs no wall time); replay keys
unguessable."""

from __future__ import annotations

import pytest
import trio

from clients import DeliveryMode, MrsError, Status, Uma
from journals import Journal
from mrs.tools.journal.replay import replay_key

MODE = DeliveryMode


async def _put(client, body: bytes, target: str, key: str):
    return await client.put(
        body, target=target, delivery=MODE.WF_DQF, uma=Uma.DISC, headers={"idempotency_key": key}
    )


async def _bodies(bus, queue: str) -> list[bytes]:
    bodies = []
    async with bus.connect(queue=queue) as receiver:
        while True:
            try:
                message = await receiver.get(timeout=0)
            except MrsError:
                return bodies
            bodies.append(message.body)
            await receiver.confirm(message.seq)


async def test_a_key_is_scoped_by_sender_and_target(mem_bus) -> None:
    bus = mem_bus
    async with (
        bus.connect(queue="SENDER") as sender,
        bus.connect(queue="SENDER2") as other_sender,
    ):
        to_orders = await _put(sender, b"k to ORDERS", "ORDERS", "k")
        to_anyorder = await _put(sender, b"k to ANYORDER", "ANYORDER", "k")
        from_other = await _put(other_sender, b"k from SENDER2", "ORDERS", "k")
    psbs = [to_orders, to_anyorder, from_other]
    assert {psb.delivery_status for psb in psbs} == {Status.STORED}
    assert len({psb.seq for psb in psbs}) == 3
    assert await _bodies(bus, "ORDERS") == [b"k to ORDERS", b"k from SENDER2"]
    assert await _bodies(bus, "ANYORDER") == [b"k to ANYORDER"]


async def test_a_key_reused_for_another_body_is_refused(bus) -> None:
    async with bus.connect(queue="SENDER") as sender:
        first = await _put(sender, b"pay 10", "ORDERS", "invoice-7")
        same = await _put(sender, b"pay 10", "ORDERS", "invoice-7")
        assert (same.delivery_status, same.seq) == (Status.STORED, first.seq)
        with pytest.raises(MrsError) as refused:
            await _put(sender, b"pay 99", "ORDERS", "invoice-7")
        assert refused.value.status == Status.KEY_REUSED
        assert "invoice-7" in refused.value.message and "another body" in refused.value.message
    bus.restart()  # the key and its body fingerprint are durable
    async with bus.connect(queue="SENDER") as sender:
        with pytest.raises(MrsError) as refused:
            await _put(sender, b"pay 99", "ORDERS", "invoice-7")
        assert refused.value.status == Status.KEY_REUSED
        again = await _put(sender, b"pay 10", "ORDERS", "invoice-7")
        assert again.seq == first.seq
    assert await _bodies(bus, "ORDERS") == [b"pay 10"]


async def test_keys_expire_after_the_dedupe_window_and_are_purged(make_mem_bus) -> None:
    bus = await make_mem_bus(limits="dedupe_window_s = 1")
    async with bus.connect(queue="SENDER") as sender:
        first = await _put(sender, b"daily report", "ORDERS", "report")
        assert (await _put(sender, b"daily report", "ORDERS", "report")).seq == first.seq
        await trio.sleep(1.2)  # the group's clock is the MockClock: this takes no time
        later = await _put(sender, b"daily report", "ORDERS", "report")
        assert later.delivery_status == Status.STORED and later.seq > first.seq
        assert (await sender.status())["dedupe_keys"] == 1
    await trio.sleep(1.2)
    await bus.restart()  # start-up purges expired keys
    async with bus.connect(queue="SENDER") as sender:
        assert (await sender.status())["dedupe_keys"] == 0
    assert await _bodies(bus, "ORDERS") == [b"daily report", b"daily report"]


def test_replay_keys_are_unguessable_but_stable_and_in_put_order() -> None:
    one, other = b"\x01" * 32, b"\x02" * 32
    key = replay_key(one, Journal.PCJ, 1, 42, 1)
    assert key == replay_key(one, Journal.PCJ, 1, 42, 1)  # a re-run dedupes
    assert key != replay_key(other, Journal.PCJ, 1, 42, 1)  # nobody else can predict it
    assert key != replay_key(one, Journal.PCJ, 1, 42, 2)  # --again: a new key
    _, run, _, tag = key.split(":")
    stranger = replay_key(other, Journal.PCJ, 1, 42, 1).split(":")
    assert run != stranger[1] and tag != stranger[3]  # both parts come from the secret
    # Seeing one key does not give the next: its tag is the secret's too.
    assert replay_key(one, Journal.PCJ, 1, 43, 1).split(":")[3] != tag
    # A replay's keys sort in put (seq) order: the server appends them to its key
    # journal instead of inserting each into a random page.
    keys = [replay_key(one, Journal.PCJ, 1, seq, 1) for seq in (1, 2, 255, 256, 2**40, 2**63)]
    assert keys == sorted(keys)
    # A secret file edited to hold a longer secret still gives keys (its own).
    long_secret = b"\x03" * 100
    assert replay_key(long_secret, Journal.PCJ, 1, 42, 1) == replay_key(
        long_secret, Journal.PCJ, 1, 42, 1
    ) not in (key, replay_key(long_secret[:64], Journal.PCJ, 1, 42, 1))


def test_replay_keys_stay_what_earlier_releases_made() -> None:
    """A ledger written by an earlier release resumes under the same keys, so the
    server still recognises what that release already stored: the keys are a format,
    pinned here (values made by the first release with this key layout)."""
    secret = bytes(range(32))
    assert (
        replay_key(secret, Journal.PCJ, 1, 42, 1)
        == "replay:4cae058c6c17a46a:000000000000002a:0e6966126664a373"
    )
    assert (
        replay_key(secret, Journal.DLJ, 7, 2**63 + 5, 3)
        == "replay:cd2397747e6a46d6:8000000000000005:aef9fca1a7f51430"
    )
