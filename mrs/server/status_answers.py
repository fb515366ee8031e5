"""StatusRequests answered with at most one build of the status per interval.

Why: the group's status is built on its own event loop, one build per request, and
nothing stopped a client from asking in a loop: four clients keeping 8
StatusRequests in flight each took a group's WF puts from about 60,000 to 5,000-
11,000 a second. Now a request that comes within STATUS_BUILD_INTERVAL_S of the last
build waits for the next one, which every request waiting then shares; a request
after a quiet interval is answered at once, so `mrs status` after an action still
shows it. Each asker gets a status built after it asked (never an older answer kept
for it), and each waiting request is counted in its connection's requests in flight
(requests_in_flight_max), so the waiting list is bounded.

The web view and the metrics share their builds the same way over HTTP
(mrs.ops.http_endpoint `SharedBuild`).
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from mrs import protocol as wire
from mrs.limits import STATUS_BUILD_INTERVAL_S
from mrs.server.session import ServerSession

CallLater = Callable[[float, Callable[[], None]], object]


class StatusAnswers:
    """The StatusRequests of every connection of one group."""

    def __init__(self, build: Callable[[], dict], call_later: CallLater) -> None:
        self._build = build
        self._call_later = call_later
        self._built_s = -STATUS_BUILD_INTERVAL_S
        self._waiting: list[tuple[ServerSession, int]] | None = None
        self.builds = 0
        """How many times the status was built for StatusRequests."""

    def ask(self, session: ServerSession, request_id: int) -> None:
        """Answer now after a quiet interval, else with the next build."""
        now_s = trio.current_time()
        if self._waiting is None and now_s - self._built_s >= STATUS_BUILD_INTERVAL_S:
            self._answer([(session, request_id)])
            return
        if self._waiting is None:
            self._waiting = []
            self._call_later(self._built_s + STATUS_BUILD_INTERVAL_S - now_s, self._flush)
        self._waiting.append((session, request_id))

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting or [], None
        self._answer(waiting)

    def _answer(self, askers: list[tuple[ServerSession, int]]) -> None:
        info = self._build()
        self.builds += 1
        self._built_s = trio.current_time()
        for session, request_id in askers:
            session.send(wire.StatusReply(request_id, not_counting_asker(dict(info))))


def not_counting_asker(info: dict) -> dict:
    """The status as the asker should read it: the connection asking (`mrs status`, the
    bus web view) is not one of the group's clients."""
    connections = info.get("connections")
    if isinstance(connections, dict) and connections.get("clients", 0) > 0:
        info["connections"] = {**connections, "clients": connections["clients"] - 1}
    return info
