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
