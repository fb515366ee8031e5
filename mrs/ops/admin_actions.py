"""The operator's actions on a running group: browse, purge, move, connections.

Why here, beside the other operator's views: an action is asked over the client
protocol (an AdminRequest from `mrs admin`, the web view or a client's `admin()`),
checked against the asker's rights under [auth] (mrs.security.permissions'
manage grant per queue, the status right for connections), done on the group's
queues and journals, and written down with who asked for it: one log line per
action, and one JSON line in the group's admin journal (`admin-journal.jsonl` in its
data directory, read back with `mrs admin journal`) per action that changes the
group and per refusal; a look that was done (browse, connections, the journal
itself) is logged only, at most once per REFUSAL_LOG_INTERVAL_S per principal, action
and queue with the count of those not shown (`AdminActions.looked`).

What each action promises:
- browse looks without taking: the memory window, then the cold backlog read from
  the DQF; nothing is marked or delivered. A page ends where the next starts
  (`next_after`, the seq of the last message looked at; `after` asks for it).
- purge takes what waits (not what a consumer holds unconfirmed): journaled messages
  go to the DLJ with the reason and who purged them, in one transaction with their
  DQF delete, unless `discard`; memory messages are discarded and counted.
- move takes what waits on the source and stores it on a target queue of this
  group, in order, each message in one transaction that deletes it from the source
  and stores it (with a new seq) on the target: a crash of either side at any point
  leaves each message on exactly one of the two queues, so running the move again
  finishes it. At most ADMIN_MOVE_MESSAGES_MAX per request; the command repeats.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from journals import (
    CorruptRecord,
    Journal,
    JournalError,
    JournalFullError,
    WriteBatch,
    queue_key,
    seq_key,
)
from mrs import protocol as wire
from mrs.config.rewrite import edit_lock, with_new_queue, with_queue_values
from mrs.core.delivery import Refused
from mrs.core.refusals import RefusalLog
from mrs.group.context import U32, UNPACK_U32
from mrs.group.dqf import forget_priority, keep_priority
from mrs.group.lanes import Lane
from mrs.group.queues import TargetQueue
from mrs.group.reply import report_waiting_sender
from mrs.group.shapes import (
    DEAD_LETTER_HEADER,
    Entry,
    encode_entry,
    moved_copy,
    record_from_entry,
)
from mrs.limits import (
    ADMIN_BROWSE_DEFAULT,
    ADMIN_BROWSE_MESSAGES_MAX,
    ADMIN_MOVE_MESSAGES_MAX,
    ADMIN_PREVIEW_BYTES_MAX,
    ADMIN_REPLY_BYTES_MAX,
    ADMIN_SELECT_SCAN_MAX,
)
from mrs.model import DEAD_LETTER_QUEUE, Address, Psb, Status
from mrs.ops.admin_log import AdminLog, StagedLine
from mrs.ops.admin_terms import GIVE_A_RIGHT
from mrs.ops.bus_file_record import (
    BUS_FILE_KEY,
    CREDENTIALS_FILE_KEY,
    BusFileRecord,
    next_record,
)
from mrs.security import permissions as rules
from mrs.security.permissions import GRANT_KINDS

if TYPE_CHECKING:
    from mrs.config.bus import BusConfig, GroupConfig
    from mrs.group import Group
    from mrs.security.authority import Authority
    from mrs.security.gate import Gate

log = logging.getLogger("mrs.admin")

JOURNAL_FILE_NAME = "admin-journal.jsonl"
"""The admin journal in the group's data directory: one JSON object per line."""
PURGED_HEADER = "purged"
"""Header a purged message's DLJ record carries: who purged it and why."""
SELECT_KEYS = ("class", "type", "correlation_id", "contains")
"""What a browse may select on."""
MOVED_HEADER = "moved"
"""Header a moved message carries: where it came from, its old seq, who moved it."""


class AdminSession(Protocol):
    """What an action reads of the asking connection (mrs.server.session)."""

    principal: str | None
    peer: str

    def send(self, event: object) -> None: ...


class AdminServer(Protocol):
    """What the actions read of the server that owns them (GroupServer)."""

    @property
    def config(self) -> GroupConfig: ...
    @property
    def group(self) -> Group | None: ...
    @property
    def authority(self) -> Authority | None: ...
    @property
    def sessions(self) -> Iterable[Any]: ...
    @property
    def bus(self) -> BusConfig: ...
    @property
    def gate(self) -> Gate | None: ...
    def start_pcj_archive(self, until_ns: int, closed_only: bool) -> str: ...
    def reset_link(self, peer_id: int, force: bool = False) -> dict: ...


