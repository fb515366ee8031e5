"""One log line per limit hit, without letting a flood of hits flood the log.

Every guard that refuses something (a connection, a request, a message) says so in
the log, naming the limit and the peer. A hostile client can hit a limit thousands
of times a second, so per (limit, peer) the first hit is logged at once and later
ones at most every `every_s`, with the count of those not shown.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from mrs.limits import REFUSAL_KEYS_MAX, REFUSAL_LOG_INTERVAL_S


class RefusalLog:
    def __init__(
        self,
        logger: logging.Logger,
        every_s: float = REFUSAL_LOG_INTERVAL_S,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.every_s = every_s
        self.clock_s = clock_s
        self._last: dict[tuple[str, str], tuple[float, int]] = {}
        self.total = 0
        self.by_limit: dict[str, int] = {}
        """Hits per limit since start (for status: what the guards turned away)."""

    def refused(self, limit: str, peer: str, message: str) -> None:
        """Count a hit of `limit` by `peer`; log `message` unless logged just now."""
        self.total += 1
        self.by_limit[limit] = self.by_limit.get(limit, 0) + 1
        key = (limit, peer)
        now = self.clock_s()
        last = self._last.get(key)
        if last is not None and now - last[0] < self.every_s:
            self._last[key] = (last[0], last[1] + 1)
            return
        if len(self._last) >= REFUSAL_KEYS_MAX:
            self._last.clear()
        suppressed = last[1] if last is not None else 0
        more = f" ({suppressed} more since the last such line)" if suppressed else ""
        self.logger.warning("%s: %s%s", peer, message, more)
        self._last[key] = (now, 0)
