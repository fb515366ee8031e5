"""Dequeue and confirm notices of nonrecoverable messages from other groups, kept until
the sending group has them.

Why: a WF/AK_DEQ or WF/AK_ACK message from another group is in memory here; when it
is got (DEQ) or confirmed (ACK), its sender waits for the notice: a WF put for its
answer, an AK put for its MRS_ACK. Sent once, best effort, the notice was lost when
the link was down at that moment, and the sender waited for ever. So each notice is
kept (in memory, like the message it reports on) until the sender's group answers
it, and sent again whenever the link comes back. The sender's group reports a seq
once (its waiter is gone after the first), so a notice that arrives twice does no
harm. A restart of this group loses the notices it keeps, as it loses the messages.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mrs.core.refusals import RefusalLog
from mrs.limits import RECEIPTS_PER_FRAME_MAX as RECEIPTS_PER_FRAME_MAX
from mrs.limits import RECEIPTS_PER_PEER_MAX as RECEIPTS_PER_PEER_MAX
from mrs.model import Status
from mrs.protocol.link_events import Notice

if TYPE_CHECKING:
    from mrs.group.peers import LinkPort

log = logging.getLogger("mrs.receipts")



@dataclass(eq=False)
class Receipts:
    pending: dict[int, dict[int, type[Notice]]] = field(default_factory=dict)
    """Peer group -> seq -> DeqNotice or AckNotice, not yet answered by that group."""
    lost: RefusalLog = field(
        default_factory=lambda: RefusalLog(log, level=logging.ERROR, line_format="{message}")
    )
    """Notices dropped beyond RECEIPTS_PER_PEER_MAX: one line per peer at most every
    REFUSAL_LOG_INTERVAL_S, with the count of those not shown. Why: while a peer's
    link stayed down, every further message of it got here wrote an ERROR line."""

    def add(self, peer_id: int, kind: type[Notice], seq: int, link: LinkPort | None) -> None:
        """Keep a notice for `peer_id`; send it now if its link is up."""
        kept = self.pending.setdefault(peer_id, {})
        if seq not in kept and len(kept) >= RECEIPTS_PER_PEER_MAX:
            self.lost.refused(
                "receipts",
                str(peer_id),
                f"{kind.kind} notice for message {seq} lost: "
                f"{RECEIPTS_PER_PEER_MAX} already wait for group {peer_id}",
            )
            return
        kept[seq] = kind
        if link is not None:
            self._send(peer_id, [seq], link)

    def link_up(self, peer_id: int, link: LinkPort) -> None:
        """Send again every notice the peer has not answered."""
        seqs = list(self.pending.get(peer_id, {}))
        for start in range(0, len(seqs), RECEIPTS_PER_FRAME_MAX):
            self._send(peer_id, seqs[start : start + RECEIPTS_PER_FRAME_MAX], link)

    def count(self, peer_id: int) -> int:
        return len(self.pending.get(peer_id, {}))

    def _send(self, peer_id: int, seqs: list[int], link: LinkPort) -> None:
        kept = self.pending[peer_id]
        notices = [kept[seq](seq, int(Status.SUCCESS)) for seq in seqs]

        def answered() -> None:
            for seq in seqs:
                kept.pop(seq, None)

        link.send_notices(notices, answered)
