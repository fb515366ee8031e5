"""The request part of `mrs.server.group_server.GroupServer`: the requests of each receive go to
its `mrs.server.request_dispatch.Dispatcher` (a compiled class; see there for why), which
the server makes with itself as host once its group exists."""

from __future__ import annotations

from mrs.server.request_dispatch import Dispatcher
from mrs.server.session import ServerSession


class ServerDispatch:
    """The request part of `mrs.server.group_server.GroupServer` (a mixin)."""

    _dispatcher: Dispatcher
    """Made in `GroupServer.run` with the group, before any connection is served."""

    def _dispatch_all(self, session: ServerSession, events: list) -> None:
        """Every event of one receive, in order (one call, not one per event)."""
        self._dispatcher.dispatch_all(session, events)
