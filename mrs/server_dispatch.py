"""The request part of `mrs.server.GroupServer`: each request of a connection goes to
`mrs.request_dispatch.dispatch` with the server as its host (a compiled module; see
there for why functions and not methods, and `DispatchHost` for what it uses)."""

from __future__ import annotations

from mrs.request_dispatch import dispatch
from mrs.server_session import ServerSession


class ServerDispatch:
    """The request part of `mrs.server.GroupServer` (a mixin)."""

    def _dispatch(self, session: ServerSession, event: object) -> None:
        dispatch(self, session, event)  # type: ignore[arg-type]  # GroupServer is the host
