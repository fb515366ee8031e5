"""The replay engine behind `mrs jplay`: plan, send, record — no argument parsing.

Why it is built this way (what an operator needs at 3 a.m.):

- **Never twice by accident.** A replay ledger (`mrs.tools.journal.ledger`) in the group's data
  directory records each record's replay generation and outcome. Each replayed put
  carries the idempotency key `replay:<run>:<seq>:<tag>` (mrs.tools.journal.replay_keys)
  (the same on every run, guessable by nobody else), so a re-run
  after Ctrl-C, SIGKILL or a server outage resends only what was not acknowledged,
  and a record that was stored but whose answer was lost is answered by the server
  as a duplicate (the first copy's seq) instead of being stored twice. Only
  `--again` starts a new generation, and that intent is durable before the put leaves.
- **Acknowledged means stored.** Only WF modes (the tool must know each outcome).
  A put answered STORED (or SAF_SUCCESS by its UMA) is `stored`; any other answer
  is `failed` and the record stays where it is; a timeout or a lost connection
  leaves the outcome unknown, and the next run resends under the same key.
- **`--remove` (DLJ)** deletes a dead letter only after the ledger durably says
  its replay was stored (the same flush, ledger first).
- **Fast when asked, gentle when told.** `window` puts in flight share one
  connection; a `Pacer` caps the rate. Ledger outcomes are flushed in one synced
  transaction every 0.25 s, not per message: losing the last flush to a crash only
  means those records are resent under their old keys and answered as duplicates.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from clients import (
    ConnectionLost,
    FieldRefused,
    MrsError,
    MrsTimeout,
    Psb,
    PutItem,
    ReplyTimeout,
)
from journals import CorruptRecord, Journal, JournalStore, Record, WriteBatch, seq_key
from mrs.errors import OperatorError
from mrs.group.shapes import IDEMPOTENCY_HEADER
from mrs.group.transfer import PERMANENT_REFUSALS
from mrs.model import POSSIBLE_DUPLICATE_HEADER, DeliveryMode, Status, Uma
from mrs.offline.redrive_traces import handler_attempt_key
from mrs.offline.selection import RecordFilter
from mrs.storage.journal_scan import read_page, record_time_ns, seq_of_key
from mrs.tools.journal.ledger import FAILED, PENDING, STORED, LedgerEntry, ReplayLedger
from mrs.tools.journal.pacing import Pacer
from mrs.tools.journal.render import status_name
from mrs.tools.journal.replay_keys import replay_headers, replay_key  # noqa: F401 - re-exported

REFUSED_UNTIL_FIXED = PERMANENT_REFUSALS | {Status.NOTAUTHORIZED}
"""Refusals a replay run again gets again until the operator changes something: the
link's permanent ones, and a right the replaying principal lacks (the summary advised
running the same command again, which could not help before the grant)."""

PLAN_CHUNK = 1024
PLAN_CHUNK_BYTES = 16 << 20
"""A plan chunk also ends once its records' bodies hold this many bytes: 1,024
records of 1 MiB bodies were read at once (448 MB of jplay's memory for 400)."""
BATCH_PUTS_MAX = 512
"""Puts one worker sends in one put_many (one frame, one commit on the server)."""
BYTES_IN_FLIGHT_MAX = 64 * 1024 * 1024
"""Bodies in flight at most, whatever the window: a quarter of the server's default
connection_bytes_max, beyond which it would refuse puts (EXCEEDQUOTA)."""
LEDGER_FLUSH_S = 0.25
FAILURES_LISTED = 20
REPLAY_MODES = (DeliveryMode.WF_DQF, DeliveryMode.WF_SAF, DeliveryMode.WF_CONF)
"""jplay must know each replay's outcome, and only recoverable puts honour the
idempotency key, so only these modes are accepted."""


class UsageError(OperatorError):
    """Bad arguments: exit status 2, nothing read or sent."""


@dataclass(frozen=True)
class Options:
    journal: Journal
    group_id: int
    address: str | None
    sender: str | None
    to: str | None
    delivery: DeliveryMode
    uma: Uma
    timeout_s: float
    rate: float | None
    window: int
    again: bool
    remove: bool
    dry_run: bool
    json: bool
    selects_all: bool = True
    """No criterion the operator gave (the end at the run's start aside): the run
    covers every record the journal held when it began, so it settles a scope an
    earlier run left in doubt (`Ledger.scope_settled`)."""
    started_ns: int | None = None
    """The run's start when it is also its selection's end (no --until): a record of
    a later time is counted (`Tally.later`), not sent."""
    described: dict | None = None
    """The selection as the ledger keeps it while the run's records may be in doubt
    (`mrs.tools.journal.jplay.describe_selection`, `ReplayLedger.claim_scope`)."""


@dataclass(slots=True)
class Item:
    """One record to send under one generation."""

    key: bytes
    record: Record
    gen: int
    target: str
    repeat: bool = False
    """A DLJ record `mrs dlq-handler` put and did not remove (its attempt mark): a
    copy may be stored under the handler's key, so this put is marked a possible
    duplicate (mrs.offline.redrive_traces)."""


@dataclass
class Tally:
    """Everything the final summary says."""

    selected: int = 0
    sent: int = 0
    skipped: int = 0
    copies: int = 0
    """PCJ records that are copies this ledger's replays made, confirmed there, whose
    original is still in the PCJ (`Planner._own_copy`): never sent again."""
    failed: int = 0
    in_doubt: int = 0
    permanent: int = 0
    """Failures no re-run cures (refusals like NOSUCHQUEUE: PERMANENT_REFUSALS)."""
    not_attempted: int = 0
    removed: int = 0
    corrupt: int = 0
    later: int = 0
    """Records the selection would take but for their time, after the run's start
    (`Options.started_ns`): a live group's newer records, or a clock ahead of this
    host's. Said in the summary, so a run that looks complete says what it left."""
    statuses: Counter = field(default_factory=Counter)
    by_target: Counter = field(default_factory=Counter)
    by_reason: Counter = field(default_factory=Counter)
    by_pair: Counter = field(default_factory=Counter)
    failures: list[dict] = field(default_factory=list)
    elapsed_s: float = 0.0
    stopped: str = ""
    stopped_for_good: bool = False
    """The server refused the run itself for a reason a re-run meets again (the
    `--as` attach answered NOSUCHQUEUE by a server at `--address` that is another
    group, or NOTAUTHORIZED): not resumable. Why: the summary said to run the same
    command again and `--json` said `"resumable": true`, so a script that re-runs
    while resumable ran for ever against the wrong group."""

    def fail(
        self, item: Item, status: str, message: str = "", *, in_doubt: bool, permanent: bool = False
    ) -> None:
        self.failed += 1
        self.in_doubt += in_doubt
        self.permanent += permanent
        self.statuses[status] += 1
        if len(self.failures) < FAILURES_LISTED:
            self.failures.append(
                {
                    "seq": item.record.seq,
                    "target": item.target,
                    "status": status,
                    "message": message,
                }
            )

    @property
    def ok(self) -> bool:
        return not self.failed and not self.not_attempted and not self.stopped

    @property
    def resumable(self) -> bool:
        """Whether running the same command again could deliver more: something was
        not sent, not answered, or refused for a reason that may pass."""
        if self.stopped_for_good:
            return False
        return bool(self.not_attempted or self.stopped or self.failed > self.permanent)


# ---------------------------------------------------------------------- planning
class Planner:
    """Reads the selected records in chunks (short read transactions) and drops what
    the ledger says was already replayed.

    The generation a record is sent under must be known to the next run before the
    put leaves. Without an entry, or after a failed / unknown outcome, the next run
    derives the same generation from the ledger as it is, so nothing needs writing
    first; only `--again` changes a generation, and those intents are made durable
    (one synced transaction per chunk) before any put of the chunk is sent."""

    def __init__(
        self,
        store: JournalStore,
        journal: Journal,
        selection: RecordFilter,
        ledger: ReplayLedger,
        options: Options,
        tally: Tally,
        target_of: Callable[[Record], str],
        on_skip: Callable[[bytes], None],
    ) -> None:
        self.store = store
        self.journal = journal
        self.selection = selection
        self.ledger = ledger
        self.options = options
        self.tally = tally
        self.target_of = target_of
        self.on_skip = on_skip
        self.after_seq: int | None = None
        self.done = False
        self.planned = 0
        """Records this run has planned to send (what `--limit` counts)."""
        self.cut_by_limit = False
        """`--limit` ended the plan: the selection may hold more to replay, so an
        `--again` round is not over (`ReplayLedger.scope_settled`)."""
        self._seq_range = RecordFilter(
            journal, seq_min=selection.seq_min, seq_max=selection.seq_max
        )
        """What a chunk reads: the selection's seq range only, PLAN_CHUNK records of it
        at most, matched here. Read with the whole selection, a chunk went on until
        PLAN_CHUNK records matched: through millions when few do, in one call."""
        self._matches = None if selection.selects_all else selection.matches
        self._later = _later_than_start(selection, options.started_ns)
        self._secret: bytes | None = None

    def next_chunk(self) -> list[Item]:
        """The next items to send; [] once everything is planned."""
        items: list[Item] = []
        while not items and not self.done:
            items = self.plan_chunk()
        return items

    def plan_chunk(self) -> list[Item]:
        """The items of the next chunk of records: [] also when the ledger skips all of
        it (`done` says whether more may come). One chunk at a time, so a replay can
        service its connection between chunks (Replayer.next_items).

        `--limit N` counts the records this run replays, not those the ledger skips:
        counted among the selected, an operator replaying in slices (`--limit 100`,
        run again and again) got fewer new records each run, and none once the first
        N had been replayed."""
        if self.done:
            return []
        items: list[Item] = []
        intents: list[Item] = []
        records = self._read_chunk()
        entries = self.ledger.get_many(self.journal, [key_record[1].seq for key_record in records])
        limit = self.selection.limit
        for key, record in records:
            self.tally.selected += 1
            if self._own_copy(record):
                self.tally.copies += 1
                continue
            entry = entries.get(record.seq)
            if self._skips(entry):
                self.tally.skipped += 1
                self.on_skip(key)
                continue
            gen = entry.gen if entry is not None else 1
            item = Item(key, record, gen, self.target_of(record), self._handler_put(record))
            if entry is not None and entry.state == STORED:
                item.gen += 1  # --again: a new generation, a new idempotency key
                intents.append(item)
            items.append(item)
            self.planned += 1
            if limit is not None and self.planned >= limit:
                self.done = self.cut_by_limit = True
                break
        if intents and not self.options.dry_run:
            for item in intents:
                self.ledger.stage(
                    self.journal, item.record.seq, PENDING, item.gen, target=item.target
                )
            self.ledger.flush()
        return items

    def _handler_put(self, record: Record) -> bool:
        """Whether the DLJ handler's attempt mark is on this record: a handler killed
        between its put and the removal left it, and its copy may be stored under
        another idempotency key than jplay's (mrs.offline.redrive_traces)."""
        if self.journal is not Journal.DLJ:
            return False
        return self.store.get_raw(Journal.META, handler_attempt_key(record.seq)) is not None

    def _own_copy(self, record: Record) -> bool:
        """Whether a PCJ record is the confirmation of a copy that a replay from this
        ledger made (its idempotency key is one only the ledger's secret makes) of a
        record still in the PCJ.

        Why: a replay to a queue whose receiver confirms into this PCJ (the original
        target, or a --to queue with pcj_default) adds a PCJ record per copy; a run of
        the same command again after a stop (`--since 1h`, no --until) selected those
        copies as new records and sent each again under a new key, so the receiver got
        every record stopped after its copy was confirmed twice. Replaying the original
        (`--again`) is how to send it once more; a copy whose original has left the PCJ
        (archived) is the only record of it left, and is replayed."""
        if self.journal is not Journal.PCJ or not isinstance(record.extra, dict):
            return False
        headers = record.extra.get("headers")
        if not isinstance(headers, dict):
            return False
        replay = headers.get("replay")
        if not isinstance(replay, dict) or replay.get("journal") != self.journal.value:
            return False
        seq, gen = replay.get("seq"), replay.get("generation")
        if replay.get("group") != self.options.group_id or seq == record.seq:
            return False
        if not isinstance(seq, int) or not isinstance(gen, int) or not 0 <= seq < 1 << 64:
            return False
        if self._secret is None:
            self._secret = self.ledger.key_secret()
        key = replay_key(self._secret, self.journal, self.options.group_id, seq, gen)
        if headers.get(IDEMPOTENCY_HEADER) != key:
            return False  # another program's message that says it is a replay
        return self.store.get_raw(self.journal, seq_key(seq)) is not None

    def _skips(self, entry: LedgerEntry | None) -> bool:
        """Whether the ledger says this run leaves the record alone (replayed before)."""
        return entry is not None and entry.state == STORED and self._replayed(entry)

    def _replayed(self, entry: LedgerEntry) -> bool:
        """Whether a record stored by a replay is done for this run: always, but under
        `--again` only when the round this run continues stored it (`plan_again`)."""
        if not self.options.again:
            return True
        since_ns = self.ledger.again_since_ns
        return since_ns is not None and entry.time_ns >= since_ns

    def _read_chunk(self) -> list[tuple[bytes, Record]]:
        """The selected records of the next PLAN_CHUNK read (corrupt ones reported)."""
        records: list[tuple[bytes, Record]] = []
        after = None if self.after_seq is None else seq_key(self.after_seq)
        page, ended = read_page(
            self.store, self.journal, self._seq_range, after, PLAN_CHUNK, PLAN_CHUNK_BYTES
        )
        for key, record in page:
            self.after_seq = int.from_bytes(key[-8:], "big")
            if isinstance(record, CorruptRecord):
                self.tally.corrupt += 1
                # its seq as --seq and `mrs dump` write it (the key is in hex)
                print(f"mrs jplay: {record} (seq {self.after_seq}); not replayed", file=sys.stderr)
                continue
            if self._matches is not None and not self._matches(record):
                if self._later is not None and self._later(record):
                    self.tally.later += 1
                continue
            records.append((key, record))
        if ended:
            self.done = True
        return records

    def count_rest(self) -> int:
        """Selected records this run would still have sent (after a stop): read only,
        no intents; those the ledger skips are not among them, and `--limit` bounds
        them as it bounds the plan."""
        rest = 0
        limit = self.selection.limit
        while not self.done:
            records = self._read_chunk()
            entries = self.ledger.get_many(self.journal, [record.seq for _key, record in records])
            for _key, record in records:
                if limit is not None and self.planned + rest >= limit:
                    self.done = True
                    break
                if self._own_copy(record):
                    continue
                if not self._skips(entries.get(record.seq)):
                    self.tally.selected += 1
                    rest += 1
        return rest


# ---------------------------------------------------------------------- sending
class Replayer:
    """Sends planned items through one client connection, `window` at a time."""

    def __init__(
        self,
        client,
        planner: Planner,
        ledger: ReplayLedger,
        store: JournalStore,
        options: Options,
        tally: Tally,
        removals: list[bytes] | None = None,
    ) -> None:
        self.client = client
        self.planner = planner
        self.ledger = ledger
        self.store = store
        self.options = options
        self.tally = tally
        self.pacer = Pacer(options.rate) if options.rate else None
        self.queue: deque[Item] = deque()
        self.removals: list[bytes] = [] if removals is None else removals
        """Dead letters to delete at the next flush (--remove); the planner adds those
        an earlier run replayed."""
        self.stop = False

    async def next_items(self, count: int, bytes_max: int) -> list[Item]:
        """Up to `count` planned items, in order, with at most about `bytes_max` bytes
        of bodies (always at least one); [] once everything is planned.

        A checkpoint after each chunk planned: a long run of records replayed before
        (a resumed replay of millions) was skipped in one call, and the event loop
        neither flushed nor read the connection meanwhile, so the client's heartbeat
        counted the server silent and dropped it after 15 s."""
        while not self.queue and not self.planner.done and not self.stop:
            self.queue.extend(self.planner.plan_chunk())
            await trio.lowlevel.checkpoint()
        if self.stop:
            return []
        queue = self.queue
        items: list[Item] = []
        body_bytes = 0
        while queue and len(items) < count and body_bytes < bytes_max:
            item = queue.popleft()
            body_bytes += len(item.record.body)
            items.append(item)
        return items

    async def run(self) -> None:
        """`window` puts in flight: batches of up to BATCH_PUTS_MAX puts (one frame
        and one commit each, `Client.put_many`), or single puts under a rate cap; and
        at most about BYTES_IN_FLIGHT_MAX bytes of bodies, so big dead letters stay
        inside the server's per-connection byte quota. Never more than `window` in
        flight (whole batches only): beyond the client's cap on requests in flight, puts
        would be refused unsent (EXCEEDQUOTA) and reported as failures."""
        batch = 1 if self.pacer is not None else min(self.options.window, BATCH_PUTS_MAX)
        workers = self.options.window // batch
        bytes_max = max(1, BYTES_IN_FLIGHT_MAX // workers)
        async with trio.open_nursery() as nursery:
            for _ in range(workers):
                nursery.start_soon(self._worker, batch, bytes_max)
        self.flush()

    async def flusher(self) -> None:
        while True:
            await trio.sleep(LEDGER_FLUSH_S)
            self.flush()

    def flush(self) -> None:
        """Outcomes first, then removals: a dead letter is deleted only once the ledger
        durably says its replay was stored."""
        self.ledger.flush()
        if self.removals:
            batch = WriteBatch.empty()
            for key in self.removals:  # the handler's attempt mark with its record
                batch.delete(Journal.DLJ, key)
                batch.delete(Journal.META, handler_attempt_key(seq_of_key(key)))
            self.store.commit_now(batch)
            self.tally.removed += len(self.removals)
            self.removals.clear()

    async def _worker(self, batch: int, bytes_max: int) -> None:
        while items := await self.next_items(batch, bytes_max):
            sending = False
            try:
                if self.pacer is not None:
                    await self.pacer.wait()
                if self.stop:
                    self.tally.not_attempted += len(items)
                    continue
                sending = True
                results = await self.client.put_many([self._put_item(item) for item in items])
            except MrsError as error:  # nothing could be sent (e.g. not connected)
                self.stop = True
                self.tally.stopped = self.tally.stopped or f"connection lost: {error.message}"
                self.tally.not_attempted += len(items)
                continue
            except BaseException:  # cancelled (Ctrl-C): the summary still counts these
                self._interrupted(items, sending)
                raise
            for item, result in zip(items, results, strict=True):
                self._outcome(item, result)

    def _interrupted(self, items: list[Item], sending: bool) -> None:
        """Items a stop caught in this worker: waiting for their turn (not attempted),
        or sent with no answer yet (in doubt: a re-run resends them under the same
        idempotency key, so the server stores each at most once)."""
        if not sending:
            self.tally.not_attempted += len(items)
            return
        for item in items:
            self.tally.fail(item, "INTERRUPTED", "stopped before the answer came", in_doubt=True)

    def _put_item(self, item: Item) -> PutItem:
        record, options = item.record, self.options
        headers = replay_headers(
            record, options.journal, options.group_id, item.gen, self.ledger.key_secret()
        )
        if item.repeat:
            headers[POSSIBLE_DUPLICATE_HEADER] = True
        return PutItem(
            record.body,
            item.target,
            delivery=options.delivery,
            uma=options.uma,
            msg_class=record.msg_class,
            msg_type=record.msg_type,
            priority=record.priority,
            correlation_id=record.correlation_id,
            timeout=options.timeout_s,
            headers=headers,
        )

    def _outcome(self, item: Item, result: Psb | MrsError) -> None:
        """Tally and stage one put's answer: stored, refused, or in doubt."""
        if isinstance(result, MrsError):
            self._refused(item, result)
            return
        options, record = self.options, item.record
        stored = result.stored or result.uma_status == Status.SAF_SUCCESS
        status = int(result.delivery_status)
        name = status_name(status)
        if not stored:
            self.ledger.stage(
                options.journal, record.seq, FAILED, item.gen, status=status, target=item.target
            )
            uma = status_name(int(result.uma_status))
            # Whose copy the UMA took: the replay's. Why said: "UMA DISC: DISC_SUCCESS"
            # alone read as if the dead letter had been discarded.
            kept = f"; the record stays in the {options.journal.value}"
            self.tally.fail(
                item,
                name,
                f"UMA {options.uma.name}: {uma} (of the replay's copy{kept})",
                in_doubt=False,
                permanent=status in REFUSED_UNTIL_FIXED,
            )
            return
        self.ledger.stage(
            options.journal,
            record.seq,
            STORED,
            item.gen,
            replay_seq=result.seq,
            status=status,
            target=item.target,
        )
        self.tally.sent += 1
        self.tally.statuses[name] += 1
        if options.remove:
            self.removals.append(item.key)

    def _refused(self, item: Item, error: MrsError) -> None:
        if isinstance(error, MrsTimeout | ReplyTimeout):  # the answer never came: in doubt
            self.tally.fail(item, "TIMEOUT", error.message, in_doubt=True)
        elif isinstance(error, ConnectionLost):  # PutOutcomeUnknown too: in doubt
            self.stop = True
            self.tally.stopped = f"connection lost: {error.message}"
            self.tally.fail(item, "LINK_DOWN", error.message, in_doubt=True)
        elif isinstance(error, FieldRefused):  # a field the wire cannot carry: never sent
            self.tally.fail(item, "REFUSED_LOCALLY", str(error), in_doubt=False, permanent=True)
        else:  # refused: the server (or the library) did not take it
            status = int(error.status)
            self.ledger.stage(
                self.options.journal,
                item.record.seq,
                FAILED,
                item.gen,
                status=status,
                target=item.target,
            )
            self.tally.fail(
                item,
                status_name(status),
                error.message,
                in_doubt=False,
                permanent=status in REFUSED_UNTIL_FIXED,
            )


def _later_than_start(
    selection: RecordFilter, started_ns: int | None
) -> Callable[[Record], bool] | None:
    """Whether a record the selection refuses is one it would take but for a time
    after the run's start (None: the operator gave the end, --until)."""
    if started_ns is None:
        return None
    unbounded = dataclasses.replace(selection, time_max_ns=None)

    def later(record: Record) -> bool:
        return record_time_ns(record) > started_ns and unbounded.matches(record)

    return later
