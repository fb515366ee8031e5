"""Room: the group's message sequence numbers (reserved in blocks, mrs.core.seqspace)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mrs.core.seqspace import SeqAllocator, counter_of
from mrs.group.context import GroupContext

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Sequence:
    ctx: GroupContext
    _seqs: SeqAllocator | None = None
    carried_over: set[int] = field(default_factory=set)
    """The seqs whose MRS_ACKs a planned hand-over's old active made and this run
    hands out (mrs.server.handover_acks `hand_out_owed_acks`): made for this run."""

    def start(self) -> None:
        """Count this start (the epoch) and reserve the first block of seqs."""
        self._seqs = SeqAllocator(self.ctx.store, self.ctx.config.id, clock_ns=self.ctx.clock_ns)
        self._seqs.start()
        self.ctx.epoch = self._seqs.boots
        if self._seqs.copied_from:
            log.warning(
                "group %d runs on a copy of its journals (restored from a backup, moved or "
                "salvaged): it counts its seqs from %d (its clock, or the reservation its "
                "data directory last recorded), not from the copy's reservation (%d), so "
                "that no seq the original issued after the copy is issued again",
                self.ctx.group_id,
                counter_of(self._seqs.first_of_run),
                self._seqs.copied_from,
            )

    def made_in_this_run(self, seq: int) -> bool:
        """Whether `seq` was handed out since this start: what this run made for it
        in memory (an AK_DQF put's MRS_ACK) still exists or was delivered; so it is
        for an MRS_ACK an earlier run made and this one hands out (`carried_over`)."""
        seqs = self._seqs
        return seqs is not None and (seq >= seqs.first_of_run or seq in self.carried_over)

    def next(self) -> int:
        seqs = self._seqs
        assert seqs is not None  # started before any put
        return seqs.next()
