"""Review of session 34's changes: a parked selective get whose look stopped at the
scan bound still gets its match once the messages before it are taken, and a replay
that ends early with every record it sent answered leaves no scope in doubt."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import patch

from journals import Journal
from mrs.config.bus import QueueConfig
from mrs.core.selection import Key, Selection
from mrs.group.queues import GetWaiter, TargetQueue
from mrs.tools.journal.ledger import ReplayLedger
from tests.unit.test_priority_lanes import TARGET, entry


def test_a_parked_get_whose_look_stopped_at_the_bound_gets_its_match_later() -> None:
    """The get looked at the first 5 of 8 messages (the bound made small) and parked;
    the match is the 8th. Once plain gets took 4, a confirm served the parked gets:
    the match was within reach, yet the get was never asked again (it waited out its
    timeout, or for ever, beside it)."""
    with patch("mrs.group.queues.SELECT_SCAN_MESSAGES_MAX", 5):
        queue = TargetQueue(QueueConfig(id=11, name="Q"), TARGET)
        for seq in range(1, 9):
            waiting = entry(seq, 0)
            waiting.msg_type = 2 if seq == 8 else 1
            queue.offer(waiting)
        wanted = Selection(Key("msg_type", "eq", 2))  # not indexed: a scan
        assert queue.take(wanted) is None
        got: list[int] = []
        queue.park(GetWaiter(lambda e, premarked=False: got.append(e.seq), 1, 1, select=wanted))
        assert [queue.take().seq for _ in range(4)] == [1, 2, 3, 4]
        queue.serve_waiters()  # as after the confirm of one of them
    assert got == [8] and queue.selective_waiters == 0


def test_a_limited_replay_with_every_record_answered_leaves_nothing_in_doubt(
    tmp_path: Path,
) -> None:
    """`mrs jplay pcj --as 1.16 --limit 100` (or one stopped by Ctrl-C) whose every put
    was answered kept its own selection "in doubt": the next replay with another
    --as was refused, told to run the whole journal again as 1.16 first."""
    selection = {"journal": "pcj", "criteria": {}, "seq": [None, None], "time": [None, 100],
                 "flags": ""}  # fmt: skip
    ledger = ReplayLedger(tmp_path)
    ledger.claim_scope("1.16", None, journal=Journal.PCJ, selection=selection)
    ledger.scope_settled("1.16", None, in_doubt=False, covered_all=False, finished=False)
    ledger.close()
    ledger = ReplayLedger(tmp_path)
    ledger.claim_scope("1.17", None, journal=Journal.PCJ, selection=dict(selection))
    ledger.close()
