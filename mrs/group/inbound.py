"""Room: what a peer group sends — store or queue each transferred message and answer.

The receiving group dedupes by (origin group, seq), so a message resent after a link
drop is stored once. FIFO across failures: once an ordered (SAF drain) recoverable
message of a connection could not be stored, every later ordered one is answered
LINK_DOWN without being stored, until the peer says it starts over ("resync"), so
nothing overtakes the message that failed. A direct message stands alone: its
refusal takes its own UMA and holds nothing up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from msgspec.structs import asdict

from journals import CorruptRecord, Journal, decode_record, queue_key
from mrs.core.refusals import RefusalLog
from mrs.group.acks import RecentAcks
from mrs.group.context import GroupContext, Outcome
from mrs.group.dqf import Dqf
from mrs.group.drain import SEQ_HELD
from mrs.group.idempotency import origin_key, scoped_key
from mrs.group.intake import enqueue_in_memory
from mrs.group.notices import Notices
from mrs.group.peers import Inbound as InboundStream
from mrs.group.peers import Peers
from mrs.group.quarantine import PoisonTransfer, transfer_problem
from mrs.group.shapes import (
    Entry,
    entry_from_record,
    entry_from_transfer,
    headers_problem,
    idempotency_key,
    transfer_sound,
)
from mrs.group.transfer import RECEIVER_DEAD_LETTERED, Answer, link_results
from mrs.group.umas import Umas
from mrs.model import MRS_ACK_TYPE, MRS_CLASS, InterestPoint, Status
from mrs.protocol.link_events import AckNotice, DeqNotice, LinkResult, TransferredMessage

log = logging.getLogger("mrs.forwarding")

# Read for every message of a transfer: an enum member's alias saves ~30-50 ns per read
# once compiled (benchmarks/README.md, "Final aliases").
_STORED: Final = Status.STORED
_DLQ_SUCCESS: Final = Status.DLQ_SUCCESS
_DQF_FULL: Final = Status.DQF_FULL


@dataclass(eq=False)
class Inbound:
    ctx: GroupContext
    peers: Peers
    dqf: Dqf
    umas: Umas
    notices: Notices
    recent_acks: RecentAcks
    """MRS_ACKs other groups sent here, so a resent one is dropped."""
    held_refusals: RefusalLog = field(init=False)
    """Transfers under seqs held here, logged at most once per peer per
    REFUSAL_LOG_INTERVAL_S (`_held_already`): the peer's drain retries meanwhile."""
    held_resends: RefusalLog = field(init=False)
    """Transfers that only resent what is stored here, at INFO (`_held_already`)."""
    poison_lines: RefusalLog = field(init=False)
    """Messages no client could put, one ERROR line per peer per REFUSAL_LOG_INTERVAL_S
    with the count not shown. Why: a line each let a lying or broken peer write 256
    ERROR lines per frame, as fast as it could send (1,024 for four frames)."""

    def __post_init__(self) -> None:
        self.held_refusals = RefusalLog(log, clock_s=self._clock_s, line_format="{peer} {message}")
        self.held_resends = RefusalLog(
            log, clock_s=self._clock_s, level=logging.INFO, line_format="{peer} {message}"
        )
        self.poison_lines = RefusalLog(
            log, clock_s=self._clock_s, level=logging.ERROR, line_format="{peer} {message}"
        )

    def _clock_s(self) -> float:
        return self.ctx.clock_ns() / 1e9

    def accept_transfer(
        self,
        peer_id: int,
        messages: list[TransferredMessage],
        respond: Callable[[list[LinkResult]], None],
        inbound: InboundStream,
    ) -> None:
        """Store/queue what a peer sent; `respond` gets one LinkResult per message, in
        order, once every recoverable one is durable. The ordered messages before a
        failed one are stored (a transfer does not need room for all of its messages)."""
        decoded = [self._entry_or_poison(peer_id, message) for message in messages]
        answers = _TransferAnswers(
            self.peers, peer_id, inbound, respond, [(0, 0, 0)] * len(decoded), len(decoded)
        )
        answers.all_ordered_stored = any(ordered for _, ordered in decoded)
        answers.first_ordinal = inbound.inbound_ordinal
        if not decoded:
            respond([])
        # The origin dedupe key of each recoverable message ("" for the others), all
        # read in one transaction (mrs.group.idempotency)
        origins = [
            origin_key(peer_id, entry.seq)
            if isinstance(entry, Entry) and entry.delivery.recoverable
            else ""
            for entry, _ in decoded
        ]
        app_keys = self.dqf.app_keys
        app_keys.read_ahead([key for key in origins if key])
        held = self._held_already(peer_id, decoded, origins)
        try:
            self._accept_all(peer_id, decoded, origins, answers, inbound, held)
        finally:
            app_keys.end_read_ahead()

    def _held_already(
        self, peer_id: int, decoded: list[tuple[Entry | PoisonTransfer, bool]], origins: list[str]
    ) -> dict[int, bool]:
        """The recoverable messages whose seq this group's DQF holds already (one read
        transaction): seq -> whether the record held is this very message.

        Why: a peer forgets a message's dedupe key here once its SAF record is gone.
        Sent again after that (a bug, a lie), the same message would overwrite its
        record and queue a second copy of the seq: it is answered STORED instead. A
        peer whose journals were replaced and reset (mrs.group.incarnation) counts
        its seqs from the start again: its new message would overwrite an old one
        still held, lost at the next restart. It is refused DQF_FULL, answered with
        stored seq SEQ_HELD: it waits in the peer's SAF, its drain in RETRY, until the
        old one is confirmed. Logged at most once per REFUSAL_LOG_INTERVAL_S per peer
        (`held_refusals`, with the count of transfers not shown): the drain retries
        meanwhile; a transfer that only resent messages stored here, at INFO
        (`held_resends`).
        Only seqs at or below the peer's `held_seq_max` are read: a drain's seqs rise
        above every seq held, and reading each one's key cost 3% of its receiver's
        CPU (benchmarks/README.md)."""
        peer = self.peers[peer_id]
        held_max = peer.held_seq_max
        keys = [
            (entry, queue_key(entry.target.queue, entry.seq))
            for (entry, _), origin in zip(decoded, origins, strict=True)
            if origin and isinstance(entry, Entry) and entry.seq <= held_max
        ]
        for entry, _ in decoded:  # what this transfer may store: held from now on
            if entry.seq > peer.held_seq_max:
                peer.held_seq_max = entry.seq
        if not keys:  # a drain's usual case: every seq above those held (no read)
            return {}
        values = self.ctx.store.get_raw_many(Journal.DQF, [key for _, key in keys])
        held = {
            entry.seq: _same_message(entry, value, key)
            for (entry, key), value in zip(keys, values, strict=True)
            if value is not None
        }
        if held:
            resent = sum(held.values())
            # Only resends: a link dropped before its acknowledgement arrived, the
            # ordinary aftermath of every cut mid-transfer, answered stored. Before, it
            # was a WARNING after each cut that read like replaced journals.
            lines = self.held_resends if resent == len(held) else self.held_refusals
            lines.refused(
                "seq held",
                f"group {peer_id}",
                f"sent {len(held)} message(s) under seqs this group holds already, e.g. "
                f"seq {min(held)}: {resent} resent (answered stored), {len(held) - resent} "
                "other (waiting for the seq to be confirmed)",
            )
        return held

    def _accept_all(
        self,
        peer_id: int,
        decoded: list[tuple[Entry | PoisonTransfer, bool]],
        origins: list[str],
        answers: _TransferAnswers,
        inbound: InboundStream,
        held: dict[int, bool],
    ) -> None:
        for index, (entry, ordered) in enumerate(decoded):
            ordinal = None
            poison = isinstance(entry, PoisonTransfer)
            if ordered and (poison or (isinstance(entry, Entry) and entry.delivery.recoverable)):
                ordinal = inbound.inbound_ordinal
                inbound.inbound_ordinal += 1
            outcome = _Answer(answers, index, entry.seq, ordinal)
            if ordinal is not None and isinstance(entry, Entry):
                outcome.dead_letter_here, outcome.entry = self, entry
            if held and entry.seq in held:
                if held[entry.seq]:
                    outcome(_STORED, entry.seq, "")
                else:
                    outcome(_DQF_FULL, SEQ_HELD, f"seq {entry.seq} is held here by another message")
                continue
            self._accept_one(peer_id, entry, origins[index], ordinal, outcome, inbound)

    def _accept_one(
        self,
        peer_id: int,
        entry: Entry | PoisonTransfer,
        origin: str,
        ordinal: int | None,
        outcome: Outcome,
        inbound: InboundStream,
    ) -> None:
        if ordinal is not None and inbound.inbound_failed_at is not None:
            outcome(Status.LINK_DOWN, entry.seq, "an earlier message of this link failed")
        elif isinstance(entry, PoisonTransfer):
            self.poison_lines.refused(
                "poison",
                f"group {peer_id}",
                f"sent message {entry.seq} that no client could put ({entry.problem}): "
                "refused BADPARAM",
            )
            outcome(Status.BADPARAM, entry.seq, entry.problem)
        elif entry.body is not None and len(entry.body) > self.ctx.limits.message_bytes_max:
            # This group's own limit, whatever the sender checked (e.g. a message
            # its SAF UMA stored): a permanent refusal, dead-lettered by the sender.
            outcome(Status.MSGTOOBIG, entry.seq, "body exceeds message_bytes_max")
        elif entry.headers and (too_big := headers_problem(entry.headers)) is not None:
            outcome(Status.MSGTOOBIG, entry.seq, too_big)  # a peer that does not check
        elif entry.delivery.recoverable:
            keys = [origin]
            if (key := idempotency_key(entry.headers)) is not None:
                keys.append(scoped_key(entry.source, entry.target, key))
            if ordinal is None:
                self.dqf.store_in_dqf(entry, keys, outcome)
            else:
                guard = _StillInOrder(inbound, ordinal)
                self.dqf.store_in_dqf(entry, keys, outcome, stream=inbound, guard=guard)
        else:
            self._accept_memory(peer_id, entry, outcome)

    def dead_letter_here(
        self,
        peer_id: int,
        entry: Entry,
        outcome: Outcome,
        status: Status,
        stored_seq: int,
        reason: str,
    ) -> None:
        """Channel rules, receiving side: a SAF-drained message this group refuses for
        good goes to this group's DLQ, answered DLQ_SUCCESS once it is there (journaled
        when it is recoverable: its sender was told STORED, mrs.group.umas)."""
        if status not in RECEIVER_DEAD_LETTERED:
            outcome(status, stored_seq, reason)
            return
        text = f"group {self.ctx.group_id} refused it from group {peer_id}: {reason}"
        self.umas.put_on_dead_letter_queue(
            entry,
            status,
            text,
            lambda done: outcome(Status.DLQ_SUCCESS if done else status, stored_seq, reason),
            acknowledged=True,
        )

    def _accept_memory(self, peer_id: int, entry: Entry, outcome: Outcome) -> None:
        is_ack = entry.msg_class == MRS_CLASS and entry.msg_type == MRS_ACK_TYPE
        if is_ack and not self.recent_acks.first_time(peer_id, entry.seq):
            outcome(Status.ENQUEUED, entry.seq, "")  # resent after a link drop: queued once
            return
        point = entry.delivery.interest_point
        if point is InterestPoint.DEQ:
            entry.on_dequeue = lambda _e: self.notices.notify_now(peer_id, DeqNotice, entry.seq)
        elif point is InterestPoint.ACK:
            entry.on_confirm = lambda _e: self.notices.notify_now(peer_id, AckNotice, entry.seq)
        status, reason = enqueue_in_memory(self.ctx, entry)
        outcome(status, entry.seq, reason)

    def _entry_or_poison(
        self, peer_id: int, message: TransferredMessage
    ) -> tuple[Entry | PoisonTransfer, bool]:
        """The entry for a transferred message, or why a client could not have put it
        (refused alone). TransferError: it still does not make an entry."""
        if not transfer_sound(message):
            problem = transfer_problem(asdict(message))
            if problem is not None:
                return PoisonTransfer(message.seq, problem), message.ordered
        return entry_from_transfer(self.ctx.group_id, peer_id, message)


