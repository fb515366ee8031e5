"""The group-commit writers' statistics, as `status()["writer"]` shows them."""

from __future__ import annotations

from journals import InlineWriter, Journal, JournalStore, WriteBatch
from journals import writer as writer_module


def test_the_writer_reports_how_long_writes_wait_for_their_commit(tmp_path, monkeypatch) -> None:
    """commit_wait_ms_mean: from the first batch submitted to the commit's start (the
    paced latency's question: does a put wait for its commit to begin?)."""
    now_s = [100.0]
    monkeypatch.setattr(writer_module.time, "perf_counter", lambda: now_s[0])
    store = JournalStore(tmp_path / "j", 64 << 20)
    writer = InlineWriter(store, lambda: None)
    for wait_s in (0.002, 0.004):
        writer.submit(WriteBatch.empty().put_raw(Journal.META, b"a", b"1"), lambda error: None)
        now_s[0] += 0.001
        writer.submit(WriteBatch.empty().put_raw(Journal.META, b"b", b"2"), lambda error: None)
        now_s[0] += wait_s - 0.001  # the second batch waited less: the first one counts
        writer.commit_pending()
    store.close()
    assert writer.stats.as_dict()["commit_wait_ms_mean"] == 3.0


def test_the_after_commit_growth_check_reads_the_fill_usage_reports(tmp_path) -> None:
    """grow_if_needed (after every commit) reads the map's fill without counting
    records; it must see what usage() sees, and grow once 75% of the map is used."""
    from mrs.storage.journal_usage import UsageWatch, usage

    store = JournalStore(tmp_path / "j", 1 << 20)
    watch = UsageWatch(store, cap_bytes=8 << 20, group_id=1)
    for index in range(400):
        full = usage(store, 8 << 20)
        assert watch._map_fill() == (full.used_bytes, full.map_bytes)
        if watch.grow_if_needed():
            break
        batch = WriteBatch.empty().put_raw(Journal.META, b"k%d" % index, b"x" * 2000)
        store.commit_now(batch)
    assert watch.grown_times == 1
    assert full.used_bytes >= 0.75 * (1 << 20)  # grown only once it was 75% used
    assert store.env.info()["map_size"] == 2 << 20
    store.close()
