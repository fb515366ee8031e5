"""The request part of `mrs.server.GroupServer`: each request of a connection goes to
`mrs.request_dispatch.dispatch` with the server as its host (a compiled module; see
there for why functions and not methods)."""

from __future__ import annotations

from mrs.client_drains import ClientDrains
from mrs.config import GroupConfig
from mrs.group import Group
from mrs.guards import Guards
from mrs.refusals import RefusalLog
from mrs.request_dispatch import dispatch
from mrs.security.gate import Gate
from mrs.server_session import ServerSession


class ServerDispatch:
    """The request part of `mrs.server.GroupServer` (a mixin)."""

    config: GroupConfig
    group: Group | None
    gate: Gate | None
    guards: Guards
    refusals: RefusalLog
    client_drains: ClientDrains

    def _dispatch(self, session: ServerSession, event: object) -> None:
        dispatch(self, session, event)  # type: ignore[arg-type]  # GroupServer is the host
