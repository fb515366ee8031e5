"""Which client applications are draining their client-side SAF journal into this
group, for `mrs status`: seen from the headers of the puts a drain sends.

A draining client marks each put `reply_when_stored` and says how many records its
journal still holds (`client_saf_backlog`); a connection is listed while such puts
keep coming (the last one less than CLIENT_DRAIN_IDLE_S ago) and it is connected.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mrs import protocol as wire
from mrs.limits import CLIENT_DRAIN_IDLE_S, CLIENT_DRAINS_LISTED_MAX


@dataclass
class ClientDrains:
    sessions: dict[int, dict] = field(default_factory=dict)

    def note(self, session: object, put: wire.Put) -> None:
        headers = put.headers
        if not headers or not headers.get(wire.REPLY_WHEN_STORED_HEADER):
            return
        backlog = headers.get(wire.CLIENT_SAF_BACKLOG_HEADER)
        backlog = backlog if type(backlog) is int else None
        entry = self.sessions.get(session.id)
        if entry is None:
            if len(self.sessions) >= CLIENT_DRAINS_LISTED_MAX:
                return
            attached = getattr(session, "attached", None)
            entry = self.sessions[session.id] = {
                "queue": str(attached.address) if attached is not None else "?",
                "peer": getattr(session, "peer", "?"),
                "sent": 0,
            }
        entry["sent"] += 1
        entry["backlog"] = backlog
        entry["_seen_s"] = time.monotonic()

    def forget(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)

    def status_info(self) -> dict:
        """{"clients_draining": [...]} while any client drains, else {}."""
        now_s = time.monotonic()
        for session_id, entry in list(self.sessions.items()):
            if now_s - entry["_seen_s"] > CLIENT_DRAIN_IDLE_S:
                del self.sessions[session_id]
        if not self.sessions:
            return {}
        shown = [
            {key: value for key, value in entry.items() if not key.startswith("_")}
            for entry in self.sessions.values()
        ]
        return {"clients_draining": shown}
