"""A replica: takes the active's commits on its replication address, makes each
durable in its own journals before acknowledging it, and fences old actives off.

Fencing: the replica keeps the highest term it has seen (in its META journal, with
its position) and refuses a hello or a record of an older term, so an active that was
replaced, and does not know yet, cannot make a replica acknowledge anything (its
answers stay held and it steps down). A newer active's hello replaces the link of an
older one at once.

Its position (term, number of the last record applied) is written in the same
transaction as the record, so after a crash it says exactly where it stands; a gap
(a record that does not follow) is refused, and the active sends from the position or
a full copy. A full copy is applied a slice at a time as it comes (the replica holds
one slice in memory): the first wipes everything, and until the last one the
journals carry `COPY_PARTIAL_KEY` and position (0, 0), so they are no candidate and a
lost link means a full copy again. Its slices were read while the active went on
committing, so the replica is whole again (a candidate) only once it has replayed
the records up to the one the copy names (`COPY_UPTO_KEY`).
"""

from __future__ import annotations

import contextlib
import logging
import struct
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from journals import JournalError, JournalStore, WriteBatch
from journals.batch import as_bytes, decode_batches
from journals.keys import Journal
from mrs.config.guards import Guards
from mrs.core.refusals import RefusalLog, clipped
from mrs.core.seqspace import BOOTS_KEY
from mrs.limits import (
    LINK_HANDSHAKE_TIMEOUT_S,
    REFUSAL_LOG_INTERVAL_S,
    REPLICATION_APPLY_RECORDS_MAX,
    REPLICATION_BACKLOG_BYTES_MAX,
    REPLICATION_BACKLOG_RECORDS_MAX,
    REPLICATION_COPY_SLICE_BYTES,
    REPLICATION_COPY_SLICE_ITEMS_MAX,
    REPLICATION_FAIL_LINGER_S,
)
from mrs.replication.coordinator import CoordinatorUnavailable, GroupState
from mrs.replication.rules import KEPT_REPLICATION, ReplicationRules
from mrs.replication.stream import Bridge
from mrs.replication.wire import (
    HELLO_BYTES_MAX,
    PONG,
    CannotStore,
    FrameReader,
    LinkBroken,
    LinkClosed,
    frame,
)
from mrs.security.tls_network import transport_socket
from mrs.transport.handshake_slots import HandshakeSlots
from mrs.transport.network import TCP, Network, TcpNetwork

log = logging.getLogger("mrs.replication")
_DISCARD_BYTES = 1 << 16
"""What a replica that cannot store reads at a time of what the active still sends."""

POSITION_KEY = "replication.position"
"""META: the (term, number) of the last record applied."""
TERM_KEY = "replication.term"
"""META: the highest term seen (a hello of a newer active raises it)."""
LED_KEY = "replication.led"
"""META: the last term this instance won. Its position as the active of that term is
(term, 0) and says nothing of what it committed since, so a new active never bridges
it from there (it sends a full copy)."""
COPY_PARTIAL_KEY = "replication.copy_partial"
"""META, while a full copy is being applied slice by slice: these journals hold part
of it (no candidate, and a hello asks for a full copy again)."""
COPY_UPTO_KEY = "replication.copy_upto"
"""META: the (term, number) the last full copy is whole at: its slices were read while
the active went on committing, so until the replica has replayed the records up to
there its journals mix two moments (mrs.replication.active `_full_copy`)."""
APPLIED_BOOTS_KEY = "replication.boots"
"""META: the group's `boots` as the last record applied that set it (an active's start)
left it. Why: a server started on these journals outside the group (`mrs serve`
without --instance on this data directory) raises `boots` and writes what no other
instance has (messages taken, confirmed, put); rejoined on its old position, such a
replica would take the next records on top of them, and promoted, lose what the
group acknowledged (`diverged`)."""
_REPLICATION_KEYS = frozenset(
    key.encode()
    for key in (
        POSITION_KEY,
        TERM_KEY,
        LED_KEY,
        COPY_UPTO_KEY,
        COPY_PARTIAL_KEY,
        APPLIED_BOOTS_KEY,
    )
)
"""This instance's own replication marks: never taken from the active's journals."""
_KEPT_WHILE_WIPING = frozenset(key.encode() for key in (POSITION_KEY, TERM_KEY, COPY_PARTIAL_KEY))
"""The marks a wipe for a full copy keeps: where this replica stands while it is empty."""
_TWO_U64 = struct.Struct(">QQ")
_U64 = struct.Struct(">Q")
_U64_MAX = (1 << 64) - 1
LMDB_KEY_BYTES_MAX = 511
"""The longest key LMDB stores (its default build): a longer one, or an empty one, is
refused by `mdb_put` as if the journals could take no writes at all."""


