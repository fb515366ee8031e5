"""Group commit: one writer thread per environment, one fsync per batch of batches.

Why a long-lived thread: an LMDB commit with fsync blocks for the disk's flush time.
Done inline it would stall the event loop; a `to_thread` hop per commit costs about
as much as the fsync itself. A single thread fed by a queue keeps the loop free and
lets everything submitted during one fsync ride in the next commit.

Callers submit a `WriteBatch` with a completion callback. The callback runs on the
caller's side through `call_soon` (for trio: `TrioToken.run_sync_soon`), once per
commit with all results, never on the writer thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr

from journals.protocol import Store
from journals.store import JournalError, WriteBatch

Done = Callable[[JournalError | None], None]
CallSoon = Callable[[Callable[[], None]], None]

BATCHES_PER_COMMIT_MAX = 8192
_STOP = object()


@dataclass(slots=True)
class WriterStats:
    commits: int = 0
    batches: int = 0
    operations: int = 0
    failed_batches: int = 0
    commit_time_s_total: float = 0.0
    wait_time_s_total: float = 0.0
    """Summed over commits: from the first batch submitted to the commit's start (how
    long the oldest write of each commit waited for its fsync to begin)."""
    commit_s_max: float = 0.0
    """The longest commit since the server last looked (mrs.ops.group_ops warns of a
    slow disk from it, and sets it back to 0)."""

    def as_dict(self) -> dict:
        return {
            "commits": self.commits,
            "batches": self.batches,
            "operations": self.operations,
            "failed_batches": self.failed_batches,
            "batches_per_commit": round(self.batches / self.commits, 2) if self.commits else 0.0,
            "commit_time_ms_total": round(1000 * self.commit_time_s_total, 3),
            "commit_time_ms_mean": round(1000 * self.commit_time_s_total / self.commits, 3)
            if self.commits
            else 0.0,
            "commit_wait_ms_mean": round(1000 * self.wait_time_s_total / self.commits, 3)
            if self.commits
            else 0.0,
        }


@dataclass
class GroupCommitWriter:
    """Owns the writer thread of one JournalStore. start() and stop() bracket its life."""

    store: Store
    call_soon: CallSoon
    stats: WriterStats = field(default_factory=WriterStats)
    _queue: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    _worker_thread: threading.Thread | None = None

    def start(self) -> None:
        assert self._worker_thread is None, "writer already started"
        self._worker_thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
        self._worker_thread.start()

    def stop(self) -> None:
        """Commit everything already submitted, then end the thread."""
        if self._worker_thread is None:
            return
        self._queue.put(_STOP)
        self._worker_thread.join()
        self._worker_thread = None

    def submit(self, batch: WriteBatch, done: Done, can_wait: bool = False) -> None:
        """Queue a batch; `done(None)` once durable, `done(error)` if it could not be.
        `can_wait` is InlineWriter's; this thread commits whatever is queued anyway."""
        assert self._worker_thread is not None, "writer not started"
        batch.submitted_s = time.perf_counter()
        self._queue.put((batch, done))

    # ----- the thread
    def _run(self) -> None:
        stopping = False
        while not stopping:
            pending = [self._queue.get()]
            while len(pending) < BATCHES_PER_COMMIT_MAX:
                try:
                    pending.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if _STOP in pending:
                stopping = True
                pending = [item for item in pending if item is not _STOP]
            if pending:
                self._commit(pending)

    def _commit(self, pending: list[tuple[WriteBatch, Done]]) -> None:
        self.stats.wait_time_s_total += time.perf_counter() - pending[0][0].submitted_s
        results = commit_together(self.store, pending, self.stats)
        self.call_soon(lambda: _report(results))
        self.store.start_writeback()  # the answers are on their way