class AdminActions:
    """Answers AdminRequests for one group's server (`Dispatcher.admin`)."""

    def __init__(self, server: AdminServer) -> None:
        self.server = server
        self.journal_path = Path(server.config.data_dir) / JOURNAL_FILE_NAME
        self.log = AdminLog.of(self.journal_path, self._store)
        self._refusal_journaled = False
        """The request under way was refused and journaled by `check` (its right)."""
        self._files: dict[bytes, BusFileRecord | None] = {}
        """Each run-time-changed file's last change journaled, by its META key (read
        at the first change): the bus file, the credentials file."""
        self.looks = RefusalLog(log, level=logging.INFO, line_format="{message}")
        """The log lines of looks done (`looked`): one per (principal, action, queue)
        per REFUSAL_LOG_INTERVAL_S, with the count of those not shown."""

    def __call__(self, session: AdminSession, request: wire.AdminRequest) -> None:
        """One request: checked, done, journaled; a mistake raises Refused (one line)."""
        self._refusal_journaled = False
        try:
            handler = _HANDLERS.get(request.action)
            if handler is None:
                known = ", ".join(sorted(_HANDLERS))
                raise Refused(
                    Status.BADPARAM, f"unknown admin action {request.action!r} (known: {known})"
                )
            _check_arg_names(request.action, request.args)
            handler(self, session, request)
        except Refused as refused:
            if not self._refusal_journaled:  # every refusal is written down, not only rights
                self.journal_refusal(session, str(request.action)[:64], request.args, refused)
            raise

    def journal_refusal(
        self, session: AdminSession, action: str, args: Any, refused: Refused
    ) -> None:
        """A refused action in the admin journal: what was asked and why it was not done."""
        status = getattr(refused.status, "name", str(refused.status))
        asked = _plain(args) if isinstance(args, dict) else {"args": repr(args)[:200]}
        self.refusal_line(session, action, asked, {"refused": refused.message, "status": status})

    def refusal_line(self, session: AdminSession, action: str, args: dict, result: dict) -> None:
        """A refusal's journal line, or only its count when its principal has had their
        share of lines for now (mrs.ops.admin_log.RefusalLines)."""
        if self.log.refusals.admit(session.principal, action):
            self.journal(session, action, args, result)

    # -- the parts every action shares -------------------------------------------------

    @property
    def group(self) -> Group:
        group = self.server.group
        if group is None:
            raise Refused(Status.NOTACTIVE, "the group is starting")
        return group

    def queue(
        self,
        text: Any,
        what: str,
        elsewhere: str = "ask its own group's server",
        *,
        session: AdminSession | None = None,
    ) -> TargetQueue:
        """This group's queue named by `text`, or Refused NOSUCHQUEUE (one line;
        `elsewhere`: what to do about a queue of another group). Given the `session`
        (under [auth]), NOTAUTHORIZED first to a principal that may manage no queue
        (`_unmanaged_text`)."""
        if not isinstance(text, str) or not text:
            raise Refused(Status.BADPARAM, f"{what}: give a queue (G.Q or a name)")
        if session is not None:
            self._unmanaged_text(session, what.partition(" ")[0], text)
        return self._queue(text, what, elsewhere)

    def _unmanaged_text(self, session: AdminSession, action: str, text: str) -> None:
        """Refuse NOTAUTHORIZED, naming the queue as typed, when the principal may
        manage no queue at all, before the name is looked up. Why: NOSUCHQUEUE for a
        name the group lacks, and a refusal naming the address of one it has, told a
        principal without the right which queue names exist. One with a manage grant
        is still told NOSUCHQUEUE: a grant names addresses ("1.1*"), and an unknown name
        has none to match it against."""
        authority = self.server.authority
        if authority is None:
            return
        perms = authority.permissions(session.principal)
        if perms.manage:
            return
        shown = text[:80] if text.isprintable() else repr(text)[:80]  # one line whatever
        problem = rules.may_manage(perms, action, shown, None)
        if problem is not None:  # no manage grant matches anything
            self._refuse(session, action, {"queue": text}, problem)

    def _queue(self, text: str, what: str, elsewhere: str) -> TargetQueue:
        group = self.group
        try:
            address = group.ctx.resolve(text)
        except Refused as refused:
            raise Refused(Status.NOSUCHQUEUE, f"{what}: no queue {text!r}") from refused
        queue = group.queues.get(address.queue)
        if address.group == group.config.id and queue is None:
            kept = group.recovery.unconfigured_counts().get(str(address))
            hint = (
                f" (the DQF keeps {kept} messages for it: `add_queue id={address.queue}` "
                "brings them back to browse, move or purge)"
                if kept
                else ""
            )
            raise Refused(
                Status.NOSUCHQUEUE, f"{what}: no queue {address} in group {address.group}{hint}"
            )
        if address.group != group.config.id or queue is None:
            raise Refused(
                Status.NOSUCHQUEUE,
                f"{what}: {text} is not a queue of group {group.config.id} ({elsewhere})",
            )
        return queue

    def check(self, session: AdminSession, action: str, queue: TargetQueue | None) -> None:
        """Under [auth]: the manage right on `queue`, or the status right (None)."""
        authority = self.server.authority
        if authority is None:
            return
        perms = authority.permissions(session.principal)
        if queue is None:  # the action named, not the right twice ("status needs 'status'")
            problem = rules.may_admin(perms, "status", action)
        else:
            names = rules.spellings(self.group.ctx.bus, self.group.config.id, queue.address)
            problem = rules.may_manage(perms, action, str(queue.address), names)
        if problem is not None:
            self._refuse(session, action, {"queue": _name(queue)}, problem)

    def _refuse(self, session: AdminSession, action: str, args: dict, problem: str) -> NoReturn:
        """Refuse an action the principal has no right to: one log line (at most one
        per interval, `refusal_line`), journaled with the session's refusals, then
        NOTAUTHORIZED naming who asked and why."""
        self.refusal_line(session, action, args, {"refused": problem})
        self._refusal_journaled = True
        who = session.principal or "(unauthenticated)"
        raise Refused(Status.NOTAUTHORIZED, f"{who}: {problem}")

    def check_right(self, session: AdminSession, action: str, right: str) -> None:
        """Under [auth]: the admin right `right` (e.g. config for add-queue). The
        refusal names the action as `mrs admin` takes it: "add-queue: config needs the
        admin right 'config'" named the right where the action belonged."""
        authority = self.server.authority
        if authority is None:
            return
        problem = rules.may_admin(authority.permissions(session.principal), right, action)
        if problem is not None:
            self._refuse(session, action, {}, problem)

    def rewrite(self, change: Callable[[str], str]) -> tuple[BusConfig, WriteBatch]:
        """Apply `change` to the bus file's text, check the result with the parser,
        write it atomically; the new config and the commit that journals the new text
        (mrs.ops.bus_file_record: the next active of a replicated group takes it), or
        Refused BADPARAM (one line)."""
        from mrs.config.bus import ConfigError, parse_config
        from mrs.config.rewrite import write_atomically

        path = Path(self.server.bus.path)
        try:
            with edit_lock(path):  # the other groups of the bus edit the same file
                try:
                    before = path.read_text(encoding="utf-8")
                    text = change(before)
                    new_bus = parse_config(text, path)
                except (LookupError, OSError) as error:
                    raise Refused(Status.BADPARAM, f"config {path}: {error}") from None
                except (ConfigError, ValueError) as error:  # ValueError: TOML's own, a surrogate
                    raise Refused(Status.BADPARAM, f"refused: {error}") from None
                try:
                    write_atomically(path, text)
                except OSError as error:
                    raise Refused(
                        Status.SERVER_ERROR, f"config {path} not written: {error}"
                    ) from None
        except OSError as error:  # the lock itself (the rest is Refused above)
            raise Refused(Status.SERVER_ERROR, f"config {path} not locked: {error}") from None
        return new_bus, self.file_changed(BUS_FILE_KEY, before, text)

    def file_changed(self, key: bytes, before: str, after: str) -> WriteBatch:
        """The commit that journals a run-time change of the file kept under `key`
        (mrs.ops.bus_file_record: the next active of a replicated group takes it)."""
        if key not in self._files:
            self._files[key] = BusFileRecord.of(self.group.ctx.store.get_raw(Journal.META, key))
        record = next_record(self._files[key], before, after)
        self._files[key] = record
        return record.batch(key)

    def answer_journaled(
        self, session: AdminSession, request: wire.AdminRequest, batch: WriteBatch, result: dict
    ) -> None:
        """Answer a change of the bus file (or the credentials file) once its text is
        journaled (on a majority of a replicated group's instances, as every commit it
        answers)."""
        unjournaled = (
            f"{request.action}: the file is written but its change not journaled (an "
            "instance that becomes active next uses its own copy)"
        )
        journaled = _answer_when_durable(
            result, lambda: session.send(wire.AdminReply(request.request_id, result)), unjournaled
        )
        self.group.ctx.writer.submit(batch, journaled)

    def journal(
        self,
        session: AdminSession,
        action: str,
        args: dict,
        result: dict,
        then: Callable[[JournalError | None], None] | None = None,
        staged: StagedLine | None = None,
    ) -> None:
        """Write down who did what (one JSON line, synced) and log it; `then` is told
        once the line's commit is durable (mrs.ops.admin_log). `staged`: the line the
        action's own commits carried (`stage`), settled with `result` as its outcome."""
        who = session.principal or "(no auth)"
        if staged is not None:
            staged.line["result"] = result
            self.log.settle(staged, then)
        else:
            self.log.write(_line(session, action, args, result), then)
        log.info("admin %s by %s at %s: %s -> %s", action, who, session.peer, args, result)

    def stage(
        self, session: AdminSession, action: str, args: dict, result: dict
    ) -> StagedLine | None:
        """The journal line of an action whose change is committed later: each of its
        commits carries it (`StagedLine.put_in`), and `journal(..., staged=)` settles it
        with the outcome. `result`: what the line says until then, which is what it
        says after a crash before the outcome (mrs.ops.admin_log says why)."""
        return self.log.stage(_line(session, action, args, result))

    def looked(self, session: AdminSession, action: str, args: dict, result: dict) -> None:
        """A read-only action done (browse, connections, journal): its log line, not a
        journal line. Why: the admin journal is the trail of who changed what, kept
        synced and, in the group's journals, its last ADMIN_LOG_RECORDS_MAX lines;
        each look appended and fsynced a line too, so a script watching `mrs admin
        connections` every few seconds cost a synced write each time, grew the file
        for ever and pushed the last purge out of what `mrs admin journal` shows.
        A look refused (no right, a mistake) is still journaled: an attempt past
        one's rights is what an auditor looks for. The log line itself is throttled
        (`looks`): a script polling `mrs admin browse` in a loop wrote one line per
        request into the server's log for ever; a change's line (`journal`) is not."""
        who = session.principal or "(no auth)"
        line = f"admin {action} by {who} at {session.peer}: {args} -> {result}"
        self.looks.refused(action, who, line, key=(session.principal, action, args.get("queue")))

    def journal_then_answer(
        self,
        session: AdminSession,
        action: str,
        args: dict,
        result: dict,
        answer: Callable[[], None],
        staged: StagedLine | None = None,
    ) -> None:
        """Journal a done action, then `answer()` once its line is as durable as the
        action's own commits. Why: answered first, a SIGKILL of a replicated group's
        active right after the answer left the next active with the action done and no
        line saying who did it. A line that could not be journaled is logged and the
        answer says so (`journaled: false`): the action itself is done. `staged`: the
        line its commits carried (`stage`), now given its outcome."""

        unjournaled = f"admin {action}: done, but its journal line is not journaled"
        durable = _answer_when_durable(result, answer, unjournaled)
        self.journal(session, action, args, result, then=durable, staged=staged)

    def read_journal(self, limit: int) -> list[dict]:
        """The last `limit` lines of the admin journal, oldest first."""
        return self.log.read(limit)

    def _store(self) -> tuple[Any, Any] | None:
        group = self.server.group
        return None if group is None else (group.ctx.store, group.ctx.writer)