@dataclass(eq=False)
class _TransferAnswers:
    """The answers of one transfer, sent together once every message has one."""

    peers: Peers
    peer_id: int
    inbound: InboundStream
    respond: Callable[[list[LinkResult]], None]
    results: list[Answer]
    """One per message, in order; filled in as they are answered."""
    remaining: int
    all_ordered_stored: bool = False
    first_ordinal: int = 0

    def answer(
        self, index: int, seq: int, ordinal: int | None, status: Status, stored_seq: int
    ) -> None:
        if ordinal is not None and status != _STORED and status != _DLQ_SUCCESS:
            self.all_ordered_stored = False
            failed_at = self.inbound.inbound_failed_at
            if failed_at is None or ordinal < failed_at:
                self.inbound.inbound_failed_at = ordinal
            if status == _DQF_FULL and stored_seq != SEQ_HELD:
                # A seq held here is no matter of room: its drain backs off instead
                # (mrs.group.drain.SEQ_HELD), so no slot is held for it meanwhile.
                self.peers.drain_refused(self.peer_id, ordinal)
        self.results[index] = (seq, int(status), stored_seq)
        self.remaining -= 1
        if self.remaining == 0:
            if self.all_ordered_stored:
                self.peers.drain_satisfied(self.peer_id, self.first_ordinal)
            self.respond(link_results(self.results))


