"""The replay ledger answers a chunk's lookup (`get_many`, one cursor over the seqs'
range) as a lookup per seq (`get`) does, durable and staged entries alike, and a
flush keeps every staged entry, whatever order they were staged in."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from journals import Journal
from mrs.tools.journal.ledger import FAILED, PENDING, STORED, ReplayLedger

seqs = st.integers(min_value=0, max_value=2**64 - 1)
states = st.sampled_from([PENDING, STORED, FAILED])


@settings(max_examples=40, deadline=None)
@given(
    flushed=st.dictionaries(seqs, states, max_size=40),
    staged=st.dictionaries(seqs, states, max_size=20),
    asked=st.lists(seqs, max_size=30),
    journal=st.sampled_from([Journal.PCJ, Journal.DLJ]),
)
def test_get_many_finds_what_get_finds(flushed, staged, asked, journal) -> None:
    with tempfile.TemporaryDirectory() as directory:
        ledger = ReplayLedger(Path(directory))
        other = Journal.DLJ if journal is Journal.PCJ else Journal.PCJ
        for seq, state in reversed(list(flushed.items())):  # staged out of seq order
            ledger.stage(journal, seq, state, 1, replay_seq=seq % 1000)
            ledger.stage(other, seq, STORED, 9)  # another journal's entries never leak in
        ledger.flush()
        for seq, state in staged.items():
            ledger.stage(journal, seq, state, 2)
        wanted = asked + list(flushed)[:5] + list(staged)[:5]
        found = ledger.get_many(journal, wanted)
        expected = {seq: entry for seq in wanted if (entry := ledger.get(journal, seq))}
        assert found == expected
        for seq in flushed.keys() - staged.keys():
            assert found.get(seq, ledger.get(journal, seq)).state == flushed[seq]
        ledger.close()


def test_a_flush_keeps_every_entry_and_a_reopened_ledger_reads_them(tmp_path: Path) -> None:
    ledger = ReplayLedger(tmp_path)
    for seq in (5, 3, 2**40, 4):
        ledger.stage(Journal.PCJ, seq, STORED, 1, replay_seq=seq + 1, target="1.10")
    ledger.stage(Journal.DLJ, 3, FAILED, 2, status=-1)
    ledger.flush()
    ledger.stage(Journal.PCJ, 3, PENDING, 2)  # a later state of the same seq wins
    ledger.flush()
    ledger.close()
    reopened = ReplayLedger(tmp_path, readonly=True)
    found = reopened.get_many(Journal.PCJ, [2, 3, 4, 5, 2**40])
    assert sorted(found) == [3, 4, 5, 2**40]
    assert (found[3].state, found[3].gen) == (PENDING, 2)
    assert (found[5].replay_seq, found[5].target) == (6, "1.10")
    assert reopened.get_many(Journal.DLJ, [3])[3].state == FAILED
    assert reopened.get_many(Journal.PCJ, []) == {}
    reopened.close()
