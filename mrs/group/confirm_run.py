"""The confirms of one receive share one write batch, one commit callback and one
serve of the queue's parked gets (compiled: mrs.native.loader).

Why: a consumer that confirms each message on its own sends one Confirm per message,
and a busy one's Confirms arrive by the hundred in one receive. Each built its own
WriteBatch (two deletes), a closure, an entry in the writer's pending list and a
report call, and served the queue's parked gets again after its commit (benchmarks/README.md).

What stays per confirm: its checks (an unknown or out-of-order seq is refused at
once, alone), the unconfirmed slot freed at once, and its own Confirmed answer, sent
only after the commit that made its deletes durable. A confirm that writes more than
its deletes (a PCJ record, a CONF notice to the origin group) goes alone, as before.
If the shared commit fails, every confirm in it fails (JOURNAL_FAIL or MRS_RES_EXH)
and its message is unconfirmed again, exactly as a confirm alone whose commit failed.
A run is bounded: it holds the confirms of one receive, each already counted against
the connection's requests_in_flight_max, and it is submitted before the receive ends.
"""

from __future__ import annotations

from journals import WriteBatch
from mrs.group.context import Session
from mrs.group.queues import TargetQueue
from mrs.group.shapes import Entry


class ConfirmRun:
    """The confirms gathered so far in one receive, for one session and queue."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.queue: TargetQueue | None = None
        self.batch = WriteBatch.empty()
        self.confirms: list[tuple[Entry, int]] = []
        """Each confirmed entry with its Confirm's request id, in arrival order."""

    def add(self, queue: TargetQueue, entry: Entry, request_id: int) -> None:
        """One confirmed entry of `queue` (the run's queue: `Handover` ends a run
        before a confirm of another queue joins), whose deletes `Handover` has just
        written into `batch` (mrs.group.guarantees: the rule of what a confirm deletes)."""
        self.queue = queue
        self.confirms.append((entry, request_id))

    def take(self) -> tuple[TargetQueue, WriteBatch, list[tuple[Entry, int]]] | None:
        """What was gathered (None if nothing), leaving the run empty for more."""
        queue = self.queue
        if queue is None or not self.confirms:
            return None
        taken = (queue, self.batch, self.confirms)
        self.queue = None
        self.batch = WriteBatch.empty()
        self.confirms = []
        return taken