@dataclass(eq=False, slots=True)
class _Answer:
    """The outcome of one message of a transfer: its place among the transfer's answers.
    For an ordered (SAF-drained) entry, `dead_letter_here` is set: a refusal for good
    goes to this group's DLQ first (channel rules, `Inbound.dead_letter_here`). One
    object per message rather than a wrapper around it: a drain makes one for each."""

    answers: _TransferAnswers
    index: int
    seq: int
    ordinal: int | None
    dead_letter_here: Inbound | None = None
    entry: Entry | None = None

    def __call__(self, status: Status, stored_seq: int, reason: str) -> None:
        room, entry = self.dead_letter_here, self.entry
        if room is not None and entry is not None and status in RECEIVER_DEAD_LETTERED:
            plain = _Answer(self.answers, self.index, self.seq, self.ordinal)
            room.dead_letter_here(self.answers.peer_id, entry, plain, status, stored_seq, reason)
            return
        self.answers.answer(self.index, self.seq, self.ordinal, status, stored_seq)


def _same_message(entry: Entry, value: bytes, key: bytes) -> bool:
    """Whether the DQF record `value` holds `entry` itself (a resend), not another
    message under its seq; an unreadable record is not this message."""
    try:
        held = entry_from_record(decode_record(value, Journal.DQF.value, key))
    except CorruptRecord:
        return False
    return (held.body, held.source, held.put_time_ns) == (
        entry.body,
        entry.source,
        entry.put_time_ns,
    )


@dataclass(eq=False, slots=True)
class _StillInOrder:
    """Writer guard: commit an ordered message only if nothing before it failed."""

    inbound: InboundStream
    ordinal: int

    def __call__(self) -> bool:
        failed_at = self.inbound.inbound_failed_at
        return failed_at is None or self.ordinal < failed_at
