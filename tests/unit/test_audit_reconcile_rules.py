"""The reconciliation's rules on hand-made check rows (no Spark): who a gap is
charged to, what a duplicate's places are, how stored adds up."""

from __future__ import annotations

from mrs.audit.reconcile import reconciliation, sequence_checks

G = 1 << 49  # group 1's first seq


def pair(seq, next_seq, source="1.13", next_source="1.13", target="1.10", next_target="1.10",
         place="dqf:1", next_place="dqf:1") -> dict:  # fmt: skip
    return {"seq": seq, "source": source, "target": target, "place": place,
            "next_seq": next_seq, "next_source": next_source, "next_target": next_target,
            "next_place": next_place}  # fmt: skip


def test_a_gap_between_one_senders_messages_is_charged_to_it_and_its_queue() -> None:
    checks = sequence_checks([pair(G + 1, G + 4)])
    assert checks["missing_by_sender"] == {"1.13": 2}
    assert checks["missing_by_queue"] == {"1.10": 2}
    assert checks["unattributed"] == 0
    assert checks["gaps"] == [{"after_seq": G + 1, "before_seq": G + 4, "missing": 2,
                               "sender": "1.13", "queue": "1.10"}]  # fmt: skip


def test_a_gap_between_two_queues_is_the_senders_and_between_two_senders_nobodys() -> None:
    checks = sequence_checks([
        pair(G + 1, G + 3, next_target="1.11"),
        pair(G + 5, G + 9, next_source="1.14"),
    ])  # fmt: skip
    assert checks["missing_by_sender"] == {"1.13": 1}
    assert checks["missing_by_queue"] == {}
    assert checks["unattributed"] == 3


def test_a_seq_in_three_places_is_one_duplicate_with_its_places() -> None:
    checks = sequence_checks([
        pair(G + 7, G + 7, place="dlj:2", next_place="dqf:1"),
        pair(G + 7, G + 7, place="dqf:1", next_place="pcj:1"),
    ])  # fmt: skip
    assert [(d["seq"], d["places"]) for d in checks["duplicates"]] == [
        (G + 7, "dlj:2, dqf:1, pcj:1")
    ]
    assert checks["gaps"] == []


def test_stored_adds_every_place_and_the_missing_less_the_duplicates() -> None:
    counts = [
        {"journal": "pcj", "target": "1.10", "n": 5},
        {"journal": "dqf", "target": "1.10", "n": 2},
        {"journal": "saf", "target": "2.11", "n": 3},
        {"journal": "dlj", "target": "1.10", "n": 1},
    ]
    checks = {"duplicates": [{"target": "1.10"}]}
    rows = reconciliation(counts, checks, "target", {"1.10": 4, "1.12": 1})
    assert rows == [
        {"target": "1.10", "stored": 11, "confirmed": 5, "dead_lettered": 1, "in_dqf": 2,
         "in_saf": 0, "missing": 4, "duplicates": 1},
        {"target": "1.12", "stored": 1, "confirmed": 0, "dead_lettered": 0, "in_dqf": 0,
         "in_saf": 0, "missing": 1, "duplicates": 0},
        {"target": "2.11", "stored": 3, "confirmed": 0, "dead_lettered": 0, "in_dqf": 0,
         "in_saf": 3, "missing": 0, "duplicates": 0},
    ]  # fmt: skip
