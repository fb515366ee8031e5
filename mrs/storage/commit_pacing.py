"""When the inline writer's next commit may start: at once, unless the last one was busy.

Why: an inline commit stalls the event loop for its fsync (two device flushes, about
1.3-3 ms here), and under load the loop committed once per pass, as soon as anything
was pending. Then a third to a half of the server's wall time went to commits, and a
put arriving during one waited for it. After a busy commit (COMMIT_GAP_BATCHES_MIN
batches or more) the next now starts no sooner than COMMIT_GAP_S after it ended, so
the loop has that long to take in requests and each fsync carries more of them:
durable puts in peerbench's shape went from a median of 50,142 to 57,442 msgs/s over
five interleaved rounds, end to end was unchanged (benchmarks/README.md).

The hold ends early once as many batches are pending as the last commit carried
(`last_batches`, mrs.server.group_server's `_hold_commit`): clients keeping a window in flight
have all sent again by then, and waiting out the gap would only add latency.

A lightly loaded group is never held back: its commits carry a few batches each, so
a put is answered as soon as its own fsync is done (the paced latency shape).
"""

from __future__ import annotations

from mrs.limits import COMMIT_GAP_BATCHES_MIN, COMMIT_GAP_S


class CommitPacing:
    """Remembers the last commit; `wait_s` says how long the next one should wait."""

    def __init__(
        self, gap_s: float = COMMIT_GAP_S, busy_batches_min: int = COMMIT_GAP_BATCHES_MIN
    ) -> None:
        self.gap_s = gap_s
        self.busy_batches_min = busy_batches_min
        self._last_end_s = 0.0
        self._last_busy = False
        self.last_batches = 0
        """Batches the last commit carried: once as many are pending again, a held
        commit goes at once (the clients that wait for answers have all sent again;
        holding on would only add latency)."""

    def wait_s(self, now_s: float) -> float:
        """Seconds to wait before committing at `now_s` (0: commit now)."""
        if not self._last_busy:
            return 0.0
        return max(0.0, self._last_end_s + self.gap_s - now_s)

    def committed(self, batches: int, end_s: float) -> None:
        """A commit of `batches` batches ended at `end_s`."""
        self._last_end_s = end_s
        self.last_batches = batches
        self._last_busy = batches >= self.busy_batches_min
