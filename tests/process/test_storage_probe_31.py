"""The journals at their edges (thirty-first session): a small journal map filled by
puts of mixed sizes, with the PCJ on, must still take every confirm that drains it.
Real `mrs serve` processes and a real LMDB map.

Each test names what a user saw before its fix.
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from pathlib import Path

import trio

from clients import DeliveryMode, NoMoreMessages, Status, Uma, connect
from clients.batch import PutItem
from journals import Journal, JournalFullError, JournalStore, WriteBatch
from mrs.config.schema import Limits
from mrs.storage import journal_measure
from mrs.storage.journal_usage import UsageWatch

LIMITS = "journal_bytes_max = 4194304\nmessage_bytes_max = 65536"
"""A 4 MiB journal: its reserve is 4 x 64 KiB."""
SIZES = (10, 500, 3000, 20_000, 60_000)
"""Bodies of mixed sizes: a 60 KB record needs 15 contiguous pages, and the pages a
500-byte record frees come in ones."""
MAP_CAP_BYTES = 1 << 20
PAGE = b"p" * 3000
"""A record of one overflow page."""
LARGE = b"L" * 60_000


def _bodies(prefix: str, count: int, seed: int) -> list[bytes]:
    chooser = random.Random(seed)
    return [f"{prefix}{n}:".encode().ljust(chooser.choice(SIZES), b"y") for n in range(count)]


def _stored(items: list[PutItem], answers: list) -> list[bytes]:
    """The bodies answered STORED; every other answer is the reserve's refusal."""
    stored = []
    for item, psb in zip(items, answers, strict=True):
        assert not isinstance(psb, Exception), psb
        if psb.delivery_status == Status.STORED:
            stored.append(item.body)
        else:
            assert (psb.delivery_status, psb.uma_status) == (
                Status.MRS_RES_EXH,
                Status.DISC_SUCCESS,
            ), psb
    return stored


async def _put_in_bursts(address: str, queue: str, bodies: list[bytes]) -> list[bytes]:
    """`bodies` as put_many batches of 20, each sent as the last is answered."""
    stored: list[bytes] = []
    async with connect(address, queue) as sender:
        for start in range(0, len(bodies), 20):
            items = [_item(body) for body in bodies[start : start + 20]]
            stored += _stored(items, await sender.put_many(items))
    return stored


def _item(body: bytes) -> PutItem:
    return PutItem(body, target="ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)


async def _drain(address: str) -> Counter[bytes]:
    """Every message of ANYORDER, each confirmed (a PCJ record each); a confirm the
    group refuses raises."""
    got: Counter[bytes] = Counter()
    async with connect(address, "ANYORDER") as reader:
        while True:
            try:
                message = await reader.get(timeout=0)
            except NoMoreMessages:
                return got
            await reader.confirm(message.seq)
            got[message.body] += 1


def test_a_map_whose_free_pages_lie_in_ones_grows_for_large_records(tmp_path: Path) -> None:
    """Before: the pages small records freed lay in runs too short for a 60 KB
    message's PCJ copy, the one growth by the reserve went, and every confirm of a
    large message failed MRS_RES_EXH ("journal map full: ... MDB_MAP_FULL") with the
    journal's records at half of journal_bytes_max: a full journal never drained.
    The real map of a group's store, as `mrs serve` wires it."""
    store = JournalStore(tmp_path / "journals", MAP_CAP_BYTES)
    count = 0
    with contextlib.suppress(JournalFullError):  # one-page records up to the cap
        while True:
            store.commit_now(WriteBatch.empty().put_raw(Journal.DQF, b"s%05d" % count, PAGE))
            count += 1
    limits = Limits(journal_bytes_max=MAP_CAP_BYTES, message_bytes_max=64 << 10)
    UsageWatch.for_limits(store, limits, group_id=1)
    freeing = WriteBatch.empty()
    for index in range(0, count, 2):  # deliveries confirmed: free pages, in ones
        freeing.delete(Journal.DQF, b"s%05d" % index)
    store.commit_now(freeing)
    for index in range(8):  # the PCJ copies of 60 KB messages: 15 pages each
        store.commit_now(WriteBatch.empty().put_raw(Journal.PCJ, b"L%d" % index, LARGE))
    assert journal_measure.pages_in_use_bytes(store) <= MAP_CAP_BYTES
    assert store.env.info()["map_size"] <= 2 * MAP_CAP_BYTES
    store.close()


async def test_a_burst_of_batched_puts_stops_at_the_reserve_and_the_journal_drains(
    make_bus,
) -> None:
    """Before: each measure of the journal forgot the puts accepted before it and not
    yet committed, so three clients' put_many bursts were accepted past the reserve
    into the room kept for confirms (records above journal_bytes_max), and with the
    PCJ on a confirm of a large message failed MRS_RES_EXH for good."""
    bus = make_bus(group_extra="pcj_default = true", limits=LIMITS)
    stored: list[bytes] = []

    async def burst(index: int, queue: str) -> None:
        stored.extend(await _put_in_bursts(bus.address, queue, _bodies(f"b{index}.", 240, index)))

    async with trio.open_nursery() as nursery:
        for index, queue in enumerate(("SENDER", "SENDER2", "IMPLICIT")):
            nursery.start_soon(burst, index, queue)
    assert len(stored) > 40
    async with connect(bus.address, None) as looker:
        journal = (await looker.status())["journal"]
    # New messages stopped at the reserve: its room is the confirms'.
    assert journal["used_bytes"] <= journal["cap_bytes"] - journal["reserve_bytes"], journal
    assert await _drain(bus.address) == Counter(stored)
