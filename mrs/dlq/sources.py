"""Where the handler's dead letters come from: the group's DLQ, or its DLJ.

The DLQ (`DlqSource`): every get is a lease, removing is the confirm (see
`mrs.group.dlq_leases`). The DLJ (`DljSource`, `INPUTQ(DLJ)`): the group's dead letter
journal, read from its LMDB environment while the server runs (as `mrs jplay` does);
a record is removed only after its action is durable (DISCARD, or a FWD/RETRY put
acknowledged as stored). Before each put the attempt is committed, so a handler killed
after the put and before the removal marks the repeat as a possible duplicate; a put
whose mark could not be committed is not made (`NotMarked`), and a removal that failed
(a device error) is tried again as the DLQ confirm is, then left (`NotRemoved`): the
record keeps its mark, so the next run's repeat is marked. One handler works a DLJ at a
time (an exclusive lock file); another waits for it. A DLJ record has no lease: one the
handler leaves (IGNORE) is passed over by the scan (`DljSource.leave`), not held against
`--seen-max` as a leased DLQ letter is.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections import deque
from pathlib import Path

import trio

from clients import MrsError, MrsTimeout, NoMoreMessages, ReplyTimeout
from journals import (
    CorruptRecord,
    Journal,
    JournalError,
    JournalStore,
    Record,
    WriteBatch,
    seq_key,
)
from mrs.core.deadletter import dead_letter_header
from mrs.group.dlq_leases import DISCARD_CONFIRM_VALUE
from mrs.limits import (
    DLQ_HANDLER_CONFIRM_PAUSE_S,
    DLQ_HANDLER_CONFIRM_TRIES_MAX,
    DLQ_HANDLER_SEEN_MAX_DEFAULT,
)
from mrs.model import Address, DeliveryMode, ForceJrn, Message, Status, status_of
from mrs.offline.journal_files import GroupJournals, open_store
from mrs.offline.redrive_traces import JplayTraces, handler_attempt_key
from mrs.offline.selection import RecordFilter
from mrs.storage.fault_file import file_fault_hook
from mrs.storage.journal_scan import scan, seq_of_key

SCAN_CHUNK = 1000
LOCK_FILE = "dlq-handler-dlj.lock"


_CONFIRM_FAILED_FOR_NOW = frozenset({Status.JOURNAL_FAIL, Status.MRS_RES_EXH})
"""A DLQ confirm the group could not record now (its commit failed): the letter is
still held, so the same confirm may be sent again."""


class NotRemoved(Exception):
    """The letter's confirm (or DLJ deletion) failed for now: it stays held."""


class NotMarked(Exception):
    """The DLJ record's attempt mark could not be committed: its put is not made
    (killed after it, the handler's next run would repeat it unmarked)."""


class DlqSource:
    """The group's DLQ through the handler's client connection."""

    name = "DLQ"
    held_then = "held until the handler ends, then back POSSDUPL"
    """What becomes of a letter whose put was stored and that was not removed."""

    def __init__(self, client, note=None) -> None:
        self.client = client
        self.note = note
        self._capped_told = False

    async def take(self, timeout_s: float) -> Message | None:
        try:
            return await self.client.get(timeout=timeout_s)
        except (MrsTimeout, ReplyTimeout, NoMoreMessages):
            return None
        except MrsError as error:
            if error.status != Status.EXCMAXUNCONF:
                raise
            why = str(error)
        # The DLQ's unconfirmed_max counts the letters all its readers hold: at it, it
        # hands out no more until some leave, as when the handler's own record is
        # full. Before, the refusal ended the handler with exit 3 ("group refused"),
        # a lost connection by the docs, while it held every letter it had taken.
        if not self._capped_told and self.note is not None:
            self._capped_told = True
            self.note(
                f"the DLQ holds as many letters unconfirmed as it may ({why}): taking "
                "no more until some leave (other readers of the DLQ hold letters too)"
            )
        await trio.sleep(timeout_s)  # as a get that found nothing for so long
        return None

    async def before_put(self, message: Message) -> None:
        """Nothing to do: the group counts the put against the lease it names (its
        `dlq_seq`), and that lease comes back POSSDUPL (mrs.group.dlq_leases)."""

    async def remove(self, message: Message, discarded: bool = False) -> None:
        """Confirm the letter (the group's count says `discarded` or moved: its
        DISCARD_CONFIRM_VALUE). A confirm the group could not record, or left
        unanswered, is sent again, DLQ_HANDLER_CONFIRM_TRIES_MAX times in all, then
        NotRemoved: the letter is still held. Before, the first JOURNAL_FAIL ended the
        handler with exit 3, and a letter whose put was stored came back to be put
        again. A BADSEQ after an unanswered confirm means that one was recorded."""
        pause_s = DLQ_HANDLER_CONFIRM_PAUSE_S
        unanswered = False
        for attempt in range(1, DLQ_HANDLER_CONFIRM_TRIES_MAX + 1):
            try:
                # NO_JRN: removing a dead letter is not an application's confirmation,
                # so it never lands in the PCJ (the audit trail), even from a
                # recoverable DLQ.
                await self.client.confirm(
                    message.seq,
                    DISCARD_CONFIRM_VALUE if discarded else 0,
                    force_j=ForceJrn.NO_JRN,
                )
                return
            except ReplyTimeout as error:
                unanswered, why = True, f"{error}"
            except MrsError as error:
                if unanswered and error.status == Status.BADSEQ:
                    return  # the unanswered confirm was recorded: the letter is gone
                if error.status not in _CONFIRM_FAILED_FOR_NOW:
                    raise
                why = f"{_status_name(error.status)}: {error}"
            if attempt < DLQ_HANDLER_CONFIRM_TRIES_MAX:
                await trio.sleep(pause_s)
                pause_s *= 2
        raise NotRemoved(f"the DLQ confirm failed {DLQ_HANDLER_CONFIRM_TRIES_MAX} times ({why})")

    def close(self) -> None:
        pass


