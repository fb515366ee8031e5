"""Dispatches each request of a connection to the group, within the connection's quotas.

Synchronous, one call per frame (no await per message): a request over a quota is
answered EXCEEDQUOTA, a refused one with its status, an unexpected failure with
SERVER_ERROR; only a protocol error closes the connection.

A class of its own (`Dispatcher`): every request of every connection passes here, so
the module is compiled (mrs.native.loader). The server makes one with its
collaborators once its group exists (`GroupServer.run`); `mrs.server.connections`
hands it each receive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NoReturn, cast

from mrs import protocol as wire
from mrs.config.bus import GroupConfig
from mrs.config.guards import Guards
from mrs.core.delivery import Refused
from mrs.core.refusals import RefusalLog, clipped
from mrs.group import Group
from mrs.group.confirm_run import ConfirmRun
from mrs.limits import OUTBOX_BYTES_HIGH, SELECT_SCANNED_PER_ROUND_MAX
from mrs.model import Status
from mrs.protocol.event_types import CANCEL_GET, CONFIRM, GET, GET_BATCH, PUT, PUT_BATCH
from mrs.security.gate import Gate
from mrs.server.client_drains import ClientDrains
from mrs.server.session import ServerSession
from mrs.server.status_answers import StatusAnswers

log = logging.getLogger("mrs.server")


class Dispatcher:
    """Dispatches the requests of every connection of one server.

    A compiled class holding what each request reads (the group, the gate, the
    guards' limits) as its own attributes, made once the group exists: each read is
    then a compiled attribute access, not a lookup through the interpreted server
    (benchmarks/README.md). The server's configuration does not change while it
    runs, so nothing here goes stale."""

    def __init__(
        self,
        group: Group,
        gate: Gate | None,
        client_drains: ClientDrains,
        guards: Guards,
        refusals: RefusalLog,
        config: GroupConfig,
        status_answers: StatusAnswers,
        adopt_link: Callable[[ServerSession, wire.Hello], None],
    ) -> None:
        self.group: Group = group
        self.gate: Gate | None = gate
        self.client_drains: ClientDrains = client_drains
        self.refusals: RefusalLog = refusals
        self.config: GroupConfig = config
        self.status_answers = status_answers
        """Answers StatusRequests, at most one build per interval (GroupServer.status_info)."""
        self.adopt_link = adopt_link
        """Hands a peer's link Hello to its PeerLink (mrs.server.links)."""
        self.requests_in_flight_max: int = guards.requests_in_flight_max
        self.connection_bytes_max: int = guards.connection_bytes_max
        self.parked_gets_max: int = guards.parked_gets_max
        self.marking_bytes: dict[int, int] = group.handover.marking_bytes
        """Bytes of each session's deliveries waiting for their marks' commit
        (`Handover.marking_bytes`): answers on their way, counted as unsent."""
        self.admin: Callable[[ServerSession, wire.AdminRequest], None] | None = None
        """The operator's actions (mrs.ops.admin_actions), set by the server."""
        self.incarnation: Callable[[], bytes] = lambda: b""
        """This group's journals' incarnation once it is durable (b"" before), set by
        the server: told to a client whose Hello says its SAF journal's id."""

    def begin(self, session: ServerSession, request_id: int, body_bytes: int) -> None:
        """Count a request as in flight until answered, or refuse it (EXCEEDQUOTA)."""
        in_flight = session.in_flight
        if len(in_flight) >= self.requests_in_flight_max:
            over_quota(
                self.refusals,
                session,
                "requests_in_flight_max",
                f"{len(in_flight)} requests in flight "
                f"(requests_in_flight_max={self.requests_in_flight_max})",
            )
        if body_bytes:
            held = session.in_flight_bytes + session.account.held_bytes
            if held + body_bytes > self.connection_bytes_max:
                over_quota(
                    self.refusals,
                    session,
                    "connection_bytes_max",
                    f"connection holds {held} bytes of messages "
                    f"(connection_bytes_max={self.connection_bytes_max})",
                )
            session.in_flight_bytes += body_bytes
        in_flight[request_id] = body_bytes

    def begin_get(self, session: ServerSession, request_id: int, timeout_ms: int) -> None:
        """`begin` for a Get or GetBatch, which also counts against parked_gets_max."""
        queue = session.attached
        parked_max = self.parked_gets_max
        if queue is not None and timeout_ms != 0 and len(queue.waiters) >= parked_max:
            parked = queue.parked(session.id)  # the DLQ's waiters are every reader's
            if parked >= parked_max:
                over_quota(
                    self.refusals,
                    session,
                    "parked_gets_max",
                    f"{parked} gets parked on {queue.address} "
                    f"(parked_gets_max={parked_max})",
                )
        self.begin(session, request_id, 0)

    def dispatch_all(self, session: ServerSession, events: list, first: int = 0) -> int:
        """The events one receive brought, in order from `first`: the receive loop's
        one call per receive, so no interpreted frame per event. A ProtocolError stops
        the rest (the connection is broken), as it did one call at a time. Returns
        where it stopped: len(events), or earlier once the connection's unread
        answers (`answers_bytes`) pass OUTBOX_BYTES_HIGH (a peer that asks for pages
        of a journal, or for journaled messages, and does not read them): the receive
        loop waits for the peer to read, then dispatches the rest. Answers made later
        (after a commit) are not held back. Also earlier once its selective gets looked
        at SELECT_SCANNED_PER_ROUND_MAX messages (`_scanned`): the receive loop lets the
        other connections go first.

        Confirms in a row share one write batch (mrs.group.confirm_run), submitted
        before the next other request and at the end: a request that breaks the
        protocol comes after the confirms before it were submitted, so they are
        written and answered all the same (and `finally` submits them whatever else
        ends the pass)."""
        group = self.group
        run: ConfirmRun | None = None
        index = first
        count = len(events)
        scanned = 0
        try:
            while index < count:
                event = events[index]
                index += 1
                kind = type(event)
                if kind is CONFIRM:
                    if run is None:
                        run = ConfirmRun(session)
                    self.dispatch(session, event, run)
                    continue
                if run is not None:
                    group.end_confirm_run(run)
                if (kind is GET or kind is GET_BATCH) and event.select is not None:
                    scanned += self._scanned(session, event)
                else:
                    self.dispatch(session, event)
                if self.answers_bytes(session) > OUTBOX_BYTES_HIGH:
                    return index
                if scanned > SELECT_SCANNED_PER_ROUND_MAX:
                    return index
        finally:
            if run is not None:
                group.end_confirm_run(run)
        return index

    def _scanned(self, session: ServerSession, event: object) -> int:
        """Dispatch a selective get: the messages its look went through (mrs.group.select_index
        `SelectIndex.scanned`), which a plain get, a put or a confirm never costs."""
        queue = session.attached
        before = 0 if queue is None else queue.index.scanned
        self.dispatch(session, event)
        return 0 if queue is None else queue.index.scanned - before

    def answers_bytes(self, session: ServerSession) -> int:
        """Bytes of answers the session's peer has not read: those queued or being
        written, and deliveries whose marks' commit is under way (`marking_bytes`)."""
        unsent_bytes = session.unsent_bytes
        marking_bytes = self.marking_bytes
        if marking_bytes:
            unsent_bytes += marking_bytes.get(session.id, 0)
        return unsent_bytes

    def dispatch(
        self, session: ServerSession, event: object, run: ConfirmRun | None = None
    ) -> None:
        """One request (or a PutBatch's puts, each answered as if alone); a Confirm's
        deletes join `run` when one is given."""
        if type(event) is PUT_BATCH:  # all in this pass, so one commit stores them
            for put in event.puts:
                self.dispatch(session, put)
            return
        request_id: int = getattr(event, "request_id", 0)
        try:
            self._dispatch_one(session, event, request_id, run)
        except Refused as refused:
            message = refused.message
            if refused.detail is not None and (
                self.gate is None or self.gate.may_read_status(session)
            ):
                message = refused.detail
            session.send(wire.Failure(request_id, int(refused.status), clipped(message)))
        except wire.ProtocolError:
            raise
        except Exception as error:  # noqa: BLE001 - one bad request must not stop the server
            log.exception("request %s from %s failed", clipped(repr(event)), session.peer)
            session.send(
                wire.Failure(
                    request_id,
                    int(Status.SERVER_ERROR),
                    clipped(f"{type(error).__name__}: {error}"),
                )
            )

    def _dispatch_one(
        self,
        session: ServerSession,
        event: object,
        request_id: int,
        run: ConfirmRun | None,
    ) -> None:
        gate = self.gate
        if gate is not None:
            gate.check(session, event)
        group = self.group
        # The requests of a busy connection first, each an exact type test.
        kind = type(event)
        if kind is PUT:
            put = cast(wire.Put, event)  # a cast, not an isinstance: no lookup
            self.begin(session, request_id, len(put.body))
            if put.headers:  # a client SAF journal draining? (mrs status)
                self.client_drains.note(session, put)
            group.put(session, put)
        elif kind is CONFIRM:
            self.begin(session, request_id, 0)
            group.confirm(session, cast(wire.Confirm, event), run)
        elif kind is GET_BATCH:
            get_batch = cast(wire.GetBatch, event)
            self.begin_get(session, request_id, get_batch.timeout_ms)
            group.get_batch(session, get_batch)
        elif kind is GET:
            get = cast(wire.Get, event)
            self.begin_get(session, request_id, get.timeout_ms)
            group.get(session, get)
        elif kind is CANCEL_GET:  # no reply of its own: the get's answer ends both
            # Only a get still in flight may be parked: the look goes through the queue's
            # parked gets, and a flood of cancels of gets long answered held the loop.
            if request_id in session.in_flight:
                group.cancel_get(session, cast(wire.CancelGet, event))
        else:
            _dispatch_rare(self, session, event, request_id)


def over_quota(refusals: RefusalLog, session: ServerSession, limit: str, problem: str) -> NoReturn:
    refusals.refused(
        limit, session.host, f"request refused (EXCEEDQUOTA): {problem} ({session.peer})"
    )
    raise Refused(Status.EXCEEDQUOTA, problem)


def _dispatch_rare(
    dispatcher: Dispatcher, session: ServerSession, event: object, request_id: int
) -> None:
    group = dispatcher.group
    if isinstance(event, wire.Ping):
        session.send(wire.Pong(event.nonce))
    elif isinstance(event, wire.Hello) and event.role == "link":
        session.liveness.handshake_done = True
        dispatcher.adopt_link(session, event)
    elif isinstance(
        event,
        wire.LinkTransfer
        | wire.LinkNotice
        | wire.LinkAck
        | wire.LinkPendingQuery
        | wire.LinkPendingCounts,
    ):
        link = session.link
        if link is None:
            raise wire.RemoteProtocolError(
                f"{type(event).__name__} on a connection that is not a link"
            )
        link.handle(event, session)
    elif isinstance(event, wire.Hello):
        session.liveness.handshake_done = True
        session.answer_batches = event.answer_batches
        session.program = clipped(event.program)
        session.unsent_bytes_max = dispatcher.connection_bytes_max
        config = dispatcher.config
        # A client with a SAF journal says its id and is told the incarnation its
        # journal drains into (clients.saf_journal.ClientJournal.check_home); a client
        # of an earlier release says none and refuses a Welcome with a field it does
        # not know.
        incarnation = dispatcher.incarnation() if event.incarnation else b""
        session.send(
            wire.Welcome(
                wire.PROTOCOL_VERSION,
                config.id,
                config.name,
                config.limits.message_bytes_max,
                incarnation,
            )
        )
    elif isinstance(event, wire.Attach):
        dispatcher.begin(session, request_id, 0)
        group.attach(session, event)
    elif isinstance(event, wire.StatusRequest):
        dispatcher.begin(session, request_id, 0)  # counted while it waits for a build
        dispatcher.status_answers.ask(session, request_id)
    elif isinstance(event, wire.Locate):
        session.send(group.locate(event))
    elif isinstance(event, wire.ShowPending):
        dispatcher.begin(session, request_id, 0)
        group.show_pending(session, event)
    elif isinstance(event, wire.SetPcj):
        dispatcher.begin(session, request_id, 0)
        group.set_pcj(session, event)
    elif isinstance(event, wire.ReadJournal):
        session.send(group.read_journal(event))
    elif isinstance(event, wire.AdminRequest) and dispatcher.admin is not None:
        dispatcher.begin(session, request_id, 0)
        dispatcher.admin(session, event)
    elif isinstance(event, wire.Pong):
        pass  # heard: the receive loop has noted it
    elif isinstance(event, wire.GiveBack):  # no reply of its own
        group.give_back(session, event)
    else:
        raise Refused(Status.PROTOCOL_ERROR, f"unexpected {type(event).__name__}")
