"""Wire one group's rooms together over a shared context, and face the server with them.

`Group` is only the switchboard: it builds the context and the rooms in dependency
order (sequence, peers, DQF, UMAs, outbound, notices, drain, inbound, intake,
hand-over, recovery) and forwards each client request to the room that serves it.
No room holds a reference to `Group`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from journals import GroupCommitWriter, InlineWriter, Journal
from journals.protocol import Store
from mrs import protocol as wire
from mrs.config.bus import BusConfig, GroupConfig
from mrs.config.guards import Guards
from mrs.group.acks import AckOutbox, AckWaits, RecentAcks
from mrs.group.batch_get import BatchGet
from mrs.group.confirm_run import ConfirmRun
from mrs.group.context import GroupContext, Session, Timers
from mrs.group.dlq_leases import DlqReaders
from mrs.group.dqf import Dqf
from mrs.group.drain import Drain
from mrs.group.guarantees import KEPT, Guarantees
from mrs.group.handover import Handover
from mrs.group.held_offers import HeldOffers
from mrs.group.inbound import Inbound
from mrs.group.intake import Intake
from mrs.group.journal_pages import read_page
from mrs.group.memory_quota import over_bound
from mrs.group.notices import Notices
from mrs.group.outbound import Outbound
from mrs.group.pcj_control import PcjControl
from mrs.group.peers import Peers
from mrs.group.queue_lookup import QueueLookup
from mrs.group.queues import TargetQueue
from mrs.group.receipts import Receipts
from mrs.group.recovery import Recovery
from mrs.group.sequence import Sequence
from mrs.group.umas import Umas
from mrs.model import Status


@dataclass(eq=False)
class LinkRooms:
    """What a link session needs of its group: the rooms that send, drain, receive
    and notify, the peers' state, and the timers (for the drain's RETRY backoff)."""

    peers: Peers
    outbound: Outbound
    drain: Drain
    inbound: Inbound
    notices: Notices
    timers: Timers


class Group:
    """One group's message recovery service: put, get, confirm, recovery — without sockets.

    Storage, clock and timers are passed in, so the same code serves real TCP
    clients and runs inside a deterministic simulation. Nothing is reported as
    stored before its transaction is on disk."""

    def __init__(
        self,
        bus: BusConfig,
        config: GroupConfig,
        store: Store,
        writer: GroupCommitWriter | InlineWriter,
        timers: Timers,
        clock_ns: Callable[[], int] = time.time_ns,
        guarantees: Guarantees = KEPT,
    ) -> None:
        """`guarantees`: the rules the rooms keep (mrs.group.guarantees); only a
        harness passes a broken build's (mrs.testing.broken_builds)."""
        ctx = GroupContext(bus, config, store, writer, timers, clock_ns)
        self.ctx = ctx
        self.sequence = Sequence(ctx)
        self.peers = Peers(ctx)
        self.dqf = Dqf(ctx, self.peers)
        self.ack_outbox = AckOutbox(ctx, self.peers)
        ack_waits = AckWaits(ctx)
        self.umas = Umas(
            ctx, self.sequence, self.dqf, self.peers, self.ack_outbox, ack_waits=ack_waits
        )
        self.receipts = Receipts()
        self.outbound = Outbound(
            ctx, self.peers, self.umas, ack_waits, self.ack_outbox, self.receipts
        )
        self.umas.outbound = self.outbound
        self.notices = Notices(ctx, self.peers, self.umas, ack_waits, self.receipts)
        self.drain = Drain(ctx, self.peers, self.umas, ack_waits=ack_waits)
        self.inbound = Inbound(ctx, self.peers, self.dqf, self.umas, self.notices, RecentAcks())
        self.dlq_readers = DlqReaders()
        self.intake = Intake(
            ctx, self.sequence, self.dqf, self.umas, self.outbound, self.dlq_readers, guarantees
        )
        self.handover = Handover(ctx, self.dqf, self.notices, self.dlq_readers, guarantees)
        self.dqf.premark = self.handover
        self.batch_get = BatchGet(ctx, self.handover)
        self.umas.offers.serve = self.handover.serve_waiting_gets
        self.recovery = Recovery(ctx, self.sequence, self.dqf, self.umas, self.outbound)
        self.lookup = QueueLookup(ctx, self.peers)
        self.pcj_control = PcjControl(ctx)
        self.link_rooms = LinkRooms(
            self.peers, self.outbound, self.drain, self.inbound, self.notices, timers
        )

    # What the server and the operator's tools read.
    @property
    def config(self) -> GroupConfig:
        return self.ctx.config

    @property
    def store(self) -> Store:
        return self.ctx.store

    @property
    def writer(self) -> GroupCommitWriter | InlineWriter:
        return self.ctx.writer

    @property
    def queues(self) -> dict[int, TargetQueue]:
        return self.ctx.queues

    def answers_held(self) -> HeldOffers:
        """Around a commit's report (`with`): the MRS_ACKs it makes are offered
        together at its end (mrs.group.held_offers)."""
        return self.umas.offers

    # Requests, each served by one room.
    def recover(self) -> None:
        self.recovery.recover()

    def attach(self, session: Session, request: wire.Attach) -> None:
        self.intake.attach(session, request)

    def detach(self, session: Session) -> None:
        self.intake.detach(session)

    def put(self, session: Session, request: wire.Put) -> None:
        self.intake.put(session, request)

    def get(self, session: Session, request: wire.Get) -> None:
        self.handover.get(session, request)

    def get_batch(self, session: Session, request: wire.GetBatch) -> None:
        self.batch_get.get_batch(session, request)

    def give_back(self, session: Session, request: wire.GiveBack) -> None:
        self.batch_get.give_back(session, request)

    def cancel_get(self, session: Session, request: wire.CancelGet) -> None:
        self.handover.cancel_get(session, request)

    def refuse_parked_gets(self, session: Session, status: Status, message: str) -> int:
        """Answer the session's parked gets with `status` (its right to get was taken
        away while they waited): no message is handed to them from now on. A get a
        commit under way has reserved is answered by that commit. Returns how many."""
        queue = session.attached
        if queue is None:
            return 0
        session_id = session.id
        refused = [w for w in queue.waiters if w.session_id == session_id and not w.reserved]
        for waiter in refused:
            queue.unpark(waiter)
            waiter.cancel_timer()
            session.send(wire.Failure(waiter.request_id, int(status), message))
        return len(refused)

    def locate(self, request: wire.Locate) -> wire.Located:
        """A queue's address by its name (mrs.group.queue_lookup), or Refused."""
        return self.lookup.locate(request)

    def show_pending(self, session: Session, request: wire.ShowPending) -> None:
        """Messages waiting on the queues asked, here and over links: answered on
        `session` (PendingCounts or Failure) once every group has counted."""
        self.lookup.show_pending(request, session.send)

    def set_pcj(self, session: Session, request: wire.SetPcj) -> None:
        """MRS_SET_PCJ: the default journaling action and a roll of the PCJ's segment
        (mrs.group.pcj_control), answered PcjState on `session` once durable."""
        self.pcj_control.set_pcj(session, request)

    def read_journal(self, request: wire.ReadJournal) -> wire.JournalPage:
        """A page of the PCJ or DLJ for a remote reader (mrs.group.journal_pages)."""
        return read_page(self.ctx.store, request)

    def confirm(
        self, session: Session, request: wire.Confirm, run: ConfirmRun | None = None
    ) -> None:
        self.handover.confirm(session, request, run)

    def end_confirm_run(self, run: ConfirmRun) -> None:
        """Submit the confirms `run` gathered (mrs.group.confirm_run)."""
        self.handover.end_confirm_run(run)

    def status_info(self) -> dict:
        ctx = self.ctx
        return {
            "group": ctx.config.id,
            "name": ctx.config.name,
            "epoch": ctx.epoch,
            "dqf_messages": ctx.counts.dqf,
            "dedupe_keys": ctx.store.count(Journal.DEDUPE),
            "corrupt_records": list(ctx.corrupt),
            "quarantined": ctx.quarantined,
            "mrs_acks_sent": [[*psb, count] for psb, count in self.umas.acks.sent.items()],
            "dqf_unconfigured_queues": self.recovery.unconfigured_counts(),
            "saf_unlinked_groups": {
                str(peer): count for peer, count in sorted(self.outbound.unlinked_saf.items())
            },
            "owed_unlinked_groups": self.outbound.unlinked_owed(),
            "writer": ctx.writer.stats.as_dict(),
            "links": self.peers.status_info(self.ack_outbox.owed, self.receipts.count),
            "dqf_held_for_drains": self.peers.room.status_info(),
            "dlq_readers": self.dlq_readers.status_info(),
            "pcj": self.pcj_control.status_info(),
            "queues": {
                str(queue.address): _queue_status(queue, ctx.config.guards)
                for queue in ctx.queues.values()
            },
        }


def _queue_status(queue: TargetQueue, guards: Guards) -> dict:
    status = {
        "name": queue.config.name,
        "pending": queue.waiting,
        "unconfirmed": len(queue.unconfirmed),
        "dqf_depth": queue.waiting
        - queue.memory_count
        + sum(1 for entry in queue.unconfirmed.values() if entry.journaled),
        "attached": queue.attached_session is not None,
    }
    if (over := over_bound(queue, guards)) is not None:  # only while over: a note, not a column
        status["over_bound"] = over
    if queue.unconfirmed and len(queue.unconfirmed) >= queue.unconfirmed_max:
        # Only while at it: a consumer that stopped confirming shows on its queue's row.
        status["at_unconfirmed_max"] = queue.unconfirmed_max
    return status
