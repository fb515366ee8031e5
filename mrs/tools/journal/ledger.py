"""The replay ledger: which journal records jplay has replayed, and how it went.

Why it exists: a replay interrupted by Ctrl-C, a crash or a server going down must
resume on the next run without sending anything twice that was acknowledged, and
a second run must not replay the same records again by accident. So jplay keeps,
per (journal, seq), the last replay's state and *generation*. The generation is
part of the idempotency key of the replayed put (a MAC of `pcj:1:<seq>:<gen>` under
a random secret kept in the ledger directory, so nobody else can predict it); the
server stores a key at most once, so a record whose outcome is unknown (sent, but
the tool died before the answer was recorded) is simply sent again under the same
key and the server answers with the first copy's seq. `--again` starts a new
generation, which is the only way to deliver a record a second time.

Where: a small LMDB environment in `data_dir/replay-ledger/`, deliberately not
inside the server's `data_dir/journals` environment (the server owns that one and
its schema). Writes are synced (one fsync per flush, many records per flush).

States:
- `pending`: an intent — about to be sent (or sent) under `gen`; outcome unknown.
- `stored`: the server acknowledged it as stored (`replay_seq` is the copy's seq).
- `failed`: the server answered that it was not stored (`status` says why).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any, NamedTuple

import lmdb
import msgpack

from journals import Journal, seq_key
from journals.lock_file import allocate_new
from mrs.exit_status import CommandError
from mrs.offline.journal_files import REPLAY_LEDGER_DIRNAME
from mrs.storage.atomic_file import create_file, replace_file
from mrs.storage.journal_check import walk

LEDGER_DIRNAME = REPLAY_LEDGER_DIRNAME
SECRET_FILENAME = "key-secret"
SCOPE_FILENAME = "scope.json"
"""The sender queue and `--to` of the last replay, whether it left records in doubt,
and of which journal (`ReplayLedger.claim_scope`)."""
JOURNAL_NAMES = frozenset(journal.value for journal in (Journal.PCJ, Journal.DLJ))
"""What scope.json's `journal` names: the journal whose records are in doubt, or null
(not known: written by an earlier release, or records of both in doubt)."""
LOCK_FILENAME = "replay.lock"
"""Held (flock) by the one jplay sending from this ledger (`ReplayLedger.hold`)."""
LEDGER_MAP_BYTES = 1 << 30
LEDGER_MAX_READERS = 126
"""LMDB's default count of reader slots, named for `allocate_new`."""
PENDING = "pending"
STORED = "stored"
FAILED = "failed"
STATES = frozenset((PENDING, STORED, FAILED))


class LedgerEntry(NamedTuple):
    """One record's replay state. A named tuple: a replay stages one per record, and
    building a frozen dataclass cost several times as much (benchmarks/README.md, jplay)."""

    state: str
    gen: int
    replay_seq: int = 0
    status: int = 0
    time_ns: int = 0
    target: str = ""

    def pack(self) -> bytes:
        """[state, gen, replay_seq, status, time_ns, target] in msgpack."""
        return _PACKER.pack(self)

    @classmethod
    def unpack(cls, data: bytes) -> LedgerEntry:
        """The entry `pack` wrote; ValueError for anything else (a damaged ledger)."""
        try:
            entry = cls(*msgpack.unpackb(data))
        except (ValueError, TypeError) as error:  # msgpack's errors are ValueErrors
            raise ValueError(f"not a ledger entry ({type(error).__name__})") from None
        if entry.state not in STATES or type(entry.gen) is not int or entry.gen < 1:
            raise ValueError(
                f"not a ledger entry (state {entry.state!r}, generation {entry.gen!r})"
            )
        return entry


_PACKER = msgpack.Packer()
"""Packs a tuple as the array it always was; one packer for every entry."""
SECRET_BYTES = 32


class LedgerDamaged(CommandError):
    """The ledger or its key secret cannot be trusted: one line, exit status 1."""


class LedgerBusy(CommandError):
    """Another jplay is sending from this ledger: one line, exit status 1."""


