"""A group that runs for a long time under churn keeps what it holds bounded: each test
counts the entries of one structure after many cycles of a churn (not the RSS), so a
structure that grows without bound fails it in seconds.

Found by a soak probe (two linked groups for minutes under connect/disconnect loops,
killed clients, unfinished handshakes, parked and given-up selective gets, unread
MRS_ACKs, keyed puts, a flapping link, status and browse loops): memory, descriptors
and threads came back to their baseline; the idempotency keys did not, nor (read in
the code after it) the WF_CONF copies waiting for a message an operator took away."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from clients import DeliveryMode, MrsError, PutItem, Status, Uma
from journals import Journal, JournalStore, WriteBatch
from mrs.group.idempotency import AppKeys, fingerprint, origin_key, pack_value, scoped_key
from mrs.limits import DEDUPE_PURGE_BATCH_MAX, DEDUPE_PURGE_INTERVAL_S, DEDUPE_PURGE_SCAN_MAX
from mrs.model import Address

WINDOW_S = 500


def _keyed(prefix: str, count: int) -> list[PutItem]:
    return [
        PutItem(
            b"x",
            "ANYORDER",
            delivery=DeliveryMode.WF_DQF,
            uma=Uma.DISC,
            headers={"idempotency_key": f"{prefix}{number}"},
        )
        for number in range(count)
    ]


async def test_expired_keys_go_as_fast_as_a_keyed_producer_makes_them(make_mem_bus) -> None:
    """A purge took the first 10,000 expired keys every 10 minutes (~17 a second): a
    producer keying more puts than that (every recoverable put of a replicated group's
    client is keyed) grew the DEDUPE table for ever, past the window. Now one sweep,
    in steps, deletes every expired key and none that is live."""
    bus = await make_mem_bus(limits=f"dedupe_window_s = {WINDOW_S}")
    old_keys = DEDUPE_PURGE_BATCH_MAX * 2 + 100
    async with bus.connect(queue="SENDER") as sender:
        assert all(psb.seq for psb in await sender.put_many(_keyed("old", old_keys)))
        await trio.sleep(WINDOW_S + 10)  # the MockClock: no wall time
        live = await sender.put_many(_keyed("live", 7))  # they expire after the sweep
        assert all(psb.seq for psb in live)
        assert (await sender.status())["dedupe_keys"] == old_keys + 7
        await trio.sleep(DEDUPE_PURGE_INTERVAL_S - WINDOW_S + 30)  # one sweep, all steps
        assert (await sender.status())["dedupe_keys"] == 7
        again = await sender.put_many(_keyed("live", 7))  # still deduped: same seqs
        assert [psb.seq for psb in again] == [psb.seq for psb in live]


def test_one_step_of_the_sweep_looks_at_a_bounded_number_of_keys(tmp_path: Path) -> None:
    """A purge scanned every live key from the first in one pass on the event loop (a
    table of millions stalled the group). Now a step looks at DEDUPE_PURGE_SCAN_MAX keys
    at most and says where the next goes on; the sweep still finds every expired key,
    and leaves live and link (origin) keys alone."""
    store = JournalStore(tmp_path / "journals")
    now_ns = 10**18
    sender, target = Address(1, 13), Address(1, 11)
    live = pack_value(1, now_ns + 10**12, fingerprint(b"x"))
    expired = pack_value(2, now_ns - 1, fingerprint(b"x"))
    batch = WriteBatch.empty()
    for number in range(DEDUPE_PURGE_SCAN_MAX + 100):  # "a..." sorts before "z..."
        batch.put_raw(Journal.DEDUPE, scoped_key(sender, target, f"a{number:08}").encode(), live)
    stale = [scoped_key(sender, target, f"z{number}").encode() for number in range(50)]
    for key in stale:
        batch.put_raw(Journal.DEDUPE, key, expired)
    batch.put_raw(Journal.DEDUPE, origin_key(2, 7).encode(), (7).to_bytes(8, "big"))
    store.commit_now(batch)
    try:
        keys = AppKeys(store, 1.0, lambda: now_ns)
        first, resume = keys.expired()
        assert first == [] and resume is not None  # stopped within the live keys
        found, end = keys.expired(resume)
        assert sorted(found) == sorted(stale) and end is None
    finally:
        store.close()


async def _timed_out_copy(sender, key: str) -> None:
    """A WF_CONF put and its copy (re-sent under its key), both given up unconfirmed."""
    for _ in range(2):
        with pytest.raises(MrsError) as timed_out:
            await sender.put(
                b"order",
                "ANYORDER",
                delivery=DeliveryMode.WF_CONF,
                timeout=1,
                headers={"idempotency_key": key},
            )
        assert timed_out.value.status == Status.TIMEOUT


async def test_copies_waiting_for_a_purged_or_moved_message_are_not_kept(mem_bus) -> None:
    """A WF_CONF copy waits for its first copy's confirm (Dqf.copies_awaiting_confirm).
    One whose message was purged or moved stayed there for ever: one entry a cycle, and
    at DEDUPE_WAITERS_MAX (1,000) every later copy was answered before its confirm. Now
    a purge tells the copies (MSGUNDEL) and forgets them, and a move hands them to the
    moved message."""
    copies = mem_bus.server.group.dqf.copies_awaiting_confirm
    async with mem_bus.connect(queue="SENDER") as sender, mem_bus.connect() as admin:
        for cycle in range(6):
            await _timed_out_copy(sender, f"purged-{cycle}")
            await admin.admin("purge", queue="ANYORDER", discard=True)
            await _timed_out_copy(sender, f"moved-{cycle}")
            await admin.admin("move", queue="ANYORDER", to="ORDERS")
        assert len(copies) == 6  # the moved ones: each waits for its moved message
        async with mem_bus.connect(queue="ORDERS") as receiver:
            for _ in range(6):
                await receiver.confirm((await receiver.get(timeout=1)).seq)
        assert copies == {}
        await _timed_out_copy(sender, "told")
        async with trio.open_nursery() as nursery:
            answers: list = []
            put = sender.put(
                b"order",
                "ANYORDER",
                delivery=DeliveryMode.WF_CONF,
                timeout=30,
                headers={"idempotency_key": "told"},
            )
            nursery.start_soon(lambda: _append(answers, put))
            await trio.testing.wait_all_tasks_blocked()
            assert len(copies) == 1
            await admin.admin("purge", queue="ANYORDER", discard=True)
        assert copies == {}
        assert answers[0].delivery_status == Status.MSGUNDEL  # told now, not at 30 s


async def _append(answers: list, put) -> None:
    answers.append(await put)
