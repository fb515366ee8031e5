"""The rules that keep MRS's promises, at the points where a broken build departs from them.

Why a part of its own: the simulator proves its checker by running builds that break
one promise on purpose (answer STORED before the commit, mark a redelivery as a
first delivery, ...). Those builds live in `mrs.testing.broken_builds`; the rooms
test no switch. They call the one `Guarantees` part they were given when the group
was wired (`Group(guarantees=...)`), and the server runs `KEPT`, the correct rules,
unless a harness (`mrs serve` under MRS_HARNESS_UNSAFE, `mrs sim swarm --unsafe`)
hands it a broken one. Each method is the whole rule at its point, so a broken build
replaces a decision, not a branch of the room. The call through the part costs
within the noise of a message (benchmarks/README.md, "Fault switches out of the
rooms").

Layer: group; imports the group's data structures and `core` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Protocol

from journals import Journal, WriteBatch
from mrs.core.delivery import CONFIRMREQ as _CONFIRMREQ
from mrs.core.delivery import POSSDUPL as _POSSDUPL
from mrs.core.delivery import delivery_status_on_get
from mrs.group.context import Outcome
from mrs.group.queues import TargetQueue
from mrs.group.shapes import Entry
from mrs.model import POSSIBLE_DUPLICATE_HEADER

if TYPE_CHECKING:
    from mrs.group.dqf import Dqf
    from mrs.group.reply import PutReply

_DQF: Final = Journal.DQF
_MARKS: Final = Journal.MARKS
"""Read per confirm: an enum member's alias saves ~30-50 ns per read once compiled
(benchmarks/README.md, "Final aliases")."""


class Guarantees(Protocol):
    """What the rooms ask at each point where a promise is kept or broken."""

    broken: frozenset[str]
    """The promises this part breaks on purpose (empty for `KEPT`): logged at start."""

    def delivery_status(self, queue: TargetQueue, entry: Entry) -> tuple[int, bool]:
        """The status a delivery of `entry` carries, and whether it needs a confirm."""
        ...

    def confirm_writes(self, batch: WriteBatch, key: bytes) -> None:
        """Add to `batch` what makes one confirm durable (the message's queue key)."""
        ...

    def detach(self, queue: TargetQueue) -> list[Entry]:
        """The attached consumer left `queue`: its unconfirmed messages, given back."""
        ...

    def store(
        self, dqf: Dqf, entry: Entry, keys: list[str], reply: PutReply, outcome: Outcome
    ) -> None:
        """Journal a recoverable put; its sender hears `outcome` of the commit."""
        ...


class KeptGuarantees:
    """The correct rules: what production runs."""

    def __init__(self) -> None:
        self.broken: frozenset[str] = frozenset()

    def delivery_status(self, queue: TargetQueue, entry: Entry) -> tuple[int, bool]:
        """POSSDUPL exactly when the message may have been delivered before: it was
        handed out already, or it came back from a dead-letter reader that may have
        forwarded it. A returned (RTS) or dead-lettered copy has a forced status and
        needs no confirm, whatever its original mode (an ACK-mode copy would otherwise
        stay unconfirmed); a DLQ get is a lease and always needs one."""
        leased = queue.shared  # mrs.group.dlq_leases
        needs_confirm = leased or (entry.needs_confirm and entry.delivery_status is None)
        status = (not leased and entry.delivery_status) or delivery_status_on_get(
            needs_confirm, entry.times_delivered
        )
        if status == _CONFIRMREQ and entry.headers and entry.headers.get(POSSIBLE_DUPLICATE_HEADER):
            status = _POSSDUPL
        return status, needs_confirm

    def confirm_writes(self, batch: WriteBatch, key: bytes) -> None:
        """A confirmed message is gone for good: its DQF record and its delivery mark
        are deleted in the transaction the confirm is answered after."""
        batch.delete(_DQF, key).delete(_MARKS, key)

    def detach(self, queue: TargetQueue) -> list[Entry]:
        """Nothing delivered but unconfirmed is lost: it waits at the front of its
        queue to be delivered again (mrs.group.queues.TargetQueue.detach)."""
        return queue.detach()

    def store(
        self, dqf: Dqf, entry: Entry, keys: list[str], reply: PutReply, outcome: Outcome
    ) -> None:
        """Nothing is reported stored before its transaction is on disk: `reply` is
        answered only from the commit's `outcome`."""
        dqf.store_in_dqf(entry, keys, outcome)


KEPT: Final = KeptGuarantees()
"""The part every group runs unless a harness passes a broken one."""