def _whole(value: Any, what: str) -> int:
    """`value` as a term or record number: a whole number a position holds (0 to
    2**64 - 1); ValueError otherwise. Why strict: `int()` of a float infinity raised
    OverflowError and a negative number failed to pack (struct.error), neither of them
    refused, so one such frame from a peer ended the replica's serve task, and the
    instance's process with a traceback (a copy's negative number after its wipe)."""
    if type(value) is not int or not 0 <= value <= _U64_MAX:
        raise ValueError(f"{what} {clipped(repr(value))} is not a whole number")
    return value


def _unwritable(batches: list[WriteBatch]) -> str | None:
    """Why a record's writes may not be applied here, or None. Why: a commit writes
    the group's journals, never this replica's own marks (`_REPLICATION_KEYS`: where it
    stands, the term it led, a copy's state); one that did (a peer that lies, or a bug)
    was applied, and a mark it set (`replication.led`, `copy_upto`, `copy_partial`,
    `boots`) made this replica no candidate after its next restart, though it had
    acknowledged every record. And a key LMDB cannot hold was taken for a failing disk
    ("cannot store", the Replication table's Link column), not for the record's fault."""
    for batch in batches:
        keys = [(journal, key) for journal, key, _ in batch.puts] + batch.deletes
        for journal, key in keys:
            if journal is Journal.META and key in _REPLICATION_KEYS:
                return f"it writes this replica's own mark {key.decode()!r}"
            if not 0 < len(key) <= LMDB_KEY_BYTES_MAX:
                return (
                    f"a key of {len(key)} bytes in journal {journal} "
                    f"(LMDB holds 1 to {LMDB_KEY_BYTES_MAX})"
                )
    return None


def read_position(store: JournalStore) -> tuple[tuple[int, int], int]:
    """((term, number), term seen) as the replica's journals hold them."""
    raw = store.meta_get(POSITION_KEY)
    position = _TWO_U64.unpack(raw) if raw else (0, 0)
    seen = store.meta_get(TERM_KEY)
    return (int(position[0]), int(position[1])), max(_U64.unpack(seen)[0] if seen else 0, 0)


def read_copy_upto(store: JournalStore) -> tuple[int, int]:
    """The record a full copy is whole at (`COPY_UPTO_KEY`), (0, 0) without one."""
    upto = store.meta_get(COPY_UPTO_KEY)
    return _TWO_U64.unpack(upto) if upto else (0, 0)


def behind_copy(position: tuple[int, int], copy_upto: tuple[int, int]) -> bool:
    """Whether journals that took a full copy have not yet replayed the records up to
    the one it is whole at: they mix two moments (the copy read while the active went
    on committing)."""
    return position[0] == copy_upto[0] and position[1] < copy_upto[1]


