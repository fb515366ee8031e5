"""Dispatches each request of a connection to the group, within the connection's quotas.

Synchronous, one call per frame (no await per message): a request over a quota is
answered EXCEEDQUOTA, a refused one with its status, an unexpected failure with
SERVER_ERROR; only a protocol error closes the connection.
"""

from __future__ import annotations

import logging
from typing import NoReturn

from mrs import protocol as wire
from mrs.client_drains import ClientDrains
from mrs.config import GroupConfig
from mrs.delivery import Refused
from mrs.group import Group
from mrs.guards import Guards
from mrs.model import Status
from mrs.refusals import RefusalLog
from mrs.security.gate import Gate
from mrs.server_session import ServerSession

log = logging.getLogger("mrs.server")


class ServerDispatch:
    """The request part of `mrs.server.GroupServer` (a mixin)."""

    config: GroupConfig
    group: Group | None
    gate: Gate | None
    guards: Guards
    refusals: RefusalLog
    client_drains: ClientDrains

    def _begin(self, session: ServerSession, request_id: int, body_bytes: int = 0) -> None:
        """Count a request as in flight until answered, or refuse it (EXCEEDQUOTA)."""
        in_flight = session.in_flight
        guards = self.guards
        if len(in_flight) >= guards.requests_in_flight_max:
            self._over_quota(
                session,
                "requests_in_flight_max",
                f"{len(in_flight)} requests in flight "
                f"(requests_in_flight_max={guards.requests_in_flight_max})",
            )
        if body_bytes:
            held = session.in_flight_bytes + session.account.held_bytes
            if held + body_bytes > guards.connection_bytes_max:
                self._over_quota(
                    session,
                    "connection_bytes_max",
                    f"connection holds {held} bytes of messages "
                    f"(connection_bytes_max={guards.connection_bytes_max})",
                )
            session.in_flight_bytes += body_bytes
        in_flight[request_id] = body_bytes

    def _begin_get(self, session: ServerSession, request: wire.Get | wire.GetBatch) -> None:
        queue = session.attached
        parked_max = self.guards.parked_gets_max
        if queue is not None and request.timeout_ms != 0 and len(queue.waiters) >= parked_max:
            self._over_quota(
                session,
                "parked_gets_max",
                f"{len(queue.waiters)} gets parked on {queue.address} "
                f"(parked_gets_max={parked_max})",
            )
        self._begin(session, request.request_id)

    def _over_quota(self, session: ServerSession, limit: str, problem: str) -> NoReturn:
        self.refusals.refused(
            limit, session.host, f"request refused (EXCEEDQUOTA): {problem} ({session.peer})"
        )
        raise Refused(Status.EXCEEDQUOTA, problem)

    def _dispatch(self, session: ServerSession, event: object) -> None:
        if type(event) is wire.PutBatch:  # each put answered on its own, as if alone;
            for put in event.puts:  # all in this pass, so one commit stores them
                self._dispatch(session, put)
            return
        group = self.group
        request_id = getattr(event, "request_id", 0)
        try:
            if self.gate is not None:
                self.gate.check(session, event)
            # The cases are tried in order, each an isinstance (slower on msgspec
            # structs than on plain classes): the requests of a busy connection first.
            match event:
                case wire.Put():
                    self._begin(session, request_id, len(event.body))
                    if event.headers:  # a client SAF journal draining? (mrs status)
                        self.client_drains.note(session, event)
                    group.put(session, event)
                case wire.Confirm():
                    self._begin(session, request_id)
                    group.confirm(session, event)
                case wire.GetBatch():
                    self._begin_get(session, event)
                    group.get_batch(session, event)
                case wire.Get():
                    self._begin_get(session, event)
                    group.get(session, event)
                case wire.CancelGet():  # no reply of its own: the get's answer ends both
                    group.cancel_get(session, event)
                case wire.Ping():
                    session.send(wire.Pong(event.nonce))
                case wire.Hello(role="link"):
                    session.liveness.handshake_done = True
                    self._adopt_link(session, event)
                case wire.LinkTransfer() | wire.LinkNotice() | wire.LinkAck():
                    if session.link is None:
                        raise wire.RemoteProtocolError(
                            f"{type(event).__name__} on a connection that is not a link"
                        )
                    session.link.handle(event, session)
                case wire.Hello():
                    session.liveness.handshake_done = True
                    session.send(
                        wire.Welcome(
                            wire.PROTOCOL_VERSION,
                            self.config.id,
                            self.config.name,
                            self.config.limits.message_bytes_max,
                        )
                    )
                case wire.Attach():
                    self._begin(session, request_id)
                    group.attach(session, event)
                case wire.StatusRequest():
                    session.send(wire.StatusReply(request_id, self.status_info()))
                case wire.Pong():
                    pass  # heard: the receive loop has noted it
                case _:
                    raise Refused(Status.PROTOCOL_ERROR, f"unexpected {type(event).__name__}")
        except Refused as refused:
            session.send(wire.Failure(request_id, int(refused.status), refused.message))
        except wire.ProtocolError:
            raise
        except Exception as error:  # noqa: BLE001 - one bad request must not stop the server
            log.exception("request %r from %s failed", event, session.peer)
            session.send(
                wire.Failure(
                    request_id, int(Status.SERVER_ERROR), f"{type(error).__name__}: {error}"
                )
            )