@mypyc_attr(allow_interpreted_subclasses=True)  # an active's ReplicatedWriter (mrs.replication)
class InlineWriter:
    """Group commit on the caller's own thread, for an event loop that commits between
    rounds of request handling: `submit` only queues, `commit_pending` commits
    everything queued in one synced transaction and runs the callbacks.

    It trades a loop stall of one fsync per commit for having no second thread that
    must win the GIL back from the busy loop for its own Python work and after every
    commit (see `mrs.server.group_server` for the measurement).
    """

    def __init__(self, store: Store, wake: Callable[[], None]) -> None:
        self.store = store
        self.wake = wake
        self.stats = WriterStats()
        self._pending: list[tuple[WriteBatch, Done]] = []
        self._first_submitted_s = 0.0
        self.urgent = False
        """Some batch pending cannot wait: its commit should start at once."""
        self.wake_at_batches = 0
        """When this many batches are pending, call `wake` (0: never). The committer
        arms it while it holds a commit back (mrs.storage.commit_pacing), so the hold ends as
        soon as as many batches have come as the last commit carried."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.commit_pending()

    def submit(self, batch: WriteBatch, done: Done, can_wait: bool = False) -> None:
        """Queue a batch for the next commit and wake the committer: when it is the
        first one, and again when the first batch that cannot wait joins batches that
        can (`can_wait`: a batch whose answer holds nobody up, which the committer
        may keep a moment for company, see mrs.server.group_server)."""
        if not self._pending:
            self._first_submitted_s = time.perf_counter()
            self.urgent = not can_wait
            self.wake()
        elif not can_wait and not self.urgent:
            self.urgent = True
            self.wake()
        self._pending.append((batch, done))
        if len(self._pending) == self.wake_at_batches:
            self.wake()

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    @property
    def pending_batches(self) -> int:
        return len(self._pending)

    def commit_pending(self) -> None:
        if self._pending:
            self.stats.wait_time_s_total += time.perf_counter() - self._first_submitted_s
        while self._pending:
            pending = self._pending[:BATCHES_PER_COMMIT_MAX]
            del self._pending[:BATCHES_PER_COMMIT_MAX]
            _report(commit_together(self.store, pending, self.stats))
        self.urgent = False  # nothing pending (callbacks' batches were committed too)


def commit_together(
    store: Store, pending: list[tuple[WriteBatch, Done]], stats: WriterStats
) -> list[tuple[Done, JournalError | None]]:
    """Commit all batches in one synced transaction; on failure, each batch alone, so
    one oversized or failing batch does not fail its neighbours (except the later
    batches of the same stream, which must not overtake it).

    Every put of a busy server passes here, hundreds per commit: the common case (no
    guard, no failure) is a few list passes, with no per-batch lookups (benchmarks/README.md)."""
    started_s = time.perf_counter()
    batches = [batch for batch, _ in pending]
    skipped = {id(batch) for batch in batches if batch.guard is not None and not batch.guard()}
    attempted = [batch for batch in batches if id(batch) not in skipped] if skipped else batches
    outcome: dict[int, JournalError | None] = {}
    try:
        if attempted:
            store.apply(attempted)
            stats.commits += 1
    except JournalError:
        outcome = _commit_one_by_one(store, attempted, stats)
    if skipped or outcome:
        results = [
            (done, NOT_ATTEMPTED if id(batch) in skipped else outcome.get(id(batch)))
            for batch, done in pending
        ]
    else:
        results = [(done, None) for _, done in pending]
    took_s = time.perf_counter() - started_s
    stats.commit_time_s_total += took_s
    if took_s > stats.commit_s_max:
        stats.commit_s_max = took_s
    stats.batches += len(pending)
    stats.operations += sum([len(batch.puts) for batch in batches]) + sum(
        [len(batch.deletes) for batch in batches]
    )
    return results


def _commit_one_by_one(
    store: Store, batches: list[WriteBatch], stats: WriterStats
) -> dict[int, JournalError | None]:
    """After a failed commit: each batch in its own commit, by id; the later batches
    of a stream whose batch failed are not attempted."""
    outcome: dict[int, JournalError | None] = {}
    failed_streams: set[object] = set()
    for batch in batches:
        if batch.stream is not None and batch.stream in failed_streams:
            outcome[id(batch)] = NOT_ATTEMPTED
            continue
        outcome[id(batch)] = _commit_alone(store, batch, stats)
        if outcome[id(batch)] is not None and batch.stream is not None:
            failed_streams.add(batch.stream)
    return outcome


NOT_ATTEMPTED = JournalError("not attempted: an earlier write of the same stream failed")


def _commit_alone(store: Store, batch: WriteBatch, stats: WriterStats) -> JournalError | None:
    try:
        store.apply([batch])
    except JournalError as error:
        stats.failed_batches += 1
        return error
    stats.commits += 1
    return None


def _report(results: list[tuple[Done, JournalError | None]]) -> None:
    for done, error in results:
        done(error)
