"""Room: the group's message sequence numbers (reserved in blocks, mrs.core.seqspace)."""

from __future__ import annotations

from dataclasses import dataclass

from mrs.core.seqspace import SeqAllocator
from mrs.group.context import GroupContext


@dataclass(eq=False)
class Sequence:
    ctx: GroupContext
    _seqs: SeqAllocator | None = None

    def start(self) -> None:
        """Count this start (the epoch) and reserve the first block of seqs."""
        self._seqs = SeqAllocator(self.ctx.store, self.ctx.config.id, clock_ns=self.ctx.clock_ns)
        self._seqs.start()
        self.ctx.epoch = self._seqs.boots

    def made_in_this_run(self, seq: int) -> bool:
        """Whether `seq` was handed out since this start: what this run made for it
        in memory (an AK_DQF put's MRS_ACK) still exists or was delivered."""
        seqs = self._seqs
        return seqs is not None and seq >= seqs.first_of_run

    def next(self) -> int:
        seqs = self._seqs
        assert seqs is not None  # started before any put
        return seqs.next()
