"""The request part of `mrs.server.GroupServer`: the requests of each receive go to
its `mrs.request_dispatch.Dispatcher` (a compiled class; see there for why), made
with the server as its host once the group exists."""

from __future__ import annotations

from mrs.request_dispatch import Dispatcher
from mrs.server_session import ServerSession


class ServerDispatch:
    """The request part of `mrs.server.GroupServer` (a mixin)."""

    _dispatcher: Dispatcher | None = None

    def _dispatch_all(self, session: ServerSession, events: list) -> None:
        """Every event of one receive, in order (one call, not one per event)."""
        dispatcher = self._dispatcher
        if dispatcher is None or dispatcher.group is not self.group:  # type: ignore[attr-defined]
            # the first requests (the group exists by now), or a group made anew
            dispatcher = self._dispatcher = Dispatcher(self)  # type: ignore[arg-type]
        dispatcher.dispatch_all(session, events)
