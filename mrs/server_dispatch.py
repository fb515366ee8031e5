"""The request part of `mrs.server.GroupServer`: the requests of each receive go to
`mrs.request_dispatch.dispatch_all` with the server as their host (a compiled module;
see there for why functions and not methods, and `DispatchHost` for what it uses)."""

from __future__ import annotations

from mrs.request_dispatch import dispatch_all
from mrs.server_session import ServerSession


class ServerDispatch:
    """The request part of `mrs.server.GroupServer` (a mixin)."""

    def _dispatch_all(self, session: ServerSession, events: list) -> None:
        """Every event of one receive, in order (one call, not one per event)."""
        dispatch_all(self, session, events)  # type: ignore[arg-type]  # GroupServer is the host