def _line(session: AdminSession, action: str, args: dict, result: dict) -> dict:
    """One admin journal line: when, who, from where, what was asked, what came of it."""
    return {
        "time_ns": time.time_ns(),
        "principal": session.principal,
        "peer": session.peer,
        "action": action,
        "args": args,
        "result": result,
    }


def _answer_when_durable(
    result: dict, answer: Callable[[], None], unjournaled: str
) -> Callable[[JournalError | None], None]:
    """The commit callback of a done action: `answer()` once its commit is durable. A
    commit that failed is logged (`unjournaled`: what is done and what is not) and the
    answer says `journaled: false`; the action itself is done, so it is not refused."""

    def durable(error: JournalError | None) -> None:
        if error is not None:
            log.error("%s: %s", unjournaled, error)
            result["journaled"] = False
        answer()

    return durable


# -- browse -----------------------------------------------------------------------------


def _browse(actions: AdminActions, session: AdminSession, request: wire.AdminRequest) -> None:
    args = request.args
    queue = actions.queue(args.get("queue"), "browse", session=session)
    actions.check(session, "browse", queue)
    limit = _count(args.get("limit", ADMIN_BROWSE_DEFAULT), "limit", ADMIN_BROWSE_MESSAGES_MAX)
    wanted = _selection(args.get("select") or {})
    after = _cursor(args.get("after"))
    group = actions.group
    now_ns = group.ctx.clock_ns()
    shown: list[dict] = []
    truncated = False
    reply_bytes = 0
    scan_max = ADMIN_SELECT_SCAN_MAX if wanted is not None else limit
    places, found = _places_after(queue, after)
    next_after: int | None = None  # the next page's start: the last one looked at
    last_seq: int | None = None
    for scanned, (seq, held) in enumerate(places):
        if scanned >= scan_max or len(shown) >= limit:
            next_after = last_seq  # more wait behind what was looked at
            break
        entry = held if held is not None else _read_cold(group, queue, seq)
        if entry is not None and (wanted is None or wanted(group, queue, entry)):
            described = _described(group, queue, entry, now_ns)
            reply_bytes += len(json.dumps(described))
            if shown and reply_bytes > ADMIN_REPLY_BYTES_MAX:
                truncated = True  # a reply past the frame closed the asker's connection
                next_after = last_seq  # the next page starts with this one
                break
            shown.append(described)
        last_seq = seq
    result = {
        "queue": str(queue.address),
        "name": queue.config.name,
        "waiting": queue.waiting,
        "unconfirmed": len(queue.unconfirmed),
        "messages": shown,
        "truncated": truncated,
        "next_after": next_after,
    }
    if after is not None and not found:
        result["after_gone"] = True
    asked = {"queue": str(queue.address), "limit": limit, "select": args.get("select")}
    actions.looked(session, "browse", {**asked, "after": after}, {"shown": len(shown)})
    session.send(wire.AdminReply(request.request_id, result))


def _cursor(value: Any) -> int | None:
    """A browse's `after`: the seq of the last message a page showed (an int, or its
    decimal digits: a web page's script cannot hold a seq past 2**53 as a number)."""
    if value is None:
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
        raise Refused(
            Status.BADPARAM, f"browse: after must be a message's seq, got {value!r}"[:200]
        )
    return value


def _places(queue: TargetQueue) -> Iterator[tuple[int, Entry | None]]:
    """Every waiting message's (seq, entry in memory or None: cold, on disk only) in
    delivery order, without taking or reading any: each priority lane from the
    highest, its memory window, then its cold backlog (mrs.group.lanes)."""
    for lane in queue.pending.lanes():
        yield from _lane_places(lane)


def _places_after(
    queue: TargetQueue, after: int | None
) -> tuple[Iterator[tuple[int, Entry | None]], bool]:
    """The places from just after the message `after` (a browse's next page), and
    whether it still waits. Why a seq and not a count: messages that arrive or leave
    between two pages move every count, and a page by count showed some twice and
    skipped others; a message's place in its lane does not move. When `after` has
    left meanwhile (a get took it, and with it what waited before it), the page
    starts at the first waiting message again: rows may repeat, none is skipped.
    Found lane by lane, in its window, else by a seek in its cold backlog
    (`ColdBacklog.after`): a walk of every place before it cost each page time in
    proportion to the queue's depth, on the event loop."""
    if after is None:
        return _places(queue), True
    lanes = queue.pending.lanes()
    for number, lane in enumerate(lanes):
        at = next((i for i, entry in enumerate(lane.window) if entry.seq == after), None)
        rest = (
            lane.cold.after(after)
            if at is None
            else itertools.islice(_lane_places(lane), at + 1, None)
        )
        if rest is not None:
            later = (place for other in lanes[number + 1 :] for place in _lane_places(other))
            return itertools.chain(rest, later), True
    return _places(queue), False