class DljSource:
    """The group's DLJ, read and trimmed directly in its LMDB environment."""

    name = "DLJ"
    held_then = (
        "left in the DLJ with its attempt mark: the next run repeats it marked a possible duplicate"
    )

    def __init__(
        self,
        journals: GroupJournals,
        group_name: str,
        fault_file: Path | None = None,
        left_max: int = DLQ_HANDLER_SEEN_MAX_DEFAULT,
    ) -> None:
        self.journals = journals
        self.group_name = group_name
        self.fault_file = fault_file
        """The harness's fault file (MRS_FAULT_FILE, mrs.storage.fault_file) for the
        handler's own DLJ commits (attempt marks, removals); None in production."""
        self.store: JournalStore | None = None
        self.jplay: JplayTraces | None = None
        """`mrs jplay dlj`'s ledger: a record it replayed and left (or may have, when
        its last run was stopped in doubt) is put marked (mrs.offline.redrive_traces)."""
        self._lock_fd: int | None = None
        self._ready: deque[Message] = deque()
        self._handed: set[int] = set()
        """Records handed out and still held by the run (being worked, or put and not
        removed): at most the handler's --seen-max."""
        self._left: set[int] = set()
        """Records the run left (IGNORE): a re-scan from the start passes over them.
        At most `left_max`; past it the run re-scans no more (`_restart`)."""
        self.left_max = left_max
        self._left_overflowed = False
        self._overflow_told = False
        self._after_seq: int | None = None
        self._restarted_s = float("-inf")
        self.note = None

    async def open(self, note) -> None:
        """Take the DLJ lock (waiting while another handler holds it), open the store."""
        self.note = note
        path = Path(self.journals.data_dir) / LOCK_FILE
        self._lock_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        told = False
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    note(
                        f"another handler (or an mrs jplay of the dlj) works the DLJ of "
                        f"group {self.journals.group_id}; waiting for it to finish"
                    )
                    told = True
                await trio.sleep(1.0)
        self.store = open_store(self.journals, writable=True)
        self.jplay = JplayTraces(Path(self.journals.data_dir))
        if self.jplay.in_doubt is not None:
            note(f"{self.jplay.in_doubt}: this run marks every put a possible duplicate")
        if self.fault_file is not None:
            self.store.fault_hook = file_fault_hook(self.fault_file)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
        if self.jplay is not None:
            self.jplay.close()
            self.jplay = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = None

    async def take(self, timeout_s: float) -> Message | None:
        if not self._ready:
            self._scan()
        if self._ready:
            return self._ready.popleft()
        if timeout_s > 0:
            await trio.sleep(timeout_s)
            now_s = trio.current_time()
            if now_s - self._restarted_s >= timeout_s:  # once a poll, not once a taker
                self._restarted_s = now_s
                self._restart()
        return None

    def _restart(self) -> None:
        """Scan again from the start: new records may have landed anywhere (a seq is
        its origin group's). Not once more records were left than the run remembers:
        those it forgot would be looked at (and reported) again on every poll."""
        if not self._left_overflowed:
            self._after_seq = None
            return
        if self.note is not None and not self._overflow_told:
            self._overflow_told = True
            self.note(
                f"more than {self.left_max} records are left in the DLJ (--seen-max): the "
                "handler no longer re-scans it from its start; a record that lands before "
                f"seq {self._after_seq} is looked at by the next run (raise --seen-max)"
            )

    def leave(self, message: Message) -> None:
        """The run leaves this record in the DLJ (IGNORE: no rule takes it, or every
        one failed): it holds it no more. The scan is past it, and a re-scan from the
        start passes over it while the run remembers it (`left_max` records)."""
        self._handed.discard(message.seq)
        if len(self._left) < self.left_max:
            self._left.add(message.seq)
        else:
            self._left_overflowed = True

    def _scan(self) -> None:
        """Read on from `_after_seq`, a chunk (one short read transaction) at a time,
        until some record is ready or the journal's end is reached: a chunk of records
        already handed out (held: IGNORE, no match) is passed over, not taken for the
        end, or a handler holding SCAN_CHUNK records would never see a newer one. It
        stops at the first record ready: a chunk's records all made ready held up to
        SCAN_CHUNK bodies beyond --held-bytes-max."""
        selection = RecordFilter(Journal.DLJ)
        while not self._ready:
            read = 0
            # Returning mid-chunk drops the scan: its read transaction ends with it.
            for key, record in scan(
                self._opened(), Journal.DLJ, selection, after_seq=self._after_seq, chunk=SCAN_CHUNK
            ):
                read += 1
                self._after_seq = seq_of_key(key)
                if isinstance(record, CorruptRecord):
                    continue  # `mrs dump` reports it; a handler cannot match it
                if record.seq in self._handed or record.seq in self._left:
                    continue
                self._handed.add(record.seq)
                self._ready.append(self._message(record))
                return
            if read < SCAN_CHUNK:
                return  # the end of the journal

    def _message(self, record: Record) -> Message:
        target = Address(record.target_group, record.target_queue)
        headers = record.extra.get("headers") if isinstance(record.extra, dict) else None
        cause = status_of(record.reason)
        mark = self._opened().get_raw(Journal.META, handler_attempt_key(record.seq))
        attempted = mark is not None
        if not attempted and self.jplay is not None:
            attempted = self.jplay.replayed(record.seq)
        return Message(
            body=record.body,
            seq=record.seq,
            source=Address(record.source_group, record.source_queue),
            target=target,
            msg_class=record.msg_class,
            msg_type=record.msg_type,
            priority=record.priority,
            delivery=DeliveryMode(record.delivery),
            delivery_status=Status.POSSDUPL if attempted else Status.CONFIRMREQ,
            correlation_id=record.correlation_id,
            put_time_ns=record.put_time_ns,
            dead_letter_header=dead_letter_header(
                cause, target, self.group_name, record.written_time_ns, "dead letter journal"
            ),
            headers=headers,
        )

    def _opened(self) -> JournalStore:
        assert self.store is not None, "the DLJ is read only between open and close"
        return self.store

    async def before_put(self, message: Message) -> None:
        """Commit the record's attempt mark, or NotMarked: the put is not made."""
        batch = WriteBatch.empty().put_raw(Journal.META, handler_attempt_key(message.seq), b"1")
        try:
            await trio.to_thread.run_sync(self._opened().commit_now, batch)
        except JournalError as error:
            why = f"the attempt mark could not be written to the DLJ ({error}); not put"
            raise NotMarked(why) from None

    async def nothing_stored(self, message: Message) -> None:
        """The put after `before_put` stored nothing (the group refused it outright, or
        discarded it): take the attempt mark back, so the next run does not flag the
        record's one copy POSSDUPL. Why: the mark stayed, and a put refused NO_DQF or
        NOSUCHQUEUE made the record's next put, after the operator fixed the rule or
        the queue, a possible duplicate of a copy that never existed. A deletion that
        fails leaves the mark: a possible duplicate flagged, never one unflagged."""
        batch = WriteBatch.empty().delete(Journal.META, handler_attempt_key(message.seq))
        with contextlib.suppress(JournalError):
            await trio.to_thread.run_sync(self._opened().commit_now, batch)

    async def remove(self, message: Message, discarded: bool = False) -> None:
        """Delete the record and its attempt mark in one synced commit. One that failed
        (a device error, a full map) is made again, DLQ_HANDLER_CONFIRM_TRIES_MAX times
        in all as the DLQ confirm is, then NotRemoved: the record stays (held by this
        run, never taken again by it) with its mark. Before, the first failure ended
        the handler with a traceback, every put on its way cut off."""
        batch = (
            WriteBatch.empty()
            .delete(Journal.DLJ, seq_key(message.seq))
            .delete(Journal.META, handler_attempt_key(message.seq))
        )
        pause_s = DLQ_HANDLER_CONFIRM_PAUSE_S
        for attempt in range(1, DLQ_HANDLER_CONFIRM_TRIES_MAX + 1):
            try:
                await trio.to_thread.run_sync(self._opened().commit_now, batch)
            except JournalError as error:
                why = f"{error}"
            else:
                self._handed.discard(message.seq)
                return
            if attempt < DLQ_HANDLER_CONFIRM_TRIES_MAX:
                await trio.sleep(pause_s)
                pause_s *= 2
        tries = DLQ_HANDLER_CONFIRM_TRIES_MAX
        raise NotRemoved(f"the DLJ deletion failed {tries} times ({why})")


def _status_name(status: object) -> str:
    return getattr(status, "name", str(status))
