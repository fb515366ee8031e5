"""One log line per limit hit, without letting a flood of hits flood the log.

Every guard that refuses something (a connection, a request, a message) says so in
the log, naming the limit and the peer. A hostile client can hit a limit thousands
of times a second, so per key the first hit is logged at once and later ones at
most every `every_s`, with the count of those not shown (a count logged without a
new hit, by `flush`, shows the latest hit's line, "; this is the latest" when it is
not the line logged before). The key is what one line
stands for: by default (limit, peer); the permission gate keys on (principal,
problem), the TLS listener on (host, reason), so two different reasons from one
host are each logged. The table of keys is bounded (`REFUSAL_KEYS_MAX`).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Protocol

from mrs.limits import PEER_TEXT_CHARS_MAX, REFUSAL_KEYS_MAX, REFUSAL_LOG_INTERVAL_S


def clipped(text: str, chars_max: int = PEER_TEXT_CHARS_MAX) -> str:
    """`text` cut to `chars_max` characters (marked "..."): what a peer sent, bounded
    before it reaches a log line or an answer."""
    if len(text) <= chars_max:
        return text
    return text[: chars_max - 3] + "..."


class RefusalLog:
    """Counts refusals and logs them, at most one line per key per `every_s`."""

    def __init__(
        self,
        logger: logging.Logger,
        every_s: float = REFUSAL_LOG_INTERVAL_S,
        clock_s: Callable[[], float] = time.monotonic,
        level: int = logging.WARNING,
        line_format: str = "{peer}: {message}",
    ) -> None:
        self.logger = logger
        self.every_s = every_s
        self.clock_s = clock_s
        self.level = level
        self.line_format = line_format
        """How a line reads, from {peer} and {message} (the count of hits not shown
        is appended)."""
        self._last: dict[Hashable, tuple[float, int, str, tuple[str, str]]] = {}
        """key -> (when its last line was logged, hits not shown since, that line, the
        (peer, message) of the latest hit not shown)."""
        self.total = 0
        self.by_limit: dict[str, int] = {}
        """Hits per limit since start (for status: what the guards turned away)."""
        _ALL.add(self)

    def refused(self, limit: str, peer: str, message: str, key: Hashable = None) -> bool:
        """Count a hit of `limit` by `peer`; log its line unless a line for the
        same `key` (default: (limit, peer)) was logged less than `every_s` ago.
        Returns whether it was logged."""
        self.total += 1
        self.by_limit[limit] = self.by_limit.get(limit, 0) + 1
        if key is None:
            key = (limit, peer)
        now = self.clock_s()
        last = self._last.get(key)
        if last is not None and now - last[0] < self.every_s:
            self._last[key] = (last[0], last[1] + 1, last[2], (peer, message))
            return False
        if len(self._last) >= REFUSAL_KEYS_MAX:
            self.flush()  # the counts not shown yet, before the table is emptied
            self._last.clear()
        suppressed = last[1] if last is not None else 0
        line = self.line_format.format(peer=peer, message=message)
        self._log(line, suppressed)
        self._last[key] = (now, 0, line, (peer, message))
        return True

    def flush(self) -> None:
        """Log the hits not shown of each key whose last line is `every_s` old. Why:
        they were told only by the key's next line, so a burst (664 wrong passwords
        in 2 s) left one line and its count was never logged if the burst ended.
        The clock is read only when a count waits (a log whose clock is trio's, flushed
        outside a trio run by `flush_all`, raised RuntimeError)."""
        waiting = [(key, last) for key, last in self._last.items() if last[1]]
        if not waiting:
            return
        now = self.clock_s()
        for key, (logged_s, suppressed, line, latest) in waiting:
            if now - logged_s >= self.every_s:
                shown = self._log_latest(line, suppressed, latest)
                self._last[key] = (now, 0, shown, latest)

    def flush_at_stop(self) -> None:
        """Log the hits not shown of every key, however recent its last line, once:
        the process stops. Why: `flush` waits until a key's line is `every_s` old,
        so a burst in the last seconds before a stop was told by one line and its
        count was lost (a flood that hit a server just before it was restarted)."""
        self.flush_now("; logged as the server stops")

    def flush_now(self, when: str) -> None:
        """Log the hits not shown of every key now, each count followed by `when`
        (why now). Why: a count logged later, by `flush`, came after the line of
        the state that ended the hits: a link's failed redials, counted while it
        was down, were logged 10 s after its "up" line, as if it failed again."""
        for key, (logged_s, suppressed, line, latest) in list(self._last.items()):
            if suppressed:
                shown = self._log_latest(line, suppressed, latest, when)
                self._last[key] = (logged_s, 0, shown, latest)

    def _log_latest(
        self, line: str, suppressed: int, latest: tuple[str, str], when: str = ""
    ) -> str:
        """Log the count of hits not shown with the latest one's line, saying so when it
        is not the line logged before; returns the line logged. Why: the count was
        logged with the key's first line, so "message 7 ... is lost (4 more since the
        last such line)" named message 7 for four later messages, none of them 7."""
        peer, message = latest
        shown = self.line_format.format(peer=peer, message=message)
        self._log(shown, suppressed, when, "; this is the latest" if shown != line else "")
        return shown

    def _log(self, line: str, suppressed: int, when: str = "", after: str = "") -> None:
        more = f" ({suppressed} more since the last such line{when}){after}" if suppressed else ""
        self.logger.log(self.level, "%s%s", line, more)


class Flushed(Protocol):
    """What `flush_all` flushes: a RefusalLog, or a count kept elsewhere (the admin
    journal's refusals, mrs.ops.admin_log)."""

    def flush(self) -> None: ...


_ALL: weakref.WeakSet[Flushed] = weakref.WeakSet()
"""Every RefusalLog of this process (and each `flush_also`), for `flush_all`."""


def flush_also(counts: Flushed) -> None:
    """Have `flush_all` flush `counts` too, for as long as it lives."""
    _ALL.add(counts)


def flush_all() -> None:
    """`RefusalLog.flush` of every one in this process (a server calls it every
    REFUSAL_LOG_INTERVAL_S)."""
    for refusals in list(_ALL):
        refusals.flush()


def flush_all_at_stop() -> None:
    """`RefusalLog.flush_at_stop` of every one in this process: `mrs serve` calls it
    as it ends, whatever ended it. Counts kept elsewhere (`flush_also`: the admin
    journal's, written through the group's journals, closed by then) are not."""
    for refusals in list(_ALL):
        if isinstance(refusals, RefusalLog):
            refusals.flush_at_stop()