def _lane_places(lane: Lane[Entry]) -> Iterator[tuple[int, Entry | None]]:
    """One lane's waiting messages, as `_places` gives them."""
    for entry in lane.window:
        yield entry.seq, entry
    for seq in lane.cold:
        yield seq, lane.cold.held_entry(seq)


Selection = Callable[["Group", TargetQueue, Entry], bool]


def _selection(select: Any) -> Selection | None:
    """A browse's `select` ({"class": N, "type": N, "correlation_id": hex,
    "contains": text}) as a test of one message; None when it selects everything."""
    if not isinstance(select, dict):
        raise Refused(Status.BADPARAM, "select must be a table of class, type, ...")
    unknown = set(select) - set(SELECT_KEYS)
    if unknown:
        raise Refused(
            Status.BADPARAM, f"select: unknown {sorted(unknown)} (known: {', '.join(SELECT_KEYS)})"
        )
    if not select:
        return None
    msg_class, msg_type = select.get("class"), select.get("type")
    for key, value in (("class", msg_class), ("type", msg_type)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise Refused(Status.BADPARAM, f"select: {key} must be a whole number")
    try:
        correlation = (
            bytes.fromhex(select["correlation_id"]) if "correlation_id" in select else None
        )
    except (TypeError, ValueError):
        raise Refused(Status.BADPARAM, "select: correlation_id must be hex") from None
    contains = str(select["contains"]).encode() if "contains" in select else None

    def wanted(group: Group, queue: TargetQueue, entry: Entry) -> bool:
        if msg_class is not None and entry.msg_class != msg_class:
            return False
        if msg_type is not None and entry.msg_type != msg_type:
            return False
        if correlation is not None and entry.correlation_id != correlation:
            return False
        if contains is not None:
            body = entry.body if entry.body is not None else _body_of(group, queue, entry)
            return contains in body
        return True

    return wanted


def _body_of(group: Group, queue: TargetQueue, entry: Entry) -> bytes:
    """The body of a waiting message kept on disk only, as browse and its `contains`
    read it; empty (and one line naming it) if its record cannot be read. Why: one
    record that did not decode failed the whole browse with a server error, and the
    operator saw none of the queue's messages (bodies of messages given back by a
    reader that left are on disk only: mrs.group.handover `_bodies_sent`)."""
    try:
        record = group.store.get(Journal.DQF, queue_key(queue.address.queue, entry.seq))
    except (JournalError, CorruptRecord) as error:
        log.warning("browse: DQF message %d of %s unreadable: %s", entry.seq, queue.address, error)
        return b""
    return record.body if record is not None else b""


def _read_cold(group: Group, queue: TargetQueue, seq: int) -> Entry | None:
    """A cold message as browse shows it, read from the DQF (record and delivery mark)
    without taking it; None if it vanished or cannot be read."""
    from mrs.group.shapes import entry_from_record

    key = queue_key(queue.address.queue, seq)
    try:
        record = group.store.get(Journal.DQF, key)
    except (JournalError, CorruptRecord) as error:
        log.warning("browse: DQF message %d of %s unreadable: %s", seq, queue.address, error)
        return None
    if record is None:
        return None
    entry = entry_from_record(record)
    (mark,) = group.store.get_raw_many(Journal.MARKS, [key])
    entry.times_delivered = UNPACK_U32(mark)[0] if mark is not None else 0
    return entry


def _described(group: Group, queue: TargetQueue, entry: Entry, now_ns: int) -> dict:
    """One message as browse shows it: plain data (JSON-able)."""
    body = entry.body
    if body is None and entry.journaled:
        body = _body_of(group, queue, entry)
    body = body or b""
    return {
        "seq": entry.seq,
        "size": len(body),
        "preview": _preview(
            body[:ADMIN_PREVIEW_BYTES_MAX], cut=len(body) > ADMIN_PREVIEW_BYTES_MAX
        ),
        "source": str(entry.source),
        "class": entry.msg_class,
        "type": entry.msg_type,
        "priority": entry.priority,
        "delivery": entry.delivery.name,
        "journaled": entry.journaled,
        "deliveries": entry.times_delivered,
        "possdupl": entry.times_delivered > 0,
        "age_s": round(max(0, now_ns - entry.put_time_ns) / 1e9, 3),
        "correlation_id": entry.correlation_id.hex(),
        "headers": _plain(entry.headers or {}),
        # a dead letter's why and where it was going (MQDLH), or None: without it
        # the web page and `browse --json` showed a DLQ's letters with no reason
        "dead_letter_header": _plain(entry.dead_letter_header),
    }


def _preview(data: bytes, *, cut: bool = False) -> str:
    """Text when the bytes are printable UTF-8 (line breaks and tabs too), else hex
    (prefixed `0x`), as `mrs dump` reads a body. Why: a body `cut` at the preview's
    end mid-character (any Japanese text past 21 characters) and any body of more than
    one line (pretty-printed JSON) were shown as hex in the web page and `mrs admin
    browse`."""
    text = None
    for trim in range(4) if cut else range(1):  # a character the cut split is left out
        try:
            text = data[: len(data) - trim].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    if text is None or not text.replace("\n", "").replace("\t", "").isprintable():
        return "0x" + data.hex()
    return text


def _plain(value: Any) -> Any:
    """Headers as JSON-able data: bytes as hex, keys as strings."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


def _count(value: Any, what: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise Refused(Status.BADPARAM, f"{what} must be a whole number 1..{high}, got {value!r}")
    return value


def _name(queue: TargetQueue | None) -> str | None:
    return None if queue is None else str(queue.address)


# -- purge ------------------------------------------------------------------------------


def _purge(actions: AdminActions, session: AdminSession, request: wire.AdminRequest) -> None:
    args = request.args
    queue = actions.queue(args.get("queue"), "purge", session=session)
    actions.check(session, "purge", queue)
    discard = args.get("discard", False)
    if type(discard) is not bool:
        raise Refused(Status.BADPARAM, f"purge: discard must be true or false, got {discard!r}")
    reason = str(args.get("reason") or "purged by an operator")[:200]
    group = actions.group
    ctx = group.ctx
    taken = _take(queue, ADMIN_MOVE_MESSAGES_MAX)
    journaled = [entry for entry in taken if entry.journaled]
    memory = len(taken) - len(journaled)
    count_on_disk = partial(ctx.store.count, Journal.DLJ)
    if not discard and ctx.counts.dlj_full(
        ctx.limits.dlj_messages_max, count_on_disk, len(journaled)
    ):
        _put_back(queue, taken)  # the memory messages too: nothing is purged
        raise Refused(
            Status.DLJ_FAILED,
            f"purge: the DLJ would exceed dlj_messages_max={ctx.limits.dlj_messages_max} "
            "(purge with `discard=true`, or redrive the DLJ first)",
        )
    try:
        batch = _purge_batch(
            group, queue, journaled, None if discard else (session.principal, reason)
        )
    except Exception:
        _put_back(queue, taken)  # refused part way: every message stays where it was
        raise
    summary = {
        "queue": str(queue.address),
        "dead_lettered": 0 if discard else len(journaled),
        "discarded": len(journaled) if discard else 0,
        "memory_discarded": memory,
    }
    asked = {"queue": str(queue.address), "discard": discard, "reason": reason}
    # the line in the purge's own commit: never a purge on disk with nobody on record
    staged = actions.stage(session, "purge", asked, {**summary, "left": queue.waiting})
    if staged is not None and journaled:
        staged.put_in(batch)

    def written(error: JournalError | None) -> None:
        if error is not None:
            _put_back(queue, taken)
            actions.journal(session, "purge", asked, {"failed": str(error)}, staged=staged)
            message = _purge_failure(error, discard, len(journaled))
            session.send(wire.Failure(request.request_id, int(Status.JOURNAL_FAIL), message))
            return
        summary["senders_told"] = _tell_senders(taken, journaled, discard, group.dqf.copies_left)
        ctx.counts.dqf_removed(len(journaled))
        for _ in journaled:
            if not discard:
                ctx.counts.dlj_added()
            group.peers.dqf_freed()
        result = {**summary, "left": queue.waiting}
        actions.journal_then_answer(
            session,
            "purge",
            asked,
            result,
            lambda: session.send(wire.AdminReply(request.request_id, result)),
            staged,
        )

    if journaled:
        ctx.writer.submit(batch, written)
    else:
        written(None)


def _purge_failure(error: JournalError, discard: bool, count: int) -> str:
    """The line of a purge whose commit failed: nothing was purged, and what to do.
    Why: a purge to the DLJ on a full journal (its DLJ copies need room before the
    DQF records are freed) answered LMDB's own words, "journal map full: mdb_put:
    MDB_MAP_FULL: Environment mapsize limit reached (Please use a larger
    Environment(map_size=) parameter)", advice no operator can take, and did not say
    that the messages were all still on the queue or that a discard needs no copies."""
    if not isinstance(error, JournalFullError):
        return f"purge: {error}; nothing was purged"
    if discard:
        return (
            f"purge: the journal is full, even for deleting {count} messages: nothing "
            "was purged; see the journal's use with `mrs status` (docs/journals.md)"
        )
    return (
        f"purge: the journal is full: it has no room for the DLJ copies of {count} "
        "messages, so nothing was purged (all still wait on the queue); `discard=true` "
        "deletes them without copies, or make room in the journal first"
    )


def _purge_batch(
    group: Group,
    queue: TargetQueue,
    journaled: list[Entry],
    dead_letter: tuple[str | None, str] | None,
) -> WriteBatch:
    """The commit of a purge: each journaled message's DQF record and mark deleted,
    and, unless discarded (`dead_letter` None), a DLJ record MSGUNDEL whose headers
    say who purged it and why (`dead_letter`: principal, reason; `mrs dump` shows it)."""
    batch = WriteBatch.empty()
    now_ns = group.ctx.clock_ns()
    for entry in journaled:
        key = queue_key(queue.address.queue, entry.seq)
        if dead_letter is not None:
            if entry.body is None:
                group.dqf.load_body(queue, entry)
            record = record_from_entry(entry, written_time_ns=now_ns)
            record.reason = int(Status.MSGUNDEL)
            purged = {"by": dead_letter[0], "reason": dead_letter[1]}
            record.extra["headers"] = {**(entry.headers or {}), PURGED_HEADER: purged}
            batch.put_record(Journal.DLJ, seq_key(entry.seq), record)
        batch.delete(Journal.DQF, key).delete(Journal.MARKS, key)
        forget_priority(batch, key, entry.priority)
    return batch


def _tell_senders(
    taken: list[Entry],
    journaled: list[Entry],
    discard: bool,
    copies_left: Callable[[int], list[Callable[[Entry], None]]],
) -> int:
    """Senders still waiting on a purged message (a WF put waiting for its get or
    confirm, an AK put owed its MRS_ACK) are told now, as MessageQ tells a sender
    whose message could not be delivered: SUCCESS with delivery status MSGUNDEL and
    what became of it as the UMA status (DLJ_SUCCESS: in the DLJ; DISC_SUCCESS:
    discarded). Without this they waited for their timeout. How many were told; the
    WF_CONF copies re-sent under the message's idempotency key too (`copies_left`)."""
    told = 0
    dead_lettered = {id(entry) for entry in journaled} if not discard else set()
    for entry in taken:
        uma = Status.DLJ_SUCCESS if id(entry) in dead_lettered else Status.DISC_SUCCESS
        psb = Psb(Status.SUCCESS, Status.MSGUNDEL, entry.seq, uma)
        copies = copies_left(entry.seq) if entry.journaled else []
        for notify in (entry.on_confirm, entry.on_dequeue, *copies):
            if notify is not None and report_waiting_sender(notify, psb):
                told += 1
    return told


def _take(queue: TargetQueue, count_max: int) -> list[Entry]:
    """Up to `count_max` waiting messages, oldest first (the cold ones read back)."""
    taken: list[Entry] = []
    while len(taken) < count_max:
        entry = queue.take()
        if entry is None:
            break
        taken.append(entry)
    return taken


def _take_selected(
    group: Group, queue: TargetQueue, count_max: int, wanted: Selection | None
) -> list[Entry]:
    """Up to `count_max` waiting messages that `wanted` selects, oldest first, among the
    first ADMIN_SELECT_SCAN_MAX; the others go back to their places (journaled ones
    without their bodies, which stay on disk)."""
    if wanted is None:
        return _take(queue, count_max)
    taken: list[Entry] = []
    others: list[Entry] = []
    for entry in _take(queue, ADMIN_SELECT_SCAN_MAX):
        if len(taken) < count_max and wanted(group, queue, entry):
            taken.append(entry)
            continue
        if entry.journaled:
            entry.body = None
        others.append(entry)
    _put_back(queue, others)
    return taken


def _put_back(queue: TargetQueue, entries: list[Entry]) -> None:
    """Entries taken and not written go back to their places, in arrival order."""
    for entry in reversed(entries):
        queue.put_back(entry)


# -- move -------------------------------------------------------------------------------


def _move(actions: AdminActions, session: AdminSession, request: wire.AdminRequest) -> None:
    args = request.args
    source = actions.queue(args.get("queue"), "move", session=session)
    # Why its own words: "ask its own group's server" sent the operator to a group
    # that cannot take messages out of this one.
    target = actions.queue(
        args.get("to"),
        "move `to`",
        "a move stays in its group: to send them to another group, purge them to the "
        "DLJ and replay them there with `mrs jplay dlj --to QUEUE`",
        session=session,
    )
    if target is source:
        raise Refused(Status.BADPARAM, "move: the target is the source queue")
    actions.check(session, "move", source)
    actions.check(session, "move to", target)
    if source.config.recoverable and not target.config.recoverable:
        raise Refused(
            Status.NO_DQF,
            f"move: {target.address} has no DQF: recoverable messages of "
            f"{source.address} cannot go there",
        )
    room = target.config.messages_max - target.memory_count
    count_max = _count(args.get("limit", ADMIN_MOVE_MESSAGES_MAX), "limit", ADMIN_MOVE_MESSAGES_MAX)
    taken = _take_selected(actions.group, source, count_max, _selection(args.get("select") or {}))
    memory = [entry for entry in taken if not _journaled_on(target, entry)]
    if len(memory) > room:
        _put_back(source, taken)
        raise Refused(
            Status.EXCEEDQUOTA,
            f"move: {target.address} has room for {room} memory messages, {len(memory)} would come",
        )
    mover = _Mover(actions, session, request.request_id, source, target, len(taken))
    mover.select = args.get("select") or None
    mover.stage()
    for entry in taken:
        mover.move(entry)
    mover.submitted()


class _Mover:
    """One move request: one transaction per journaled message, answered once every
    one of them has ended. The moved messages wait on the target from then, all in
    the source's order: before, a memory message waited there at once and a journaled
    one at its commit, so a queue holding both came out memory ones first."""

    def __init__(
        self,
        actions: AdminActions,
        session: AdminSession,
        request_id: int,
        source: TargetQueue,
        target: TargetQueue,
        count: int,
    ) -> None:
        self.actions = actions
        self.group = actions.group
        self.session = session
        self.request_id = request_id
        self.source = source
        self.target = target
        self.waiting = count
        self.moved = 0
        self.failed: list[str] = []
        self.arrived: list[Entry | None] = []
        """The copies for the target in the source's order (None: not moved)."""
        self.select: dict | None = None
        """The selection asked for, journaled with the move (None: everything)."""
        self.all_submitted = False
        self.result: dict = {}
        """What the answer says, made once every message's transaction has ended."""
        self.staged: StagedLine | None = None
        """The move's journal line, in each message's transaction (`stage`)."""

    def args(self) -> dict:
        """What the move's journal line says was asked."""
        args = {"queue": str(self.source.address), "to": str(self.target.address)}
        if self.select:  # which messages: without it the line read as the whole queue
            args["select"] = _plain(self.select)
        return args

    def stage(self) -> None:
        """Stage the move's line, carried by every message's transaction and settled
        with the outcome once all have ended. Why in each: a move is many commits, and
        a SIGKILL after some left them moved with nobody on record; a line saying
        `moving` and no `moved` is a move the server did not see end (running it again
        finishes it)."""
        result = {
            "queue": str(self.source.address),
            "to": str(self.target.address),
            "moving": self.waiting,
        }
        self.staged = self.actions.stage(self.session, "move", self.args(), result)

    def move(self, entry: Entry) -> None:
        group = self.group
        ctx = group.ctx
        moved = _moved_copy(entry, group.sequence.next(), self.target, self.session)
        place = len(self.arrived)
        self.arrived.append(None)
        if not moved.journaled:
            self.ended(None, entry, moved, place)
            return
        if entry.body is None and not group.dqf.load_body(self.source, entry):
            self.target.stores.submitted()  # as if submitted: `ended` counts it back
            self.ended(JournalError("body unreadable"), entry, moved, place)
            return
        moved.body = entry.body
        if not entry.journaled and (refused := self._dqf_refusal(moved)):
            self.target.stores.submitted()  # as if submitted: `ended` counts it back
            self.ended(JournalError(refused), entry, moved, place)
            return
        old_key = queue_key(self.source.address.queue, entry.seq)
        new_key = queue_key(self.target.address.queue, moved.seq)
        batch = WriteBatch.empty()
        if entry.journaled:  # a memory copy has no record on the source
            batch.delete(Journal.DQF, old_key).delete(Journal.MARKS, old_key)
            forget_priority(batch, old_key, entry.priority)  # its lane after a restart
        batch.put_raw(Journal.DQF, new_key, encode_entry(moved, ctx.clock_ns()))
        if moved.times_delivered:
            batch.put_raw(Journal.MARKS, new_key, U32.pack(moved.times_delivered))
        keep_priority(batch, new_key, moved.priority)
        if self.staged is not None:
            self.staged.put_in(batch)
        self.target.stores.submitted()
        ctx.writer.submit(batch, lambda error: self._committed(error, entry, moved, place))

    def _dqf_refusal(self, moved: Entry) -> str | None:
        """For a memory copy about to get a DQF record (`_journaled_on`): why the DQF
        cannot take it now, as a put would be refused (the journal's room,
        dqf_messages_max), or None and its slot counted (`_committed` gives it back)."""
        dqf, ctx = self.group.dqf, self.group.ctx
        if full := dqf.journal_full(len(moved.body or b"")):
            return full
        if not dqf.peers.may_store(None):
            return f"DQF holds dqf_messages_max={ctx.limits.dqf_messages_max}"
        ctx.counts.dqf_added()
        return None

    def _committed(
        self, error: JournalError | None, entry: Entry, moved: Entry, place: int
    ) -> None:
        """A message's transaction ended: a memory copy's DQF slot, counted by
        `_dqf_refusal`, is given back if it failed."""
        if error is not None and not entry.journaled:
            self.group.ctx.counts.dqf_removed()
            self.group.dqf.peers.dqf_freed()
        self.ended(error, entry, moved, place)

    def ended(self, error: JournalError | None, entry: Entry, moved: Entry, place: int) -> None:
        if moved.journaled:
            self.target.stores.ended()
        if error is None:
            self.moved += 1
            self.arrived[place] = moved
            self.group.dqf.copies_moved(entry.seq, moved.seq)
        else:
            self.source.put_back(entry)
            self.failed.append(f"{entry.seq}: {error}")
        self.waiting -= 1
        self.answer_if_done()

    def submitted(self) -> None:
        self.all_submitted = True
        self.answer_if_done()

    def answer_if_done(self) -> None:
        if not self.all_submitted or self.waiting:
            return
        group = self.group
        for moved in self.arrived:
            if moved is not None:
                self.target.offer(moved)
        group.handover.serve_waiting_gets(self.target)
        self.result = {
            "queue": str(self.source.address),
            "to": str(self.target.address),
            "moved": self.moved,
            "failed": self.failed[:10],
            "left": self.source.waiting,
        }
        self.actions.journal_then_answer(
            self.session, "move", self.args(), self.result, self._answer, self.staged
        )

    def _answer(self) -> None:
        if self.failed:
            message = f"move: {len(self.failed)} not moved ({self.failed[0]})"
            self.session.send(wire.Failure(self.request_id, int(Status.JOURNAL_FAIL), message))
            return
        self.session.send(wire.AdminReply(self.request_id, self.result))


def _moved_copy(entry: Entry, seq: int, target: TargetQueue, session: AdminSession) -> Entry:
    """The message as it is stored on the target: a new seq there, the rest as it was,
    and a `moved` header saying from where and by whom. A memory copy of a recoverable
    message (a dead letter of a memory-only DLQ, a copy returned to its sender) moved
    to a queue with a DQF is stored there as a put of its mode is (`_journaled_on`):
    journaled, its dead-letter header kept in its record, and no forced status, so it
    is delivered CONFIRMREQ (POSSDUPL once delivered) and waits for its confirm.
    Why: it kept the status its copy was forced to (SUCCESS: no confirm) and stayed in
    memory, so a WF_DQF letter moved from the DLQ to a recoverable queue was gone once
    handed to a reader that crashed before acting on it, or at a restart."""
    moved_from = {
        "queue": str(entry.target),
        "seq": entry.seq,
        "by": session.principal,
    }
    headers = {**(entry.headers or {}), MOVED_HEADER: moved_from}
    moved = moved_copy(entry, seq, target.address, headers)
    if not entry.journaled and _journaled_on(target, entry):
        moved.journaled = True
        moved.delivery_status = None
        if entry.dead_letter_header is not None:  # where a journaled DLQ keeps it
            headers[DEAD_LETTER_HEADER] = entry.dead_letter_header
    return moved


def _journaled_on(target: TargetQueue, entry: Entry) -> bool:
    """Whether `entry` moved to `target` is kept in its DQF: a journaled message, or a
    memory copy of one whose mode is recoverable when the target has a DQF."""
    return entry.journaled or (target.config.recoverable and entry.delivery.recoverable)


# -- connections and the journal ----------------------------------------------------------


def _connections(actions: AdminActions, session: AdminSession, request: wire.AdminRequest) -> None:
    actions.check(session, "connections", None)
    now_s = time.monotonic()
    rows = []
    for other in sorted(actions.server.sessions, key=lambda one: one.id):
        queue = other.attached
        rows.append(
            {
                "id": other.id,
                "peer": other.peer,
                "kind": "link" if other.link is not None else "app",
                "principal": other.principal,
                "program": other.program,
                "queue": None if queue is None else str(queue.address),
                "queue_name": None if queue is None else queue.config.name,
                "unconfirmed": 0 if queue is None else len(queue.unconfirmed),
                "in_flight": len(other.in_flight),
                "age_s": round(now_s - other.connected_s, 1),
                "self": other is session,
            }
        )
    actions.looked(session, "connections", {}, {"connections": len(rows)})
    session.send(wire.AdminReply(request.request_id, {"connections": rows}))


def _journal(actions: AdminActions, session: AdminSession, request: wire.AdminRequest) -> None:
    actions.check(session, "journal", None)
    limit = _count(request.args.get("limit", ADMIN_BROWSE_DEFAULT), "limit", 10_000)
    records = actions.read_journal(limit)
    kept: list[dict] = []
    reply_bytes = 0
    for record in reversed(records):  # the newest lines that fit one frame
        reply_bytes += len(json.dumps(record))
        if kept and reply_bytes > ADMIN_REPLY_BYTES_MAX:
            break
        kept.append(record)
    kept.reverse()
    result = {"records": kept, "truncated": len(kept) < len(records)}
    actions.looked(session, "journal", {"limit": limit}, {"records": len(kept)})
    session.send(wire.AdminReply(request.request_id, result))


# -- run-time changes, written back to the config file -----------------------------------

LIMIT_KEYS = ("messages_max", "unconfirmed_max")
"""The queue limits `set_limits` changes at run time."""
QUEUE_KEYS = ("id", "name", "confirm", "messages_max", "unconfirmed_max", "recoverable")
"""What `add_queue` takes (permanent queues only)."""


def _set_limits(actions: AdminActions, session: AdminSession, request: wire.AdminRequest) -> None:
    args = request.args
    queue = actions.queue(args.get("queue"), "set-limits", session=session)
    actions.check(session, "set-limits", queue)
    values = {key: args[key] for key in LIMIT_KEYS if args.get(key) is not None}
    if not values:
        raise Refused(Status.BADPARAM, f"set-limits: give one of {', '.join(LIMIT_KEYS)}")
    if queue.address.queue == DEAD_LETTER_QUEUE:
        raise Refused(Status.BADPARAM, "set-limits: the DLQ's limits are not in the file")
    group_id, queue_id = queue.address.group, queue.address.queue
    was = {key: getattr(queue.config, key) for key in LIMIT_KEYS}
    new_bus, batch = actions.rewrite(
        lambda text: with_queue_values(text, group_id, queue_id, values)
    )
    # Only the limits go live: another key of this queue edited by hand in the file
    # meanwhile (recoverable = false) waits for the restart that reads it, as it would
    # without this command; before, the whole entry was taken and a recoverable
    # queue's puts were answered NO_DQF and dropped.
    fresh = dataclasses.replace(
        queue.config,
        **{key: getattr(new_bus.groups[group_id].queues[queue_id], key) for key in LIMIT_KEYS},
    )
    actions.group.config.queues[queue_id] = fresh
    queue.config = fresh
    queue.unconfirmed_max = fresh.unconfirmed_max
    queue.serve_waiters()  # a higher unconfirmed_max may let a parked get have one now
    # `was`: the operator sees what the change replaced (and the journal keeps it)
    result = {
        "queue": str(queue.address),
        **{key: getattr(fresh, key) for key in LIMIT_KEYS},
        "was": was,
    }
    actions.journal(session, "set_limits", {"queue": str(queue.address), **values}, result)
    actions.answer_journaled(session, request, batch, result)


def _add_queue(actions: AdminActions, session: AdminSession, request: wire.AdminRequest) -> None:
    from mrs.group.recovery import ColdReader

    actions.check_right(session, "add-queue", "config")
    args = request.args
    values = {key: args[key] for key in QUEUE_KEYS if args.get(key) is not None}
    if "id" not in values or "name" not in values:
        raise Refused(Status.BADPARAM, "add-queue: give the queue's id and name")
    group = actions.group
    config = group.config
    queue_id = values["id"]
    taken = [
        f"{config.id}.{qid} is {queue.name}"
        for qid, queue in config.queues.items()
        if qid == queue_id or queue.name == values["name"]
    ]
    if taken:  # which one: "a queue 50 or 'SAME2'" left the operator to guess
        raise Refused(
            Status.BADPARAM,
            f"add-queue: group {config.id} has that queue already ({'; '.join(taken)})",
        )
    new_bus, batch = actions.rewrite(lambda text: with_new_queue(text, config.id, values))
    fresh = new_bus.groups[config.id].queues[queue_id]
    queue = TargetQueue(fresh, Address(config.id, queue_id))
    queue.load_cold = ColdReader(
        group.ctx, queue_id, group.umas.ack_after_restart, group.recovery.pages
    )
    kept = group.recovery.adopt(queue)  # before the queue is reachable: the older first
    config.queues[queue_id] = fresh
    group.ctx.queues[queue_id] = queue
    if actions.server.gate is not None:
        actions.server.gate.forget_decisions()  # a put to the new name was decided unknown
    result: dict[str, str | int] = {"queue": str(queue.address), "name": fresh.name}
    if kept:
        result["kept_messages"] = kept
    actions.journal(session, "add_queue", values, result)
    actions.answer_journaled(session, request, batch, result)


def _grant(actions: AdminActions, session: AdminSession, request: wire.AdminRequest) -> None:
    """Replace a principal's grants in the credentials file (atomically, 0600, as
    `mrs creds grant`); every group of the bus reloads the file when it changes."""
    from mrs.security import creds as store
    from mrs.security.creds import CredsError
    from mrs.security.permissions import parse_permissions

    actions.check_right(session, "grant", "config")
    authority = actions.server.authority
    if authority is None:
        raise Refused(Status.BADPARAM, "grant: this bus has no [auth]: nothing to grant")
    args = request.args
    name = args.get("principal")
    problem = grant_problem(str(name)[:64], args)
    if problem is not None:
        raise Refused(Status.BADPARAM, problem)
    perms = parse_permissions({kind: args.get(kind) or [] for kind in GRANT_KINDS})
    if not isinstance(name, str) or isinstance(perms, str):
        problem = perms if isinstance(perms, str) else "give the principal's name"
        raise Refused(Status.BADPARAM, f"grant: {problem}")
    if (problem := rules.grants_problem(perms, actions.group.ctx.bus)) is not None:
        raise Refused(Status.BADPARAM, f"grant {name}: {problem}")  # as `mrs creds grant`
    path = authority.config.credentials_path
    try:
        with edit_lock(path):  # every group of the bus grants in the same file
            before = path.read_text(encoding="utf-8") if path.is_file() else ""
            creds = store.load(path)
            store.grant(creds, name, perms)
            store.save(path, creds)
            after = path.read_text(encoding="utf-8")
    except (CredsError, OSError, UnicodeDecodeError) as error:
        raise Refused(Status.BADPARAM, f"grant: {error}") from None
    authority.reload(f"grant of {name} by {session.principal}")
    result = {"principal": name, **perms.as_dict()}
    actions.journal(session, "grant", {"principal": name}, result)
    # journaled too: the next active of a replicated group grants the same
    batch = actions.file_changed(CREDENTIALS_FILE_KEY, before, after)
    actions.answer_journaled(session, request, batch, result)


def grant_problem(principal: str, args: Mapping[str, Any]) -> str | None:
    """Why a grant must not be done, in the AdminRequest's terms, or None. A grant
    replaces every right the principal has: with no right given it took them all
    away (an operator's own included, locking them out), so that needs `none=true`.
    The group's rule, for every asker: it was the command line's and the web page's
    alone, and `client.admin("grant", principal=NAME)` took every grant away. An
    `mrs admin grant --none` of the release before sends each right empty and no
    `none`: refused, and told so (`mrs admin` before the server asks keeps the
    same rule: mrs.tools.admin)."""
    none = args.get("none", False)
    if type(none) is not bool:
        return f"grant {principal}: none must be true or false, got {type(none).__name__}"
    given = any(args.get(kind) for kind in GRANT_KINDS)
    if given and none:
        return f"grant {principal}: `none=true` with rights given"
    if given or none:
        return None
    earlier = (  # an earlier `mrs admin grant --none`: each right sent empty
        " (an earlier `mrs admin grant` sends its none option so: use this release's)"
        if all(args.get(kind) == [] for kind in GRANT_KINDS)
        else ""
    )
    return (
        f"grant {principal}: no right given, which would take every grant away: "
        f"give {GIVE_A_RIGHT}, or `none=true` to mean it{earlier}"
    )


def _pcj_archive(actions: AdminActions, session: AdminSession, request: wire.AdminRequest) -> None:
    """Start an archive run of the PCJ on a replicated group's active (`mrs pcj archive
    --config`): the deletes must go through its writer to reach every instance
    (mrs.ops.pcj_retention). Answers the run's id at once; the command waits for its
    summary in the group's status (a large PCJ takes longer than a request may)."""
    actions.check_right(session, "pcj-archive", "config")
    until_ns, closed = request.args.get("until_ns"), request.args.get("closed", False)
    if type(until_ns) is not int or type(closed) is not bool:
        raise Refused(Status.BADPARAM, "pcj_archive: give until_ns (an int) and closed")
    try:
        run_id = actions.server.start_pcj_archive(until_ns, closed)
    except LookupError as error:
        raise Refused(Status.BADPARAM, f"pcj_archive: {error}") from None
    result = {"run": run_id, "until_ns": until_ns, "closed": closed}
    actions.journal(session, "pcj-archive", {"until_ns": until_ns, "closed": closed}, result)
    session.send(wire.AdminReply(request.request_id, result))


def _reset_link(actions: AdminActions, session: AdminSession, request: wire.AdminRequest) -> None:
    """Forget the journals recorded for a peer group, whose link is refused because it
    came back with others (mrs.group.incarnation): a group rebuilt from nothing. Not
    while its link is up, nor (without `force`) while it was not refused for its
    journals (mrs.server.links `reset`). Needs the config right: a reset of a stray
    second process would let its messages in beside the first's."""
    actions.check_right(session, "reset-link", "config")
    peer = request.args.get("peer")
    if type(peer) is not int or peer < 1:
        raise Refused(Status.BADPARAM, "reset_link: give peer, the other group's id")
    force = request.args.get("force", False)
    if type(force) is not bool:
        raise Refused(Status.BADPARAM, "reset_link: force is true or false")
    try:
        result = actions.server.reset_link(peer, force)
    except LookupError as error:
        raise Refused(Status.BADPARAM, f"reset_link: {error}") from None

    # The reset commits on its own (mrs.group.incarnation), past the writer that holds
    # an answer until a majority has it. Before, "reset" was answered from the active's
    # disk alone, and the next active still refused the peer's journals and kept
    # their dedupe keys. The journal line is committed after the reset's commits: its
    # answer waits for them too.
    def durable(error: JournalError | None) -> None:
        if error is None:
            session.send(wire.AdminReply(request.request_id, result))
            return
        message = (
            f"reset_link: done on this instance, not known to be on the group's other "
            f"instances ({error}): run it again"
        )
        session.send(wire.Failure(request.request_id, int(Status.JOURNAL_FAIL), message))

    arguments = {"peer": peer, "force": True} if force else {"peer": peer}
    actions.journal(session, "reset-link", arguments, result, then=durable)


_ARG_NAMES: dict[str, frozenset[str]] = {
    "browse": frozenset({"queue", "limit", "select", "after"}),
    "purge": frozenset({"queue", "discard", "reason"}),
    "move": frozenset({"queue", "to", "limit", "select"}),
    "connections": frozenset(),
    "journal": frozenset({"limit"}),
    "set_limits": frozenset({"queue", *LIMIT_KEYS}),
    "add_queue": frozenset(QUEUE_KEYS),
    "grant": frozenset({"principal", "none", *rules.GRANT_KINDS}),
    "pcj_archive": frozenset({"until_ns", "closed"}),
    "reset_link": frozenset({"peer", "force"}),
}
"""The arguments each action reads: any other is a mistake (a misspelt `discard`
would purge into the DLJ, a misspelt limit would be left as it was), refused by name."""


def _check_arg_names(action: str, args: dict) -> None:
    unknown = sorted(str(name)[:40] for name in set(args) - _ARG_NAMES[action])
    if unknown:
        known = ", ".join(sorted(_ARG_NAMES[action])) or "none"
        raise Refused(Status.BADPARAM, f"{action}: unknown argument {unknown} (known: {known})")


_HANDLERS: dict[str, Callable[[AdminActions, AdminSession, wire.AdminRequest], None]] = {
    "browse": _browse,
    "purge": _purge,
    "move": _move,
    "connections": _connections,
    "journal": _journal,
    "set_limits": _set_limits,
    "add_queue": _add_queue,
    "grant": _grant,
    "pcj_archive": _pcj_archive,
    "reset_link": _reset_link,
}
