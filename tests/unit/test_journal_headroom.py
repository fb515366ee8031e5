"""A map full at its cap grows once more, by the journal reserve, so the commits that
drain a full journal (a confirm's PCJ copy of a large message needs a contiguous run
of free pages) do not fail MAP_FULL; past that only while its records hold no more than
the cap (free pages in runs too short for a record), and never past twice the cap.
A real LMDB map."""

from __future__ import annotations

import pytest

from journals import Journal, JournalFullError, JournalStore, WriteBatch
from mrs.config.schema import Limits
from mrs.storage import journal_measure
from mrs.storage.journal_usage import FRAGMENTED_MAP_FACTOR, UsageWatch

CAP_BYTES = 1 << 20
MESSAGE_BYTES_MAX = 64 << 10
HEADROOM_BYTES = 4 * MESSAGE_BYTES_MAX  # the journal reserve of this cap
RECORD = b"x" * 40_000


def _fill_to_map_full(store: JournalStore, start: int) -> int:
    """Commits 40 KB records until the map refuses one; the index of that record."""
    for index in range(start, start + 100):
        batch = WriteBatch.empty().put_raw(Journal.PCJ, b"k%04d" % index, RECORD)
        try:
            store.commit_now(batch)
        except JournalFullError:
            return index
    raise AssertionError("the map never filled")


def test_a_map_full_at_its_cap_grows_by_the_reserve_and_past_it_only_for_fragments(
    tmp_path, caplog
) -> None:
    store = JournalStore(tmp_path / "j", CAP_BYTES)
    refused = _fill_to_map_full(store, 0)  # no growth wired: refused at the cap
    assert store.env.info()["map_size"] == CAP_BYTES

    limits = Limits(journal_bytes_max=CAP_BYTES, message_bytes_max=MESSAGE_BYTES_MAX)
    UsageWatch.for_limits(store, limits, group_id=1)
    # The record the cap refused now commits, in the headroom.
    store.commit_now(WriteBatch.empty().put_raw(Journal.PCJ, b"k%04d" % refused, RECORD))
    assert store.env.info()["map_size"] == CAP_BYTES + HEADROOM_BYTES
    assert "grown by its reserve" in caplog.text

    # The headroom full, the map grows again only while the records hold no more
    # than the cap, and never past twice the cap: filling on ends refused.
    _fill_to_map_full(store, refused + 1)
    map_bytes = store.env.info()["map_size"]
    assert map_bytes <= FRAGMENTED_MAP_FACTOR * CAP_BYTES
    records_past_cap = journal_measure.pages_in_use_bytes(store) > CAP_BYTES
    at_bound = map_bytes + HEADROOM_BYTES > FRAGMENTED_MAP_FACTOR * CAP_BYTES
    assert records_past_cap or at_bound
    assert store.count(Journal.PCJ) > refused
    store.close()


def test_without_headroom_the_cap_is_the_limit(tmp_path) -> None:
    store = JournalStore(tmp_path / "j", CAP_BYTES)
    store.grow_map = UsageWatch(store, CAP_BYTES, group_id=1).make_room
    _fill_to_map_full(store, 0)
    assert store.env.info()["map_size"] == CAP_BYTES
    with pytest.raises(JournalFullError):
        store.commit_now(WriteBatch.empty().put_raw(Journal.PCJ, b"more", RECORD))
    store.close()
