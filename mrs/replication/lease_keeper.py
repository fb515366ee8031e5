"""Renewals of a new active's lease from a thread until its lease loop begins.

Why: between winning a term and its lease loop's start, a new active records the
term in its journals, reopens them and recovers them synchronously
(`GroupServer._open_and_recover` never yields: recovery holds the group's state
whole). Longer than the lease's TTL (a large DQF read from a cold disk after the loss
of a machine, a slow device), the lease expired under it: the instance stepped down
at its first renewal, another won the next term and started as slowly, and the group
could fail over for ever without serving. A thread is the one thing that runs while
the loop is held; it makes only the renewal, touches nothing of the group's, and
stops when the lease loop begins (or the start fails: mrs.server.instance `run`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("mrs.replication")


class ThreadRenewals:
    """Renewals every `every_s` from a daemon thread between `start()` and `stop()`;
    `renewed_mono_s` is when the last renewal that succeeded was sent
    (`time.monotonic()`), None if none did."""

    def __init__(self, renew: Callable[[], bool], every_s: float) -> None:
        self.renew = renew
        self.every_s = every_s
        self.renewed_mono_s: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mrs-lease-renewals", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Not joined: a renewal in flight would hold the event loop up to etcd's
        timeout, and one that lands later renews the same lease (not counted)."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            sent_mono_s = time.monotonic()
            try:
                renewed = self.renew()
            except Exception as error:  # a thread's error would reach nobody
                log.warning("a renewal from the start's thread failed: %s", error)
                continue
            if renewed and not self._stop.is_set():
                self.renewed_mono_s = sent_mono_s
