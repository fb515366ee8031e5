"""The DLQ's leases (mrs.group.dlq_leases) when a commit fails: one holder per letter.

A group in process over real LMDB journals and the production InlineWriter (the
helpers of tests/process/test_group_rooms.py), its DLQ recoverable so each lease's
delivery mark and each confirm is a commit, and the commit failed on purpose (the
journal device "broke", as in tests/unit/test_hand_over.py). What a user depends on:
a letter is acted on by one reader at a time, a confirm that was not recorded can be
sent again, and `mrs status` counts a letter by what its holder did with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from mrs import protocol as wire
from mrs.errors import Refused
from mrs.group.dlq_leases import CONTEXT_HEADER, DISCARD_CONFIRM_VALUE, HANDLER_PROGRAM
from mrs.group.queues import TargetQueue
from mrs.model import DeliveryMode, ForceJrn, Status
from tests.process.test_group_rooms import BUS, FakeSession, Node, only, open_node, put
from tests.unit.test_hand_over import _commit_failing

NO_JRN = int(ForceJrn.NO_JRN)
RECOVERABLE_DLQ_BUS = BUS.replace(
    "pcj_default = true", "pcj_default = true\ndead_letter_queue_recoverable = true", 1
)


@dataclass(eq=False)
class Reader(FakeSession):
    """A connection attached to the DLQ, named by the program its Hello gave."""

    attached: TargetQueue | None = None
    program: str = HANDLER_PROGRAM


@pytest.fixture
def node(tmp_path: Path):
    opened = open_node(tmp_path, 1, bus_text=RECOVERABLE_DLQ_BUS)
    yield opened
    opened.close()


def _letter(node: Node, body: bytes = b"letter") -> int:
    """One journaled letter on the DLQ; its seq."""
    sender = Reader(next(node.sessions), program="a sender")
    node.group.attach(sender, wire.Attach(request_id=1, queue="OUT"))
    node.group.put(sender, put("96", body, DeliveryMode.WF_DQF))
    node.commit()
    done = only(sender.events, wire.PutDone)
    assert done.delivery_status == Status.STORED, done
    return done.seq


def _reader(node: Node, program: str = HANDLER_PROGRAM) -> Reader:
    reader = Reader(next(node.sessions), program=program)
    node.group.attach(reader, wire.Attach(request_id=1, queue="96"))
    reader.events.clear()
    return reader


def _get(node: Node, reader: Reader, request_id: int) -> wire.Delivery | None:
    """The letter a get of `reader` is handed, or None (NOMOREMSG)."""
    try:
        node.group.get(reader, wire.Get(request_id=request_id, timeout_ms=0))
    except Refused as refused:
        assert refused.status == Status.NOMOREMSG, refused
        return None
    node.commit()
    event = reader.events[-1]
    assert isinstance(event, wire.Delivery), event
    return event


def _send_confirm(node: Node, reader: Reader, seq: int, value: int = 0) -> None:
    """The handler's confirm (NO_JRN: a dead letter removed is not in the PCJ)."""
    node.group.confirm(
        reader, wire.Confirm(request_id=50, seq=seq, confirm_value=value, force_j=NO_JRN)
    )


def _confirm(node: Node, reader: Reader, seq: int, value: int = 0) -> object:
    _send_confirm(node, reader, seq, value)
    node.commit()
    return reader.events[-1]


def _counts(node: Node, reader: Reader) -> dict:
    [status] = [r for r in node.group.dlq_readers.status_info() if r["session"] == reader.id]
    return {key: status[key] for key in ("got", "moved", "discarded", "put", "held")}


def test_a_get_whose_mark_failed_leaves_no_lease_to_take_back_another_readers_letter(
    node: Node,
) -> None:
    """A's get failed (its mark not committed), B then got the letter; A's leaving
    put B's letter back on the DLQ: C got it while B acted on it, and B's confirm
    was refused BADSEQ (the handler exits 3)."""
    seq = _letter(node)
    first, second, third = _reader(node), _reader(node), _reader(node)
    node.group.get(first, wire.Get(request_id=2, timeout_ms=0))
    _commit_failing(node)
    assert only(first.events, wire.Failure).status == Status.JOURNAL_FAIL
    delivery = _get(node, second, 3)
    assert delivery is not None and delivery.seq == seq
    counts = _counts(node, first)
    assert (counts["got"], counts["held"]) == (0, 0)  # its get failed: nothing leased
    node.group.detach(first)
    node.commit()
    assert _get(node, third, 4) is None  # B holds it: nobody else gets it
    assert isinstance(_confirm(node, second, seq), wire.Confirmed)
    assert _counts(node, second) == {"got": 1, "moved": 0, "discarded": 1, "put": 0, "held": 0}


