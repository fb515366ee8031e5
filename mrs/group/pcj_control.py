"""Room: the PCJ's control (MessageQ's MRS_SET_PCJ): the group's default journaling
action of confirmations, and the PCJ's segments.

Why a segment is a number stamped in each PCJ record (`extra["pcj_segment"]`,
mrs.storage.journal_scan) and not in its key: PCJ keys stay the message's seq, so
every reader (`mrs dump`, `mrs jplay`, the audit, the journal readers, repair) reads
every segment as before, a seq selection still seeks, and a PCJ written before
segments is segment 0 (its records name none). A roll is one META write: records
built before it name the old segment, those built after the new one.

Why no record is lost in a roll under load: the event loop builds each confirm's PCJ
record and stamps its segment when it submits the batch, and the journal writer
commits batches in the order submitted (journals.writer). So once a roll's META
write is durable — when SetPcj is answered — every record of the closed segment is
durable too, and none is written to it later: an auditor or `mrs pcj archive
--closed` may take it whole. The state is read back at start-up, so the default and
the segment survive a restart; the config's `pcj_default` is only the first value.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from journals import Journal, JournalError, WriteBatch
from journals.protocol import Store
from mrs import protocol as wire
from mrs.group.context import GroupContext, Session
from mrs.model import ForceJrn, Status

PCJ_CONTROL_KEY = "pcj_control"
"""META key of the PCJ's state: msgpack map default (bool), segment, opened_ns."""


@dataclass(frozen=True, slots=True)
class PcjControlState:
    default: bool
    segment: int
    opened_ns: int


def read_state(store: Store, pcj_default: bool) -> PcjControlState:
    """The PCJ state kept in META, or the config's default in segment 0 when none
    was ever set (a damaged value reads as none)."""
    raw = store.meta_get(PCJ_CONTROL_KEY)
    if raw:
        try:
            fields = msgpack.unpackb(bytes(raw))
            default, segment, opened_ns = fields["default"], fields["segment"], fields["opened_ns"]
            if type(default) is bool and type(segment) is int and type(opened_ns) is int:
                return PcjControlState(default, segment, opened_ns)
        except (ValueError, KeyError, TypeError, msgpack.UnpackException):
            pass
    return PcjControlState(pcj_default, 0, 0)


class PcjControl:
    """MRS_SET_PCJ for the group: reads the state at start-up into the context (read
    per confirm by mrs.group.handover) and changes it on request."""

    def __init__(self, ctx: GroupContext) -> None:
        self.ctx = ctx
        state = read_state(ctx.store, ctx.config.pcj_default)
        ctx.pcj_default = state.default
        ctx.pcj_segment = state.segment
        self.opened_ns = state.opened_ns

    def state(self) -> PcjControlState:
        return PcjControlState(self.ctx.pcj_default, self.ctx.pcj_segment, self.opened_ns)

    def status_info(self) -> dict:
        """`mrs status --json`'s "pcj": the default and the open segment."""
        state = self.state()
        return {"default": state.default, "segment": state.segment, "opened_ns": state.opened_ns}

    def set_pcj(self, session: Session, request: wire.SetPcj) -> None:
        """Change the default at once and roll if asked (every confirm handled after
        this request follows the new state); answer PcjState once it is durable, and
        undo the change if it cannot be (JOURNAL_FAIL)."""
        ctx = self.ctx
        before = self.state()
        if request.default == ForceJrn.FORCE_JRN:
            ctx.pcj_default = True
        elif request.default == ForceJrn.NO_JRN:
            ctx.pcj_default = False
        closed = -1
        if request.roll:
            closed = ctx.pcj_segment
            ctx.pcj_segment += 1
            self.opened_ns = ctx.clock_ns()
        state = self.state()
        value = msgpack.packb(
            {"default": state.default, "segment": state.segment, "opened_ns": state.opened_ns}
        )
        batch = WriteBatch.empty().put_raw(Journal.META, PCJ_CONTROL_KEY.encode(), value)
        request_id = request.request_id

        def written(error: JournalError | None) -> None:
            if error is not None:
                self._undo(state, before)
                session.send(
                    wire.Failure(request_id, int(Status.JOURNAL_FAIL), f"MRS_SET_PCJ: {error}")
                )
                return
            session.send(
                wire.PcjState(request_id, state.default, state.segment, state.opened_ns, closed)
            )

        ctx.writer.submit(batch, written)

    def _undo(self, made: PcjControlState, before: PcjControlState) -> None:
        """A change refused JOURNAL_FAIL is not made: the state goes back to what it
        was, unless a later MRS_SET_PCJ changed it again meanwhile. Why: the caller is
        told the change failed, and a restart would read the old state from META, so
        keeping the new one in memory meant confirms journaled by a default nobody
        holds (and a segment no restart knows)."""
        if self.state() != made:
            return
        self.ctx.pcj_default = before.default
        self.ctx.pcj_segment = before.segment
        self.opened_ns = before.opened_ns