def _flock(path: Path) -> int | None:
    """An exclusive lock on `path` (created if need be): its descriptor, which holds
    the lock until closed; None when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _refuse_damaged(path: Path) -> None:
    """Walk the ledger in a child first, as the server's journals are walked
    (mrs.storage.journal_check): LMDB trusts its file, and one cut short (a full disk,
    a bad copy) killed jplay with SIGBUS. The way out keeps `key-secret`: a run with a
    new ledger then resends each record under its first key, and the server answers
    what it already stored as a duplicate (within its dedupe window)."""
    if not (path / "data.mdb").exists():
        return
    report = walk(path)
    if report.failure is not None:
        raise LedgerDamaged(damaged_ledger(path, report.failure))


def damaged_ledger(path: Path, damage: str) -> str:
    """The one line for a damaged ledger: what is wrong and the way out."""
    return (
        f"the replay ledger {path / 'data.mdb'} is damaged: {damage}; move "
        f"data.mdb and lock.mdb out of {path} (keep {SECRET_FILENAME}) and run again: "
        "records are then resent under their first keys, and the server stores none "
        "twice that it stored within its dedupe window"
    )


def _is_scope(value: object) -> bool:
    """Whether `value` is a scope as `_write_scope` writes it, each field of its type.
    Why each type: an `again_since_ns` of another (a scope edited by hand, a bad
    copy) was met only when a ledger time was compared with it, and jplay --again
    stopped on "unexpected error: TypeError" half-way through planning."""
    if not isinstance(value, dict) or not {"as", "to"} <= value.keys():
        return False
    since = value.get("again_since_ns")
    return (
        isinstance(value["as"], str)
        and (value["to"] is None or isinstance(value["to"], str))
        and isinstance(value.get("in_doubt", False), bool)
        and (since is None or (isinstance(since, int) and not isinstance(since, bool)))
        and value.get("journal") in (None, *JOURNAL_NAMES)
        and (
            value.get("doubts") is None
            or (isinstance(value["doubts"], list) and all(map(_is_doubt, value["doubts"])))
        )
    )


DOUBTS_MAX = 16
"""Selections in doubt scope.json names at most; beyond, only a run over its whole
journal settles them (as for a scope.json of an earlier release, which names none)."""


def _is_range(value: object) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(
            end is None or (isinstance(end, int) and not isinstance(end, bool)) for end in value
        )
    )


def _is_doubt(value: object) -> bool:
    """Whether `value` is one selection in doubt as `mrs jplay` describes its run."""
    return (
        isinstance(value, dict)
        and value.get("journal") in JOURNAL_NAMES
        and isinstance(value.get("criteria"), dict)
        and _is_range(value.get("seq"))
        and _is_range(value.get("time"))
        and isinstance(value.get("flags"), str)
    )


def _within(outer: list, inner: list) -> bool:
    """Whether the range `outer` holds the range `inner` (None: no end)."""
    low, high = outer
    inner_low, inner_high = inner
    return (low is None or (inner_low is not None and low <= inner_low)) and (
        high is None or (inner_high is not None and high >= inner_high)
    )


def covers(run: dict, doubt: dict) -> bool:
    """Whether a run that selected `run` and ended without a stop or a `--limit` sent
    again every record of `doubt` (a run left in doubt): the same journal, no criterion
    or the same ones, and seq and time ranges that hold the other's. Criteria are
    compared as typed (`ORDERS` and `1.10` are not taken for one another): a wrong
    "no" only keeps a scope in doubt, whose refusal names the flags that settle it."""
    return (
        run["journal"] == doubt["journal"]
        and (not run["criteria"] or run["criteria"] == doubt["criteria"])
        and _within(run["seq"], doubt["seq"])
        and _within(run["time"], doubt["time"])
    )


def _in_doubt_refusal(last: dict, sender: str, to: str | None) -> str:
    """The one line refusing a run in another scope than the last one's, which left
    records in doubt: the command that finishes them, with the selection of the first
    run in doubt when it is known (the scope alone, run again, replayed every record of
    the journal, also those the operator had kept out of the replay)."""
    flags = f"--as {last['as']}" + (f" --to {last['to']}" if last["to"] else "")
    which = f"mrs jplay {last['journal']}" if last.get("journal") else "the last replay"
    doubts = last.get("doubts") or []
    if doubts:
        which = f"mrs jplay {doubts[0]['journal']}"
        flags += doubts[0]["flags"] and f" {doubts[0]['flags']}"
        if len(doubts) > 1:
            flags += f" (the first of {len(doubts)} selections in doubt)"
    return (
        f"the last replay from this ledger (--as {last['as']}"
        + (f" --to {last['to']}" if last["to"] else "")
        + f") left records in doubt (sent, no answer): run {which} again with {flags} "
        f"to finish them first; sent as {sender}{' to ' + to if to else ''}, the server "
        "would store them again"
    )


def _damaged_scope(path: Path, damage: str) -> str:
    """The one line for a damaged scope.json: what is wrong and the way out. Not the
    ledger's (`damaged_ledger`): moving data.mdb aside leaves the scope as it is,
    refused again, and forgets what was replayed."""
    return (
        f"the replay ledger's {path} is damaged: {damage}; move it aside and run the "
        "last replay's command again (the same --as and --to): records it left in "
        "doubt are then answered as duplicates, not stored twice"
    )


def _create_secret(path: Path) -> bytes:
    """A new secret at `path`, or the one another jplay made first: two first runs on
    one data directory once each kept the secret it made (the last rename won the
    file), so each put every record under keys of its own and it was stored twice."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    secret = secrets.token_bytes(SECRET_BYTES)
    if create_file(path, (secret.hex() + "\n").encode(), mode=0o600):
        return secret
    return _secret_from(path.read_text(), path)