def test_a_confirm_that_was_not_recorded_leaves_the_letter_held_by_its_reader(
    node: Node,
) -> None:
    """The confirm's commit failed (JOURNAL_FAIL): the letter was back among the
    DLQ's unconfirmed, but no reader held it any more, so the confirm sent again was
    refused BADSEQ, and when its reader left the letter stayed out of reach of every
    reader until the group restarted."""
    seq = _letter(node)
    reader = _reader(node)
    assert _get(node, reader, 2) is not None
    _send_confirm(node, reader, seq)
    _commit_failing(node)
    assert only(reader.events, wire.Failure).status == Status.JOURNAL_FAIL
    assert _counts(node, reader)["held"] == 1 and _counts(node, reader)["discarded"] == 0
    node.group.detach(reader)
    node.commit()
    other = _reader(node, program="an application")
    again = _get(node, other, 4)
    assert again is not None and again.seq == seq
    assert isinstance(_confirm(node, other, seq), wire.Confirmed)


def test_the_same_confirm_sent_again_is_recorded(node: Node) -> None:
    seq = _letter(node)
    reader = _reader(node)
    assert _get(node, reader, 2) is not None
    _send_confirm(node, reader, seq)
    _commit_failing(node)
    assert isinstance(_confirm(node, reader, seq), wire.Confirmed)
    assert _counts(node, reader) == {"got": 1, "moved": 0, "discarded": 1, "put": 0, "held": 0}


def _put_for(node: Node, reader: Reader, seq: int) -> None:
    """A put of the reader's naming the letter (`dlq_seq`), to a queue of the group."""
    headers = {CONTEXT_HEADER: {"source": "1.11", "dlq_seq": seq}}
    request = put("IN", b"copy", DeliveryMode.WF_MEM, request_id=60)
    node.group.put(reader, msgspec.structs.replace(request, headers=headers))
    node.commit()


@pytest.mark.parametrize(
    ("program", "value", "counted"),
    [
        (HANDLER_PROGRAM, DISCARD_CONFIRM_VALUE, "discarded"),  # its put failed, then DISCARD
        (HANDLER_PROGRAM, 0, "moved"),  # its put was stored
        ("an application", DISCARD_CONFIRM_VALUE, "moved"),  # its own confirm values
    ],
)
def test_a_letter_is_counted_by_what_its_holder_did(
    node: Node, program: str, value: int, counted: str
) -> None:
    """`mrs status` counted every letter a put had named as moved: a handler's FWD
    that failed and the DISCARD rule after it showed as moved, not discarded."""
    seq = _letter(node)
    reader = _reader(node, program)
    assert _get(node, reader, 2) is not None
    _put_for(node, reader, seq)
    assert isinstance(_confirm(node, reader, seq, value), wire.Confirmed)
    counts = _counts(node, reader)
    assert (counts["put"], counts["moved"], counts["discarded"]) == (
        1,
        int(counted == "moved"),
        int(counted == "discarded"),
    )


def test_a_handler_gone_before_its_mark_failed_leaves_no_later_copy_unmarked(
    node: Node,
) -> None:
    """A handler's get whose delivery mark was still committing when it left, and then
    failed: the detach took the letter's count back as "only held" and the failed mark
    took it back again, below its true count. The next handler got it, put a copy and
    left; the reader after it got the letter CONFIRMREQ, a copy out: unmarked."""
    seq = _letter(node)
    first = _reader(node)
    node.group.get(first, wire.Get(request_id=2, timeout_ms=0))  # its mark committing
    node.group.detach(first)
    _commit_failing(node)
    second = _reader(node)
    delivery = _get(node, second, 3)
    assert delivery is not None and delivery.seq == seq
    assert delivery.delivery_status == Status.CONFIRMREQ  # never handed out before
    _put_for(node, second, seq)  # a copy left
    node.group.detach(second)
    node.commit()
    third = _reader(node, program="an application")
    again = _get(node, third, 4)
    assert again is not None and again.seq == seq
    assert again.delivery_status == Status.POSSDUPL
