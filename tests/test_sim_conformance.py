"""The checker's MessageQ-conformance invariants (issue 9) on hand-made histories:
each flags the departure it is for, and leaves the legitimate case alone."""

from __future__ import annotations

from mrs.model import DeliveryMode, Status, Uma
from sim.checker import History, Sent, check

MODE = DeliveryMode


def _put(history: History, message_id: str, mode, uma, status, uma_status, seq=0) -> Sent:
    sent = Sent(message_id, message_id.split(":")[0], "2.10", int(mode), int(uma), True)
    history.record_send(sent)
    history.record_outcome(message_id, int(status), int(uma_status), seq)
    return sent


def _delivered_and_confirmed(history: History, message_id: str) -> None:
    history.record_delivery(message_id, "2.10", int(Status.CONFIRMREQ))
    history.record_confirm(message_id, "2.10")


def test_saf_forced_after_a_dqf_full_is_a_wrong_uma() -> None:
    """The issue-9 bug: after one DQF_FULL the next put was SAF_FORCED/NO_UMA."""
    history = History()
    _put(history, "1.20:0", MODE.WF_DQF, Uma.DLJ, Status.DQF_FULL, Status.DLJ_SUCCESS)
    _put(history, "1.20:1", MODE.WF_DQF, Uma.DLJ, Status.SAF_FORCED, Status.NO_UMA)
    history.dead_letter_journal.add("1.20:0")
    _delivered_and_confirmed(history, "1.20:1")
    assert [problem.split(": ")[0] for problem in check(history).wrong_umas] == ["1.20:1"]


def test_saf_forced_behind_a_saf_backlog_is_right() -> None:
    history = History()
    _put(history, "1.20:0", MODE.WF_SAF, Uma.DISC, Status.STORED, Status.NO_UMA)
    _put(history, "1.21:0", MODE.WF_DQF, Uma.DLJ, Status.SAF_FORCED, Status.NO_UMA)
    for message_id in ("1.20:0", "1.21:0"):
        _delivered_and_confirmed(history, message_id)
    assert check(history).ok


def test_a_failed_put_answers_its_own_uma() -> None:
    history = History()
    _put(history, "1.20:0", MODE.WF_DQF, Uma.DLJ, Status.DQF_FULL, Status.SAF_SUCCESS)
    _delivered_and_confirmed(history, "1.20:0")
    assert check(history).wrong_umas == ["1.20:0: DQF_FULL with UMA DLJ answered SAF_SUCCESS"]


def test_an_mrs_ack_arrives_at_most_once() -> None:
    history = History()
    _put(history, "1.20:0", MODE.AK_CONF, Uma.SAF, Status.SUCCESS, Status.UMA_NA, seq=7)
    _delivered_and_confirmed(history, "1.20:0")
    history.record_mrs_ack(7, int(Status.SUCCESS), int(Status.NO_UMA))
    assert check(history).ok
    history.record_mrs_ack(7, int(Status.SUCCESS), int(Status.NO_UMA))
    assert check(history).mrs_ack_violations == ["1.20:0: 2 MRS_ACKs"]