def _secret_from(text: str, path: Path) -> bytes:
    """The secret in `text`. A damaged one is refused, never replaced: a new secret
    gives every record new idempotency keys, so records whose answer was lost in an
    earlier run would be stored twice."""
    try:
        secret = bytes.fromhex(text.strip())
    except ValueError:
        secret = b""
    if len(secret) != SECRET_BYTES:
        raise LedgerDamaged(
            f"the replay ledger's key secret {path} is damaged (not {SECRET_BYTES} bytes "
            "in hex): restore it from a backup of the data directory; a new one would "
            "give each replay a new idempotency key, and records whose answer was lost "
            "in an earlier run would be stored twice"
        )
    return secret


class ReplayLedger:
    """Per-group replay ledger. Open once per process; `flush()` makes staged
    entries durable in one synced transaction."""

    def __init__(self, data_dir: Path, *, readonly: bool = False) -> None:
        self.path = Path(data_dir) / LEDGER_DIRNAME
        self.readonly = readonly
        self._staged: dict[tuple[str, int], LedgerEntry] = {}
        self.env: lmdb.Environment | None = None
        self._dbs: dict[str, Any] = {}
        self._secret: bytes | None = None
        self._lock_fds: list[int] = []
        """Locks held by `hold`, released by `close`."""
        self.last_in_doubt = False
        """The run before this one left records in doubt (`claim_scope`)."""
        self.journal: str | None = None
        """The journal this run replays (`claim_scope`)."""
        self.last_doubt_journal: str | None = None
        """The journal of the records the run before left in doubt; None when not
        known (its scope.json came from an earlier release) or nothing was."""
        self._own: dict | None = None
        """This run's selection, as `claim_scope` was given it."""
        self._stood_for: list[dict] = []
        """The earlier selections in doubt this run's selection covers (`claim_scope`): in
        doubt again if it ends unfinished with its own records all answered."""
        self.doubts: list[dict] | None = []
        """The selections of runs whose records may be in doubt (`covers`), this run's
        last while it runs; None when not known (a scope.json of an earlier release,
        or more than DOUBTS_MAX): only a run over the whole journal settles those."""
        self.again_since_ns: int | None = None
        """When the unfinished `--again` round began (`plan_again`): a record stored
        since then was replayed by this round, and another `--again` run skips it."""
        if readonly and not (self.path / "data.mdb").exists():
            return  # nothing replayed yet: an empty ledger, and a dry run creates nothing
        if not readonly:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            allocate_new(self.path, LEDGER_MAX_READERS)  # a full disk: ENOSPC, not SIGBUS
        _refuse_damaged(self.path)
        self.env = lmdb.open(
            str(self.path),
            mode=0o600,
            map_size=LEDGER_MAP_BYTES,
            max_dbs=4,
            sync=True,
            metasync=True,
            readonly=readonly,
            max_readers=LEDGER_MAX_READERS,
        )
        for journal in (Journal.PCJ, Journal.DLJ):
            try:
                self._dbs[journal.value] = self.env.open_db(
                    journal.value.encode(), create=not readonly
                )
            except lmdb.NotFoundError:
                self._dbs[journal.value] = None

    def get(self, journal: Journal, seq: int) -> LedgerEntry | None:
        staged = self._staged.get((journal.value, seq))
        if staged is not None:
            return staged
        db = self._dbs.get(journal.value)
        if db is None or self.env is None:
            return None
        with self.env.begin(db=db) as txn:
            value = txn.get(seq_key(seq))
        return None if value is None else self._entry(journal, seq, value)

    def get_many(self, journal: Journal, seqs: list[int]) -> dict[int, LedgerEntry]:
        """Entries for many seqs from one read transaction (jplay plans in chunks).

        One cursor walks the ledger from the lowest seq asked to the highest, instead
        of a lookup per seq: a first replay finds nothing at all in one seek, and a
        chunk's seqs are neighbours (benchmarks/README.md, `mrs jplay` throughput)."""
        found: dict[int, LedgerEntry] = {}
        db = self._dbs.get(journal.value)
        if db is not None and self.env is not None and seqs:
            wanted = set(seqs)
            last_key = seq_key(max(wanted))
            with self.env.begin(db=db) as txn:
                cursor = txn.cursor()
                if cursor.set_range(seq_key(min(wanted))):
                    for key, value in cursor.iternext():
                        if key > last_key:
                            break
                        seq = int.from_bytes(key, "big")
                        if seq in wanted:
                            found[seq] = self._entry(journal, seq, value)
        for seq in seqs:
            staged = self._staged.get((journal.value, seq))
            if staged is not None:
                found[seq] = staged
        return found

    def _entry(self, journal: Journal, seq: int, value: bytes) -> LedgerEntry:
        try:
            return LedgerEntry.unpack(value)
        except ValueError as error:
            damage = f"its {journal} seq {seq}: {error}"
            raise LedgerDamaged(damaged_ledger(self.path, damage)) from None

    def stage(
        self,
        journal: Journal,
        seq: int,
        state: str,
        gen: int,
        *,
        replay_seq: int = 0,
        status: int = 0,
        target: str = "",
    ) -> None:
        """Remember an entry; it is durable after the next flush()."""
        if self.readonly:
            raise RuntimeError("the ledger was opened read-only (dry run)")
        self._staged[(journal.value, seq)] = LedgerEntry(
            state, gen, replay_seq, int(status), time.time_ns(), target
        )

    @property
    def staged(self) -> int:
        return len(self._staged)

    def flush(self) -> None:
        """Write every staged entry in one synced transaction."""
        if not self._staged or self.env is None:
            return
        staged, self._staged = self._staged, {}
        try:
            by_journal: dict[str, list[tuple[bytes, bytes]]] = {}
            for (journal, seq), entry in staged.items():
                by_journal.setdefault(journal, []).append((seq_key(seq), entry.pack()))
            with self.env.begin(write=True) as txn:
                for journal, items in by_journal.items():
                    # one C call per journal, in key order (neighbours share pages)
                    txn.cursor(db=self._dbs[journal]).putmulti(sorted(items))
        except BaseException:
            staged.update(self._staged)
            self._staged = staged
            raise

    def counts(self, journal: Journal) -> dict[str, int]:
        """How many records of a journal are in each state (for `--json` summaries)."""
        result: dict[str, int] = {}
        db = self._dbs.get(journal.value)
        if db is None or self.env is None:
            return result
        with self.env.begin(db=db) as txn:
            for key, value in txn.cursor(db):
                state = self._entry(journal, int.from_bytes(key, "big"), value).state
                result[state] = result.get(state, 0) + 1
        return result

    def key_secret(self) -> bytes:
        """A random secret kept with the ledger (created on first use), for replay
        idempotency keys nobody else can predict (mrs.tools.journal.replay_keys.replay_key)."""
        if self._secret is not None:
            return self._secret
        path = self.path / SECRET_FILENAME
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = None
        if text is not None:
            secret = _secret_from(text, path)
        elif self.readonly:
            secret = secrets.token_bytes(SECRET_BYTES)  # a dry run sends nothing
        else:
            secret = _create_secret(path)
        self._secret = secret
        return secret

    def hold(self, dlj_handler_lock: Path | None = None) -> None:
        """Be the one replay sending from this ledger, or raise LedgerBusy. Why: the
        server scopes an idempotency key by sender queue, and two jplays run side by
        side from different queues (`--as`) each sent every record both selected, with
        the same keys, and the receiver got two copies of each, neither marked. A DLJ
        replay also holds `dlj_handler_lock`, the lock of `mrs dlq-handler` working
        that DLJ (INPUTQ(DLJ)): each would send the same dead letters."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        held = _flock(self.path / LOCK_FILENAME)
        if held is None:
            raise LedgerBusy(
                f"another mrs jplay is replaying from {self.path.parent} (it holds "
                f"{self.path / LOCK_FILENAME}): two at once would each send the records "
                "both select, and the server would store both copies; let it finish "
                "(or stop it), then run again"
            )
        self._lock_fds.append(held)
        if dlj_handler_lock is None:
            return
        held = _flock(dlj_handler_lock)
        if held is None:
            raise LedgerBusy(
                f"mrs dlq-handler is working this DLJ (it holds {dlj_handler_lock}): a "
                "replay beside it would send the dead letters it forwards a second "
                "time; let it finish (or stop it), then run again"
            )
        self._lock_fds.append(held)

    def claim_scope(
        self,
        sender: str,
        to: str | None,
        *,
        again: bool = False,
        journal: Journal | None = None,
        selection: dict | None = None,
    ) -> None:
        """Record that this run sends as `sender` (to `to`, or each record's target)
        from `journal`, its records in doubt until `scope_settled`; raise LedgerBusy
        when the last run left records in doubt under another scope. Why: the server
        scopes an idempotency key by sender queue and target; a record sent with no
        answer, sent again by a run with another `--as` or `--to`, was stored a second
        time, unmarked. The same scope finds its first copies (answered with their
        seqs). The journal is written down for `mrs dlq-handler`, which marks its
        puts possible duplicates only while records of the DLJ may be in doubt
        (mrs.offline.redrive_traces); None: not known (as in a scope.json of an
        earlier release), which the handler takes as the DLJ. `selection`: what this
        run selects (`covers`), kept while its records may be in doubt."""
        last = self._last_scope()
        if last is not None and last.get("in_doubt") and (last["as"], last["to"]) != (sender, to):
            raise LedgerBusy(_in_doubt_refusal(last, sender, to))
        self.plan_again(again, last)
        self.last_in_doubt = bool(last is not None and last.get("in_doubt"))
        self.last_doubt_journal = last.get("journal") if last and self.last_in_doubt else None
        self.journal = None if journal is None else journal.value
        self.doubts = [] if not self.last_in_doubt else last.get("doubts") if last else None
        self._own = selection
        if self.doubts is not None and selection is not None:  # covered: this run settles it
            self._stood_for = [doubt for doubt in self.doubts if covers(selection, doubt)]
            self.doubts = [doubt for doubt in self.doubts if not covers(selection, doubt)]
            self.doubts = [*self.doubts, selection] if len(self.doubts) < DOUBTS_MAX else None
        self._write_scope(sender, to, in_doubt=True)  # until this run says how it ended

    def plan_again(self, again: bool, last: dict | None = None) -> None:
        """Set `again_since_ns`: when the `--again` round this run belongs to began.

        Why: a record an `--again` run replayed is `stored` under its new generation
        like any other, and a second `--again` run took it for one replayed before the
        round: the same command run again after a stop (as the summary advises) sent
        every record the stopped run had replayed a third time. Now an `--again` run
        that did not finish is continued by the next `--again` run: records stored
        since it began are skipped. Once an `--again` run ends with everything it
        selected replayed, the next one starts a new round."""
        if last is None:
            last = self._last_scope()
        carried = None if last is None else last.get("again_since_ns")
        if again and carried is None:
            carried = time.time_ns()
        self.again_since_ns = carried

    def _last_scope(self) -> dict | None:
        """What the last run wrote in scope.json; None before the first run."""
        path = self.path / SCOPE_FILENAME
        try:
            last = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise LedgerDamaged(_damaged_scope(path, str(error))) from None
        if not _is_scope(last):
            raise LedgerDamaged(_damaged_scope(path, "not a replay scope"))
        return last

    def scope_settled(
        self,
        sender: str,
        to: str | None,
        in_doubt: bool,
        *,
        again_done: bool = False,
        covered_all: bool = True,
        finished: bool = False,
    ) -> None:
        """This run ended: whether it left records in doubt (`claim_scope`), and
        whether it was an `--again` run that replayed everything it selected (the
        round is over: `plan_again`). After a run that left records in doubt
        (`last_in_doubt`), a run settles the scope only if it `covered_all` (it
        selected every record and was not stopped): one over fewer records (`--limit`,
        `--seq`, a target) had nothing in doubt of its own and settled it, and a run
        with another `--as` then stored the first run's unanswered records a second
        time, unmarked (the ledger holds no entry for a record sent with no answer).
        Nor does a run of the other journal settle it: its records are not the ones
        in doubt (`_doubt_journal`). With the selections in doubt known (`doubts`), a
        run `finished` (not stopped, no `--limit`) over a selection that `covers` one
        settles it."""
        if again_done:
            self.again_since_ns = None
        own = self._own
        if self.doubts is not None and own is not None:
            # `claim_scope` let this run's selection stand for the earlier ones it
            # covers: a run to its end sent every record of them again, so they are
            # settled once it has no record in doubt of its own (the same narrow
            # command run again settles its own doubt, not only a whole journal's).
            # Unfinished with none of its own in doubt (a --limit, a stop), only those
            # earlier ones are: kept, its own was a scope in doubt no record was in.
            rest = [doubt for doubt in self.doubts if doubt is not own]
            if in_doubt:
                self.doubts = [*rest, own]
            else:
                self.doubts = rest if finished else [*rest, *self._stood_for]
            left = bool(self.doubts)
        else:
            left = in_doubt or (
                self.last_in_doubt and (not covered_all or self._other_journal_in_doubt())
            )
        self._write_scope(sender, to, left, own_doubt=in_doubt)

    def _other_journal_in_doubt(self) -> bool:
        """Whether the last run's records in doubt are known to be of the other journal
        than this run's (not known, as from an earlier release: taken as this one's,
        which settles them as that release did)."""
        last = self.last_doubt_journal
        return last is not None and self.journal is not None and last != self.journal

    def _doubt_journal(self, own_doubt: bool) -> str | None:
        """The journal scope.json names: whose records are in doubt once this run
        ended, or while it runs (`own_doubt`: this run's may be); None when both
        journals' may be, or it is not known."""
        if not self.last_in_doubt:
            return self.journal
        if not self._other_journal_in_doubt():
            return self.journal if self.last_doubt_journal is not None else None
        return None if own_doubt else self.last_doubt_journal

    def _write_scope(
        self, sender: str, to: str | None, in_doubt: bool, own_doubt: bool = True
    ) -> None:
        scope: dict[str, object] = {"as": sender, "to": to, "in_doubt": in_doubt}
        scope["journal"] = self._doubt_journal(own_doubt) if in_doubt else self.journal
        if in_doubt:
            scope["doubts"] = self.doubts
            journals = {doubt["journal"] for doubt in self.doubts or ()}
            if self.doubts:  # the journal(s) of the selections still in doubt
                scope["journal"] = journals.pop() if len(journals) == 1 else None
        if self.again_since_ns is not None:
            scope["again_since_ns"] = self.again_since_ns
        replace_file(self.path / SCOPE_FILENAME, json.dumps(scope).encode("utf-8"))

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None
        while self._lock_fds:
            os.close(self._lock_fds.pop())  # releases its lock


LEDGER_SALVAGING_DIRNAME = ".replay-ledger.salvaging"
"""Where `copy_ledger` builds its copy, renamed to `replay-ledger` only once whole."""


def copy_ledger(data_dir: Path, destination: Path) -> str | None:
    """Copy jplay's ledger of the data directory `data_dir` into `destination`, a new
    data directory (`mrs journal salvage --to`); what was copied, in words, or None
    when `data_dir` has no ledger.

    Why salvage carries it: the documented procedure swaps the salvaged directory in
    for the damaged one, and the ledger stayed behind. The next `mrs jplay` then found
    no record replayed and made a new key secret, so it replayed every record again
    under new idempotency keys, and the server stored each a second time, its `replay`
    header the same as the first copy's. A ledger whose entries cannot be read still
    gives its key secret: a replay then resends under the first keys, and the server
    answers what it stored within its dedupe window as a duplicate."""
    source = Path(data_dir) / LEDGER_DIRNAME
    if not (source / SECRET_FILENAME).exists() and not (source / "data.mdb").exists():
        return None
    target = Path(destination) / LEDGER_DIRNAME
    _refuse_another_ledger(source, target)
    building = Path(destination) / LEDGER_SALVAGING_DIRNAME
    shutil.rmtree(building, ignore_errors=True)  # what a stopped salvage left
    building.mkdir(mode=0o700, parents=True)
    try:
        for name in (SECRET_FILENAME, SCOPE_FILENAME):
            if (source / name).exists():
                create_file(building / name, (source / name).read_bytes(), mode=0o600)
        said = _copy_entries(source, building)
        shutil.rmtree(target, ignore_errors=True)  # a stopped salvage's, same secret
        os.rename(building, target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return said


def _refuse_another_ledger(source: Path, target: Path) -> None:
    """FileExistsError when `target` holds a ledger that is not a copy of `source`'s
    (a stopped salvage's copy has the same key secret, and is replaced)."""
    if not target.exists():
        return
    try:
        same = (target / SECRET_FILENAME).read_bytes() == (source / SECRET_FILENAME).read_bytes()
    except OSError:
        same = False
    if not same:
        raise FileExistsError(
            f"{target} already holds another replay ledger: salvage into a new directory"
        )


def _copy_entries(source: Path, building: Path) -> str:
    """The ledger's entries copied into `building` by LMDB (one consistent snapshot);
    what was copied, in words."""
    if not (source / "data.mdb").exists():
        return "key secret copied (no replay recorded yet)"
    try:
        ledger = ReplayLedger(source.parent, readonly=True)
    except (LedgerDamaged, lmdb.Error) as damaged:
        return (
            f"entries not copied ({damaged}); key secret copied: jplay resends each "
            "record under its first key, and the server stores none twice that it "
            "stored within its dedupe window"
        )
    try:
        assert ledger.env is not None
        ledger.env.copy(str(building))
        os.chmod(building / "data.mdb", 0o600)
        with ledger.env.begin() as txn:
            entries = sum(txn.stat(db)["entries"] for db in ledger._dbs.values() if db is not None)
    finally:
        ledger.close()
    return f"copied with its key secret ({entries} records replayed or tried)"
