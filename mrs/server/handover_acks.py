"""A planned hand-over's two ends, as the active's server sees them: the old active
paused, its last commits answered, the MRS_ACKs it owes recorded (`ServerHandOver`,
for mrs.replication.active `Active.hand_over`), and the new active handing those
MRS_ACKs out (`hand_out_owed_acks`).

Why: an MRS_ACK lives in its response queue in the active's memory until its sender
gets it; a planned switch-over stopped the old active with them, so an AK sender that
had not yet got its MRS_ACKs never had them, though issue 51 asks that a planned
switch-over lose nothing (a crash still may: docs/replication.md).
"""

from __future__ import annotations

import logging

import msgpack
import trio

from journals import Journal, JournalError, WriteBatch
from mrs.model import MRS_ACK_SOURCE_QUEUE, MRS_ACK_TYPE, MRS_CLASS, Address, Psb
from mrs.replication.active import HANDOVER_ACKS_KEY
from mrs.server.group_server import GroupServer

log = logging.getLogger("mrs.server")


class ServerHandOver:
    """The old active's server during a planned hand-over (`HandOverServer`)."""

    def __init__(self, server: GroupServer) -> None:
        self.server = server

    def pause(self) -> None:
        if self.server.connections is not None:
            self.server.connections.pause()

    def resume(self) -> None:
        if self.server.connections is not None:
            self.server.connections.resume()

    def commit_now(self) -> None:
        self.server.commit_now()

    def owed_acks(self) -> list[tuple[int, int, bytes]]:
        """The MRS_ACKs waiting in this group's queues (made here, not handed out):
        (response queue's group, its queue, the MRS_ACK's body: the PSB)."""
        group = self.server.group
        if group is None:
            return []
        owed: list[tuple[int, int, bytes]] = []
        for queue in group.queues.values():
            for entry in queue.pending:
                if (
                    entry.msg_class == MRS_CLASS
                    and entry.msg_type == MRS_ACK_TYPE
                    and entry.source.group == group.config.id
                    and entry.source.queue == MRS_ACK_SOURCE_QUEUE
                    and entry.body is not None
                ):
                    owed.append((entry.target.group, entry.target.queue, bytes(entry.body)))
        return owed

    def serves_clients(self) -> bool:
        """Whether a client is attached to one of its queues now (a link from another
        group is none: its transfers are answered once committed, as a WF put is)."""
        return any(
            session.attached is not None and not session.closed
            for session in self.server.sessions
        )

    async def written(self) -> None:
        async with trio.open_nursery() as nursery:
            for session in list(self.server.sessions):
                if not session.closed:
                    nursery.start_soon(session.flushed)


def hand_out_owed_acks(server: GroupServer) -> None:
    """On becoming active: the MRS_ACKs a planned hand-over's old active recorded as
    owed are handed to their response queues once the record's delete is as durable
    as an answer. Why after: an active lost before that leaves the record to the
    next one, which hands them out instead; none is handed out twice."""
    group = server.group
    assert group is not None  # the server is running
    key = HANDOVER_ACKS_KEY.encode()
    value = group.store.get_raw(Journal.META, key)
    if value is None:
        return
    try:
        term, owed = msgpack.unpackb(value)
        acks = [(Address(g, q), Psb.from_wire(msgpack.unpackb(body))) for g, q, body in owed]
    except (ValueError, TypeError) as error:
        log.error("the MRS_ACKs owed at the last hand-over are unreadable, dropped: %s", error)
        acks, term = [], 0
    # A copy of one of these puts re-sent under its key makes no MRS_ACK of its own
    # (mrs.group.reply `PutReply.report_copy`): it has this one. Before the delete is
    # durable: a copy may come meanwhile; should the delete fail, the next active
    # hands them out, and a copy here still makes none.
    group.umas.sequence.carried_over.update(psb.seq for _, psb in acks)

    def deleted(error: JournalError | None) -> None:
        if error is not None:
            log.error("the MRS_ACKs owed at the last hand-over wait: %s", error)
            return
        for response_queue, psb in acks:
            group.umas.acks.send(response_queue, psb)
        if acks:
            log.info("%d MRS_ACKs owed at term %d's hand-over handed out", len(acks), term)

    group.writer.submit(WriteBatch.empty().delete(Journal.META, key), deleted)
