"""Where the outcome of one put goes: the WF caller, an MRS_ACK, or nowhere (NN)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mrs import protocol as wire
from mrs.core.delivery import AK as _AK
from mrs.core.delivery import CONF_POINT as _CONF
from mrs.core.delivery import NO_UMA as _NO_UMA_STATUS
from mrs.core.delivery import NO_UMA_INT as _NO_UMA
from mrs.core.delivery import STORED as _STORED_STATUS
from mrs.core.delivery import STORED_INT as _STORED
from mrs.core.delivery import SUCCESS as _SUCCESS_STATUS
from mrs.core.delivery import SUCCESS_INT as _SUCCESS
from mrs.core.delivery import WF as _WF
from mrs.group.context import Session
from mrs.group.put_deadlines import Bucket
from mrs.model import Address, DeliveryMode, Psb, Status
from mrs.protocol.base import build_unchecked
from mrs.protocol.event_types import PUT_DONE

SendAck = Callable[[Address, Psb], None]
"""send_ack(response_queue, psb): queue an MRS_ACK (mrs.group.umas.Umas.send_mrs_ack)."""



@dataclass(eq=False)
class PutReply:
    """One put's answer, given once: PutDone (WF), an MRS_ACK (AK) or a timeout.

    Slotted, with no per-put closures: one is made for every put. Its PutDone is
    built unchecked: every field is an int this server made (the request id was
    checked when its Put was decoded), and the client checks every frame it reads."""

    send_ack: SendAck
    session: Session
    request_id: int
    mode: DeliveryMode
    response_queue: Address
    seq: int = 0
    done: bool = False
    deadline: Bucket | None = None
    """The WF timeout bucket holding this put (mrs.group.put_deadlines), left when done."""
    on_done: Callable[[], None] | None = None
    """Called once the outcome is reported (e.g. forget a journaled MRS_ACK owed)."""
    stored_reply: bool = False
    """The put asked for its PutDone once stored, whatever its mode (a client SAF
    journal draining: it may delete its record only then)."""
    stored_answered: bool = False
    on_report: Callable[[Psb], None] | None = None
    """Told the put's outcome when it is reported (a DLQ reader's put: the group takes
    back its count of the letter when the outcome says no copy was kept)."""

    def __init__(
        self,
        send_ack: SendAck,
        session: Session,
        request_id: int,
        mode: DeliveryMode,
        response_queue: Address,
        seq: int = 0,
        done: bool = False,
        deadline: Bucket | None = None,
        on_done: Callable[[], None] | None = None,
        stored_reply: bool = False,
        stored_answered: bool = False,
        on_report: Callable[[Psb], None] | None = None,
    ) -> None:
        # written out: a dataclass's generated __init__ stays interpreted (docs/native.md)
        self.send_ack = send_ack
        self.session = session
        self.request_id = request_id
        self.mode = mode
        self.response_queue = response_queue
        self.seq = seq
        self.done = done
        self.deadline = deadline
        self.on_done = on_done
        self.stored_reply = stored_reply
        self.stored_answered = stored_answered
        self.on_report = on_report

    def stored(self, psb: Psb) -> None:
        """The message is durable here (DQF or SAF): answer a stored_reply put now."""
        if self.stored_reply and not self.stored_answered:
            self.stored_answered = True
            self.session.answer(build_unchecked(PUT_DONE, self.request_id, *psb.to_wire()))

    def report(self, psb: Psb) -> None:
        if self.done:
            return
        if self.on_report is not None:
            self.on_report(psb)
        self._finish()
        self.stored(psb)
        notification = self.mode.notification
        if notification is _WF and not self.stored_reply:
            self.session.answer(build_unchecked(PUT_DONE, self.request_id, *psb.to_wire()))
        elif notification is _AK:
            self.send_ack(self.response_queue, psb)

    def report_stored(self, seq: int) -> None:
        """report(SUCCESS, STORED, seq, NO_UMA): the common outcome of a recoverable
        put, without building a Psb when the answer is a plain WF PutDone."""
        if self.done:
            return
        if self.stored_reply or self.mode.notification is not _WF:
            self.report(Psb(_SUCCESS_STATUS, _STORED_STATUS, seq, _NO_UMA_STATUS))
            return
        self._finish()
        self.session.answer(
            build_unchecked(PUT_DONE, self.request_id, _SUCCESS, _STORED, seq, _NO_UMA)
        )

    def report_copy(self, seq: int, first_made_in_this_run: bool) -> None:
        """A copy of a message stored already (same dedupe key; the first copy's
        `seq`) is answered as the first was, but an AK sender gets one MRS_ACK for
        the message. The first copy's is made (AK_DQF: in memory, when it was stored)
        or owed (AK_CONF: journaled, sent at the confirm), so a copy brings one only
        when the first copy's was made in memory by a run that has ended."""
        if self.done:
            return
        psb = Psb(_SUCCESS_STATUS, _STORED_STATUS, seq, _NO_UMA_STATUS)
        mode = self.mode
        first_ack_lost = mode.interest_point is not _CONF and not first_made_in_this_run
        if mode.notification is _AK and not first_ack_lost:
            self._finish()
            self.stored(psb)
            return
        self.report(psb)

    def _finish(self) -> None:
        self.done = True
        if self.deadline is not None:
            self.deadline.leave(self)
            self.deadline = None
        if self.on_done is not None:
            self.on_done()

    def reporter(self, seq: int) -> Callable[..., None]:
        """A callback that reports the put done (SUCCESS) whatever it is called with:
        for a confirm, a get or a peer's notice, the sender's wait is over."""
        return _Done(self, Psb(Status.SUCCESS, Status.SUCCESS, seq, Status.NO_UMA))

    def time_out(self, timeout_s: float) -> None:
        if self.done:
            return
        self.done = True
        self.deadline = None
        if self.stored_answered:
            return
        self.session.send(
            wire.Failure(
                self.request_id,
                Status.TIMEOUT,
                f"interest point {self.mode.interest_point} not reached in {timeout_s:g} s; "
                "the message may or may not have been stored",
            )
        )


class _Done:
    """Called (by the writer, or an ack), it reports `psb` as its put's outcome."""

    def __init__(self, reply: PutReply, psb: Psb) -> None:
        self.reply = reply
        self.psb = psb

    def __call__(self, *_args: object) -> None:
        self.reply.report(self.psb)


class Reporters:
    """Several puts waiting for one message sent to another group: the first copy of a
    keyed WF_CONF put and its copies re-sent while it waits in the SAF
    (mrs.group.outbound `_answer_copy`), each reported when the peer's notice comes.
    Why: the copy was answered at once, before the receiver confirmed."""

    def __init__(self, reporters: list[Callable[..., None]]) -> None:
        self.reporters = reporters

    def __call__(self, *args: object) -> None:
        for reporter in self.reporters:
            reporter(*args)


def report_waiting_sender(notify: object, psb: Psb) -> bool:
    """If `notify` (an entry's on_confirm / on_dequeue) is a local put's reporter whose
    sender still waits (WF) or is owed an MRS_ACK (AK), report `psb` instead of the
    SUCCESS it would have: e.g. MSGUNDEL when an operator purged the message
    (mrs.ops.admin_actions), so the sender is told now, not at its timeout. False
    for anything else (a peer's notice, an MRS_ACK owed after a restart)."""
    if isinstance(notify, Reporters):
        return any([report_waiting_sender(reporter, psb) for reporter in notify.reporters])
    if not isinstance(notify, _Done) or notify.reply.done:
        return False
    notify.reply.report(psb)
    return True