class RecentRecords:
    """The last commit records a replica applied, contiguous and ending at its
    position, within REPLICATION_BACKLOG_RECORDS_MAX and _BYTES_MAX (the same bounds
    as the active's backlog; the bytes counted are the values', which dominate)."""

    def __init__(self) -> None:
        self.records: deque[tuple[int, int, list[Any], int]] = deque()
        self.size_bytes = 0

    def add(self, term: int, number: int, batches: list[Any]) -> None:
        if self.records and self.records[-1][:2] != (term, number - 1):
            self.clear()
        size = sum(len(put[2]) for puts, _ in batches for put in puts) + 64
        self.records.append((term, number, batches, size))
        self.size_bytes += size
        while self.records and (
            len(self.records) > REPLICATION_BACKLOG_RECORDS_MAX
            or self.size_bytes > REPLICATION_BACKLOG_BYTES_MAX
        ):
            self.size_bytes -= self.records.popleft()[3]

    def clear(self) -> None:
        self.records.clear()
        self.size_bytes = 0


class Replica:
    """The replica side of one instance, over its own opened journal store."""

    def __init__(
        self,
        group_id: int,
        name: str,
        store: JournalStore,
        rules: ReplicationRules = KEPT_REPLICATION,
        coordinator_state: Callable[[], Awaitable[GroupState]] | None = None,
        hellos_max: int = Guards().handshakes_max,
    ) -> None:
        self.rules = rules
        self.hellos = HandshakeSlots(hellos_max, hellos_max)
        """Connections still before their hello, bounded: the oldest gives way."""
        self.coordinator_state = coordinator_state
        """How to read the coordinator (etcd): a hello that raises the term must come
        from the instance it names the leader of that term (None: not checked)."""
        self.group_id = group_id
        self.name = name
        self.store = store
        self.position, self.term_seen = read_position(store)
        self.copy_upto: tuple[int, int] = read_copy_upto(store)
        led = store.meta_get(LED_KEY)
        self.led = _U64.unpack(led)[0] if led else 0
        self.recent = RecentRecords()
        """The last records applied, in memory: promoted, this instance bridges the
        other replicas of the same term from their position to its own."""
        self.active: str | None = None
        self._link_scope: trio.CancelScope | None = None
        self.copy_partial = store.meta_get(COPY_PARTIAL_KEY) is not None
        self.diverged = self._written_outside_the_group()
        """These journals were written by a server outside the group since the last
        record applied: they are no candidate, and the hello asks for a full copy."""
        self._copying: tuple[int, int] | None = None
        """The full copy this link is applying (term, number); None between copies."""
        self.store_failure: str | None = None
        """Why the journals last refused the active's records, until they take some."""
        self.link_term: int | None = None
        """The term of the hello last accepted: every record on that link must carry
        it (`_term_refusal`)."""
        self.refusals = RefusalLog(
            log, REFUSAL_LOG_INTERVAL_S, lambda: trio.current_time(), line_format="{message}"
        )
        """What this replica refused (a hello, a record, a frame), one line per peer and
        reason at most every REFUSAL_LOG_INTERVAL_S: a refused active dials again every
        second."""

    def _written_outside_the_group(self) -> bool:
        """Whether `boots` differs from what the last record that set it left
        (`APPLIED_BOOTS_KEY`), in journals whose position is not of a term this
        instance led (as the active it starts the group itself). Logged once."""
        applied = self.store.meta_get(APPLIED_BOOTS_KEY)
        boots = self.store.meta_get(BOOTS_KEY.decode())
        if applied is None or boots == applied or self.led >= self.position[0]:
            return False
        log.error(
            "replica %s: its journals were served outside the group since record %s "
            "(started %d times, %d by the group's records: `mrs serve` without "
            "--instance on its data directory?); what was written there is dropped: it "
            "takes a full copy from the active and is no candidate until then",
            self.name,
            self.position,
            _U64.unpack(boots)[0] if boots is not None and len(boots) == 8 else 0,
            _U64.unpack(applied)[0] if len(applied) == 8 else 0,
        )
        return True

    @property
    def holds_journals(self) -> bool:
        """Whether these journals hold the group's data: records applied from an active
        (a position), or boots of their own as the active. An empty data directory has
        neither (a term seen in a hello is not enough: the copy may not have come);
        nor do journals that took a full copy and have not yet replayed the records up
        to the one it is whole at (`COPY_UPTO_KEY`)."""
        if self.copy_partial or self.diverged:
            return False
        if behind_copy(self.position, self.copy_upto):
            return False
        return self.position != (0, 0) or self.store.meta_get(BOOTS_KEY.decode()) is not None

    async def serve(
        self,
        host: str,
        port: int,
        network: Network = TCP,
        *,
        task_status=trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Take actives' links on host:port (of `network`: TCP, or the simulator's)."""
        await network.serve(self._handle, host, port, task_status=task_status)

    async def serve_listeners(
        self,
        host: str,
        listeners: list[trio.SocketListener],
        network: TcpNetwork = TCP,
        *,
        task_status=trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Take actives' links on listeners bound before (mrs.server.instance binds its
        replication address before it claims its data directory and opens its
        journals: a port taken fails the start with nothing written)."""
        await network.serve_listeners(self._handle, host, listeners, task_status=task_status)

    async def _handle(self, stream: trio.abc.Stream) -> None:
        async with stream:
            try:
                await self._link(stream)
            except CannotStore as failure:
                await self._cannot_store(stream, str(failure))
            except (LinkBroken, trio.BrokenResourceError, OSError):
                pass  # a link lost: the active dials again

    async def _cannot_store(self, stream: trio.abc.Stream, why: str) -> None:
        """The journals refused the active's records: say so once in this instance's
        log (again only if the reason changes), and to the active each time, which
        then dials again later (mrs.replication.active). The link stays open until the
        active closes it (REPLICATION_FAIL_LINGER_S at most), so the reason reaches it
        before its next send finds the link closed."""
        if why != self.store_failure:
            log.error(
                "replica %s cannot store the active's records: %s; it acknowledges "
                "nothing until its journals take writes again",
                self.name,
                why,
            )
            self.store_failure = why
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await stream.send_all(frame({"t": "fail", "why": why}))
            with trio.move_on_after(REPLICATION_FAIL_LINGER_S):
                while await stream.receive_some(_DISCARD_BYTES):
                    pass

    async def _read_hello(self, stream: trio.abc.Stream, reader: FrameReader) -> dict[str, Any]:
        """The hello, within LINK_HANDSHAKE_TIMEOUT_S, HELLO_BYTES_MAX and a slot of
        `hellos`; LinkBroken otherwise. Why: anyone who reaches the replication port
        is a stranger until its hello is checked, and strangers that announced a
        256 MiB hello and never finished it held memory and a socket each, without
        end and without a bound on their number (10 of them: 300 MB)."""
        try:
            host = str(transport_socket(stream).getpeername()[0])
        except (AttributeError, OSError):  # the simulator's streams have no address
            host = ""
        with trio.move_on_after(LINK_HANDSHAKE_TIMEOUT_S) as scope:
            slot = self.hellos.take(host, scope)
            try:
                return await reader.next(HELLO_BYTES_MAX)
            finally:
                self.hellos.give_back(slot)
        raise LinkBroken("no hello in time")

    async def _link(self, stream: trio.abc.Stream) -> None:
        reader = FrameReader(stream)
        hello = await self._read_hello(stream, reader)
        refusal = self.foreign_hello(hello)  # before etcd is asked (`foreign_hello`)
        refusal = refusal or await self.unconfirmed_term(hello) or self.check_hello(hello)
        if refusal is not None:
            self._refusing(str(hello.get("from")), refusal)
            await stream.send_all(frame({"t": "refuse", "why": refusal}))
            return
        if self._link_scope is not None:
            self._link_scope.cancel()  # the older active's link
        with trio.CancelScope() as scope:
            self._link_scope = scope
            self.active = str(hello.get("from"))
            self._copying = None  # a copy a lost link left half sent starts over
            hello_back = {
                "t": "hello",
                "name": self.name,
                "pos": (0, 0) if self.diverged else self.position,  # (0, 0): a full copy
                "led": self.led,
                "whole": self.holds_journals,
                "pings": True,  # answered with PONG (mrs.replication.wire)
            }
            await stream.send_all(frame(hello_back))
            try:
                await self._take_records(stream, reader)
            except (CannotStore, LinkClosed):
                raise
            except LinkBroken as broken:  # a frame too long, not msgpack, a bridge gap
                await self._refuse(stream, str(broken))

    async def _take_records(self, stream: trio.abc.Stream, reader: FrameReader) -> None:
        """Apply what the active sends and acknowledge it, until a record is refused
        (the refusal is logged, and sent to the active, which logs it too)."""
        held: dict[str, Any] | None = None  # read with a burst, not part of it
        while True:
            message = held if held is not None else await reader.next()
            held, broken = None, None
            if message["t"] == "commit":
                commits = [message]
                try:
                    while len(commits) < REPLICATION_APPLY_RECORDS_MAX and (
                        (more := reader.buffered()) is not None
                    ):
                        if more["t"] != "commit":
                            held = more
                            break
                        commits.append(more)
                except LinkBroken as error:  # the records before it are applied first
                    broken = error
                answers = self.receive_commits(commits)
            else:
                answers = [self.receive(message)]
            for answer in answers:
                if answer is not None and answer["t"] == "refuse":
                    await self._refuse(stream, str(answer["why"]))
                    return
                if answer is not None:
                    await stream.send_all(frame(answer))
            self.store.start_writeback()  # the pages, once the acknowledgement is out
            if broken is not None:
                raise broken

    def _refusing(self, peer: str, why: str) -> None:
        """Log a refusal of `peer` (a hello, a record, a frame) in one line, at most
        one per peer and reason every REFUSAL_LOG_INTERVAL_S (the count of those not
        shown follows)."""
        peer = clipped(peer)
        line = f"replica {self.name} refuses {peer}: {why}"
        self.refusals.refused("replication", peer, line, key=(peer, why))

    async def _refuse(self, stream: trio.abc.Stream, why: str) -> None:
        """Refuse what the active sent on this link, saying why here and to the active
        (within REPLICATION_FAIL_LINGER_S: one that does not read is not waited for),
        and end the link; nothing of what was refused is applied."""
        why = clipped(why)
        self._refusing(f"{self.active} (term {self.link_term})", why)
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            with trio.move_on_after(REPLICATION_FAIL_LINGER_S):
                await stream.send_all(frame({"t": "refuse", "why": why}))

    async def unconfirmed_term(self, hello: dict[str, Any]) -> str | None:
        """Why a hello that raises this replica's term may not, or None. Only the
        instance the coordinator names the leader of a term streams in it: a stranger
        who reaches the replication port without TLS could otherwise raise the term
        seen here, and the real active's records would be refused as older (the
        group fenced off by one hello). A term already seen is not asked about again."""
        term = hello.get("term", 0)
        if self.coordinator_state is None or type(term) is not int or term <= self.term_seen:
            return None
        try:
            state = await self.coordinator_state()
        except CoordinatorUnavailable as error:
            return f"cannot confirm term {term} with the coordinator: {error}"
        if (state.leader, state.term) != (hello.get("from"), term):
            return (
                f"term {term} from {hello.get('from')!r}: the coordinator names "
                f"{state.leader!r} the leader of term {state.term}"
            )
        return None

    def foreign_hello(self, hello: dict[str, Any]) -> str | None:
        """Why `hello` is no hello of an active of this group, or None. Asked before the
        coordinator is (`unconfirmed_term`). Why first: an instance started with another
        group id than its group's (one machine's bus file) refused the active's hello
        with `the coordinator names None the leader of term 0`, its own group's etcd
        record, which sent the operator to etcd instead of the group id; and a
        stranger's hello of another group made the replica ask etcd each time."""
        if hello.get("t") != "hello":
            return f"a frame {clipped(repr(hello.get('t')))} where a hello belongs"
        if hello.get("group") != self.group_id:
            group = clipped(repr(hello.get("group")))
            return (
                f"not an active of group {self.group_id} (its hello names group {group}: "
                "check the group id in each instance's bus file)"
            )
        return None

    def check_hello(self, hello: dict[str, Any]) -> str | None:
        """Why this active may not stream to us, or None (its term is then seen)."""
        if (foreign := self.foreign_hello(hello)) is not None:
            return foreign
        term = hello.get("term", 0)
        if type(term) is not int or term < 0:
            return f"a hello with term {term!r}, not a whole number"
        if self.rules.refuses_term(term, self.term_seen):
            return f"older term {term} (this replica has seen term {self.term_seen})"
        if term > self.term_seen:
            try:
                self.store.commit_now(
                    WriteBatch.empty().put_raw(Journal.META, TERM_KEY.encode(), _U64.pack(term))
                )
            except JournalError as error:
                raise CannotStore(str(error)) from None
            self.term_seen = term
        self.link_term = term
        return None

    def _term_refusal(self, term: int) -> dict[str, Any] | None:
        """Why a record of `term` is refused, or None: a term older than the one seen
        (the fencing token), or another term than its link's hello named. Why the
        second: a copy or a rebase sets this replica's position to its own term, so
        one of a term above the hello's (a peer that lies, or a bug) left journals
        whose position is of a term above every term seen, which no active ever
        granted: ahead of every instance in an election, and a term etcd never
        had, so the replica took etcd for having lost its data (a census)."""
        if self.rules.refuses_term(term, self.term_seen):
            return {"t": "refuse", "why": f"older term {term} (seen {self.term_seen})"}
        if self.link_term is not None and term != self.link_term:
            return {
                "t": "refuse",
                "why": f"a record of term {term} on a link of term {self.link_term}",
            }
        return None

    def receive(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Apply one message of the active; the answer to send (ack or refuse)."""
        if message["t"] == "ping":
            return PONG
        if message["t"] == "commit":
            return self.receive_commits([message])[-1]
        try:
            term, number = _whole(message.get("term", 0), "term"), _whole(message.get("n", 0), "n")
            if (refusal := self._term_refusal(term)) is not None:
                return refusal
            if message["t"] == "bridge":
                self._bridge(message, number)
                return None
            if message["t"] == "rebase":
                return self._rebase(message, term)
            if message["t"] == "copy":
                return self._copy_slice(message, term, number)
        except (ValueError, KeyError, TypeError) as error:
            return {"t": "refuse", "why": f"malformed: {error}"}
        except JournalError as error:
            raise CannotStore(str(error)) from None
        return {"t": "refuse", "why": f"unknown message {message.get('t')!r}"}

    def receive_commits(self, messages: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        """Apply commit records that follow each other in one synced transaction and
        acknowledge the last (an acknowledgement covers every record before it); a
        record that does not follow, of an older term or malformed ends the run: what
        came before it is applied and acknowledged, then it is refused."""
        batches: list[WriteBatch] = []
        position = self.position
        refusal: dict[str, Any] | None = None
        applied: list[dict[str, Any]] = []
        for message in messages:
            try:
                term = _whole(message.get("term", 0), "term")
                number = _whole(message.get("n", 0), "n")
                if (refusal := self._term_refusal(term)) is not None:
                    pass
                elif position != (term, number - 1):
                    refusal = {"t": "refuse", "why": f"gap: at {position}, got {number}"}
                else:
                    decoded = decode_batches(message["batches"])
                    if (why := _unwritable(decoded)) is not None:
                        refusal = {"t": "refuse", "why": f"record {number}: {why}"}
                    else:
                        batches.extend(decoded)
            except (ValueError, KeyError, TypeError) as error:
                refusal = {"t": "refuse", "why": f"malformed: {error}"}
            if refusal is not None:
                break
            position = (term, number)
            applied.append(message)
        answers: list[dict[str, Any] | None] = []
        if position != self.position:
            try:
                self._apply(batches, position)
            except JournalError as error:
                raise CannotStore(str(error)) from None
            for message in applied:
                self.recent.add(message["term"], message["n"], message["batches"])
            answers.append({"t": "ack", "n": position[1]})
        return [*answers, refusal] if refusal is not None else answers

    def _bridge(self, message: dict[str, Any], number: int) -> None:
        """Record `number` of the term before the new active's, which it applied as a
        replica of that term: this replica, behind it in the same term, applies it as
        it would have then (mrs.replication.stream `Bridge`); no acknowledgement until
        the rebase that ends the bridge."""
        old_term, base_number = (_whole(x, "base") for x in message["base"])
        if self.position != (old_term, number - 1) or number > base_number:
            raise LinkBroken(f"bridge record {number} does not follow {self.position}")
        batches = decode_batches(message["batches"])
        if (why := _unwritable(batches)) is not None:
            raise LinkBroken(f"bridge record {number}: {why}")
        self._apply(batches, (old_term, number))
        self.recent.clear()

    def _rebase(self, message: dict[str, Any], term: int) -> dict[str, Any]:
        """At the new active's base (the position it was promoted from), this replica
        holds what the new active started its term from: it is at (term, 0)."""
        base = tuple(_whole(x, "base") for x in message["base"])
        if self.position != base:
            return {"t": "refuse", "why": f"gap: at {self.position}, the base is {base}"}
        self._apply([], (term, 0))
        return {"t": "ack", "n": 0}

    def bridge(self) -> Bridge:
        """What this instance, promoted now, can bridge the other replicas with: its
        position (as a replica: not a term it led) and the records before it."""
        if self.position[0] == self.led or not self.holds_journals:
            return Bridge((0, 0), [])
        term, number = self.position
        records = [(n, batches) for t, n, batches, _ in self.recent.records if t == term]
        if records and records[-1][0] != number:
            records = []
        return Bridge(self.position, records)

    def _copy_slice(self, message: dict[str, Any], term: int, number: int) -> dict[str, Any] | None:
        """Apply one slice of a full copy as it comes, so a replica holds one slice in
        memory, not the journals: before the first slice the journals are wiped and
        marked partial (`_wipe`), each slice is applied at position (0, 0) (a link
        lost halfway: the next hello asks for a full copy again, and these journals
        are no candidate), and
        the last one ends the mark and sets the position and the record up to which
        the replica must replay before its journals are whole again (`upto`)."""
        puts = [
            (Journal(j), as_bytes(k), as_bytes(v))
            for j, k, v in message["items"]
            if j != Journal.META or k not in _REPLICATION_KEYS
        ]
        batches = [WriteBatch(puts, [])]
        if (why := _unwritable(batches)) is not None:
            raise ValueError(why)  # before any wipe: refused whole
        upto = (term, max(number, _whole(message.get("upto", number), "upto")))
        if self._copying != (term, number):
            self._wipe()  # sets the partial mark, which stays until the last slice
        self._copying = (term, number)
        if not message.get("last"):
            self._apply(batches, (0, 0))
            return None
        whole_at = WriteBatch.empty().put_raw(
            Journal.META, COPY_UPTO_KEY.encode(), _TWO_U64.pack(*upto)
        )
        whole_at.delete(Journal.META, COPY_PARTIAL_KEY.encode())
        self._apply([*batches, whole_at], (term, number))
        self._copying, self.copy_partial, self.copy_upto, self.led = None, False, upto, 0
        self.diverged = False
        self.recent.clear()
        log.info("replica %s took a full copy at %s", self.name, (term, number))
        return {"t": "ack", "n": number}

    def _wipe(self) -> None:
        """Empty these journals for a full copy, a bounded slice of keys a transaction
        (the copy's slice bounds), so a replica never holds a list of every key it has
        (memory in proportion to its journals). The partial mark and position (0, 0) go
        first, in a transaction of their own: a crash halfway leaves journals that
        say they are partial (no candidate; the next hello asks for a full copy
        again). The marks of where it stands (position, term seen, partial) stay;
        every other key goes, `led` and `copy_upto` with them."""
        self.copy_partial = True
        self.recent.clear()
        mark = WriteBatch.empty().put_raw(Journal.META, COPY_PARTIAL_KEY.encode(), b"1")
        self._apply([mark], (0, 0))
        for journal in Journal:
            after: bytes | None = None
            while pairs := self.store.items_after(
                journal, b"", after, REPLICATION_COPY_SLICE_ITEMS_MAX, REPLICATION_COPY_SLICE_BYTES
            ):
                after = pairs[-1][0]
                deletes = [
                    (journal, key)
                    for key, _ in pairs
                    if journal is not Journal.META or key not in _KEPT_WHILE_WIPING
                ]
                if deletes:
                    self.store.apply([WriteBatch([], deletes)])

    def _apply(self, batches: list[WriteBatch], position: tuple[int, int]) -> None:
        """The records and the new position, durable together."""
        mark = WriteBatch.empty().put_raw(
            Journal.META, POSITION_KEY.encode(), _TWO_U64.pack(*position)
        )
        mark.put_raw(Journal.META, TERM_KEY.encode(), _U64.pack(self.term_seen))
        boots = _boots_set(batches)
        if boots is not None:
            mark.put_raw(Journal.META, APPLIED_BOOTS_KEY.encode(), boots)
        self.store.apply([*batches, mark])
        self.position = position
        if self.store_failure is not None:
            log.info("replica %s stores the active's records again", self.name)
            self.store_failure = None

    def record_term(self, term: int) -> None:
        """This instance won `term`: its journals say so (position (term, 0): it holds
        that term's history from its start), so after stepping down it may campaign
        again without taking a copy first; the next active sends it one anyway."""
        self.term_seen = max(self.term_seen, term)
        self.led = term
        self._apply(
            [WriteBatch.empty().put_raw(Journal.META, LED_KEY.encode(), _U64.pack(term))], (term, 0)
        )

    @property
    def candidate_position(self) -> tuple[int, int]:
        """The position posted for an election: (0, 0) when these journals do not hold
        the group (a copy not whole yet), so no other replica waits on a false claim."""
        return self.position if self.holds_journals else (0, 0)

    @property
    def comparable_position(self) -> tuple[int, int]:
        """The position at which another replica holds exactly what this one holds:
        (0, 0) when there is none, for journals not whole, or for a term this instance
        led (its position stays (term, 0) while its own commits of that term follow)."""
        if self.position[0] == self.led:
            return (0, 0)
        return self.candidate_position

    def close_term(self, term: int) -> None:
        """The active of `term` is gone: take none of its records any more, so the
        position this replica posts for the election is its last (a record applied
        after posting could carry an answer the candidates did not see)."""
        if self.term_seen <= term:
            self.term_seen = term + 1
            self.store.commit_now(
                WriteBatch.empty().put_raw(Journal.META, TERM_KEY.encode(), _U64.pack(term + 1))
            )
        self.stop_link()

    def stop_link(self) -> None:
        if self._link_scope is not None:
            self._link_scope.cancel()


def _boots_set(batches: list[WriteBatch]) -> bytes | None:
    """The `boots` value `batches` set (an active's start), or None."""
    boots = None
    for batch in batches:
        for journal, key, value in batch.puts:
            if key == BOOTS_KEY and journal is Journal.META:
                boots = value
    return boots
