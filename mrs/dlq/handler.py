"""The running handler: take dead letters, apply the engine's steps, report.

One connection attached to the group's DLQ (queue 96). The dead letters come from a
source (`mrs.dlq.sources`): the DLQ itself, where every get is a lease
(`mrs.group.dlq_leases`) that goes back to the DLQ if the handler dies, or the DLJ. A
message is removed only after its DISCARD is decided or its FWD/RETRY put was
acknowledged as stored. Each message is worked by its own task; at most `window`
actions are in flight, and at most `seen_max` messages are held (the bounded record
of messages seen but not removed); retries sleep between attempts without holding
an action slot.
"""

from __future__ import annotations

import bisect
import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import trio

from clients import ConnectionLost, MrsError, connect
from mrs.config.bus import BusConfig
from mrs.dlq.actions import (
    NoTarget,
    headerless_into_own_dlq,
    plan_put,
    returns_of,
    target_text,
    uma_for,
)
from mrs.dlq.engine import Engine, StepKind
from mrs.dlq.match import Letter
from mrs.dlq.report import Event, Reporter
from mrs.dlq.sources import DljSource, DlqSource, NotMarked, NotRemoved
from mrs.dlq.table import Action, Rule
from mrs.group.dlq_leases import HANDLER_PROGRAM
from mrs.limits import (
    DLQ_HANDLER_HELD_BYTES_MAX_DEFAULT,
    DLQ_HANDLER_POLL_S,
    DLQ_HANDLER_WINDOW_DEFAULT,
    PUT_TIMEOUT_S_DEFAULT,
)
from mrs.model import DEAD_LETTER_QUEUE, REPLY_QUEUE_HEADER, Address, Message, Psb, Status
from mrs.offline.journal_files import GroupJournals


@dataclass
class HandlerOptions:
    address: str
    group_id: int
    bus: BusConfig
    wait_s: float | None
    """None: wait forever (WAIT(YES)); 0: stop when nothing is processable; n: idle s."""
    window: int = DLQ_HANDLER_WINDOW_DEFAULT
    seen_max: int = 10_000
    put_timeout_s: float = PUT_TIMEOUT_S_DEFAULT
    dlj: object = None
    """A `GroupJournals` when the input is the DLJ (INPUTQ(DLJ)); None for the DLQ."""
    open_stream: Callable | None = None
    """How to reach `address` (None: TCP); the in-process test bus passes its own."""
    held_bytes_max: int = DLQ_HANDLER_HELD_BYTES_MAX_DEFAULT
    """Bodies of the letters being worked, at most (the takes on their way when it is
    reached arrive too: at most `window` letters beyond it)."""
    fault_file: Path | None = None
    """The harness's fault file for the DLJ's own commits (MRS_FAULT_FILE, read by
    the CLI edge: mrs.dlq.command); None in production."""


@dataclass(eq=False)
class Handler:
    engine: Engine
    options: HandlerOptions
    reporter: Reporter
    clock: Callable[[], float] = trio.current_time
    counts: Counter = field(default_factory=Counter)
    _working: int = 0
    _idle_since: float = 0.0
    _no_header: dict[int, None] = field(default_factory=dict)
    _all_done: trio.Event = field(default_factory=trio.Event)
    source: DlqSource | DljSource | None = None
    _full_told: bool = False
    _held_bytes: int = 0
    """Bodies of the letters being worked (a left letter keeps none)."""
    _bytes_told: bool = False
    _stop_told: bool = False
    _tickets: int = 0
    """Takes asked for, numbered in the order they were asked (= the DLQ's order)."""
    _released: int = 0
    _arrived: dict[int, Message | None] = field(default_factory=dict)
    _taking: int = 0
    _arrival_of: dict[int, int] = field(default_factory=dict)
    _lanes: dict[str, _Lane] = field(default_factory=dict)
    _lane_of: dict[int, str] = field(default_factory=dict)
    _uncertain: set[int] = field(default_factory=set)
    """Letters whose put may have been stored (it timed out, or was answered LINK_DOWN:
    the link dropped on its way): each later put of one is marked a possible duplicate."""
    _first_take: trio.Event = field(default_factory=trio.Event)
    """Set once the first take is answered: the other takers start then (`_take`)."""
    _ended: trio.Event = field(default_factory=trio.Event)
    """Set when a taker ended with nothing worked and no take out: the others end too
    (`_end_takers`) rather than each finding so after a poll of its own."""
    _changed: trio.Event = field(default_factory=trio.Event)
    """Set (and replaced) when room may have come: a letter's work ended, a take was
    answered, or the takers end. Takers waiting for room wake on it (`_wake`)."""
    connected: bool = False
    """Set once the connection to the group is made: a failure before it is a group
    never reached (mrs.dlq.command says "could not connect"), not a connection lost."""

    async def run(self) -> None:
        # reconnect=None: a lost connection ends the handler (exit 3). Reconnected, it
        # went on believing it held letters whose leases the server had given back (or
        # lost with a memory DLQ in a restart): a record full of them took nothing new
        # for ever, without a line, and a letter's put after the drop was followed by a
        # confirm the new connection could not make.
        # The DLQ by its full address, `1.96`: every group has a queue 96, so an
        # --address that reaches another group (a mistyped port) had the handler work
        # that group's letters by this group's table (a DISCARD rule discarded them);
        # named so, the other group refuses the attach and nothing is taken.
        async with connect(
            self.options.address,
            queue=f"{self.options.group_id}.{DEAD_LETTER_QUEUE}",
            program=HANDLER_PROGRAM,
            open_stream=self.options.open_stream,
            reconnect=None,
        ) as client:
            self.connected = True
            if self.options.dlj is not None:
                group_name = self.options.bus.group(self.options.group_id).name
                self.source = DljSource(
                    cast(GroupJournals, self.options.dlj),
                    group_name,
                    self.options.fault_file,
                    left_max=self.options.seen_max,
                )
                await self.source.open(self.reporter.note)
            else:
                self.source = DlqSource(client, self.reporter.note)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_until_lost, client)
                    await self.serve(client, self.source)
                    nursery.cancel_scope.cancel()
            finally:
                self.source.close()

    async def serve(self, client, source) -> None:
        """Work `source` with puts through `client` until WAIT says stop (the part a
        test drives under a MockClock with a fake client and source)."""
        self.source = source
        limiter = trio.CapacityLimiter(self.options.window)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._report_no_header_periodically)
            await self._take(client, nursery, limiter)
            nursery.cancel_scope.cancel()

    async def _take(self, client, nursery: trio.Nursery, limiter: trio.CapacityLimiter) -> None:
        """`window` takers side by side: gets are pipelined, so a server that commits
        between rounds hands out a batch per round, not one message per fsync."""
        self._idle_since = self.clock()
        async with trio.open_nursery() as takers:
            # One take alone first. A ticket is the DLQ's order only if the takes reach
            # the server in ticket order: takers started together that wait for the
            # first answer (the client's get pool, which the DLQ refuses, sending each
            # back to a single Get) were resumed in whatever order trio chose, so the
            # first `window` letters were admitted, and put to their destination,
            # reversed half the time. After the first answer every get goes out as it
            # is called, in the order of its ticket.
            takers.start_soon(self._taker, client, nursery, limiter)
            await self._first_take.wait()
            for _ in range(self.options.window - 1):
                takers.start_soon(self._taker, client, nursery, limiter)

    async def _taker(self, client, nursery: trio.Nursery, limiter: trio.CapacityLimiter) -> None:
        try:
            await self._take_until_stop(client, nursery, limiter)
        finally:
            self._first_take.set()  # whatever ended the first taker, the others may start

    async def _take_until_stop(self, client, nursery, limiter: trio.CapacityLimiter) -> None:
        wait_s = self.options.wait_s
        while True:
            if not self._room():
                if not await self._wait_for_room():
                    return
                continue
            ticket = self._tickets
            self._tickets += 1
            self._taking += 1
            if wait_s == 0:
                message = await self._input().take(0)
            else:
                poll_s = DLQ_HANDLER_POLL_S
                if wait_s is not None:
                    poll_s = min(DLQ_HANDLER_POLL_S, max(0.0, wait_s - self._idle()))
                message = await self._input().take(poll_s)
            self._first_take.set()
            self._arrive(ticket, message, client, nursery, limiter)
            if message is not None:
                continue
            if wait_s == 0:
                if self._working == 0 and not self._arrived:
                    self._end_takers()
                    return
                await self._all_done.wait()
            elif wait_s is not None and self._idle() >= wait_s:
                self._end_takers()
                return

    def _end_takers(self) -> None:
        """WAIT says stop: the takers waiting for room end now, when nothing is being
        worked and no take is out (a letter on its way is still worked by its taker).
        Before, each found so after a DLQ_HANDLER_POLL_S poll of its own, one at a
        time with one place left in the record: a `--once` run holding --seen-max - 1
        letters (or stopped by the DLQ's unconfirmed cap) ended some 30 s late."""
        if self._working == 0 and self._taking == 0:
            self._ended.set()
            self._wake()

    def _wake(self) -> None:
        """Wake the takers waiting for room: they look again now. Why: each looked
        once a DLQ_HANDLER_POLL_S only, so a run whose room came back letter by letter
        (a DLJ of records the table leaves, with a small `--seen-max`) waited a poll
        for each."""
        self._changed.set()
        self._changed = trio.Event()

    def _arrive(self, ticket: int, message: Message | None, client, nursery, limiter) -> None:
        """Admit what the takes brought in the order they were asked for, whatever
        order their tasks run in: the per-destination order starts here."""
        self._arrived[ticket] = message
        while self._released in self._arrived:
            released = self._arrived.pop(self._released)
            self._released += 1
            self._taking -= 1
            if released is None:
                continue
            self._idle_since = self.clock()
            admitted = self.engine.admit(letter_of(released), self.clock())
            assert admitted, "room was reserved before the take"
            self._working += 1
            self._held_bytes += len(released.body)
            if self._all_done.is_set():
                self._all_done = trio.Event()
            self._arrival_of[released.seq] = self._released - 1
            self._join_lane(released)
            nursery.start_soon(self._work, client, released, limiter)
        if self._working == 0 and not self._arrived:
            # Nothing to work, no earlier take outstanding: a WAIT(NO) taker that found
            # nothing while an earlier take was still out waits for this, not for a
            # message's work that may never start (an empty DLQ hung --once).
            self._all_done.set()
        self._wake()

    def _room(self) -> bool:
        return (
            self.engine.seen + self._taking < self.engine.seen_max
            and self._held_bytes < self.options.held_bytes_max
        )

    def _idle(self) -> float:
        return 0.0 if self._working else self.clock() - self._idle_since

    async def _wait_for_room(self) -> bool:
        """Wait until the record of held messages has room (True), or until WAIT says
        stop (False): with every held message left where it is (IGNORE, no header) and
        none being worked, no room comes, so WAIT(NO) ends now and WAIT(nnn) when idle
        for nnn seconds, telling what was not looked at."""
        wait_s = self.options.wait_s
        while not self._room():
            if self._ended.is_set():
                return False
            # Told when letters fill the record, not when takes on their way do: with
            # --seen-max under --window the note came at start on an empty DLQ.
            if self.engine.full() and not self._full_told:
                self._full_told = True
                self.reporter.note(
                    f"the record of messages held is full (--seen-max {self.engine.seen_max}):"
                    " taking no more until some leave"
                )
            if self._held_bytes >= self.options.held_bytes_max and not self._bytes_told:
                self._bytes_told = True
                self.reporter.note(
                    f"the letters being worked hold {self._held_bytes} bytes of bodies "
                    f"(--held-bytes-max {self.options.held_bytes_max}): taking no more "
                    "until some leave"
                )
            settled = self._working == 0 and self._taking == 0
            if wait_s is not None and settled and self._idle() >= wait_s:
                if not self._stop_told:
                    self._stop_told = True
                    self.reporter.note(self._stopped_full_note())
                return False
            changed = self._changed
            with trio.move_on_after(DLQ_HANDLER_POLL_S):
                await changed.wait()
        return True

    def _stopped_full_note(self) -> str:
        """Why the run ends with its record full, where the letters held are. With the
        DLJ only records it put and could not remove are held then (a left one is not):
        the note said "left on the DLQ", and the operator looked at an empty DLQ."""
        if isinstance(self.source, DljSource):
            return (
                f"ending with the record full: {self.engine.seen} messages held are left in "
                "the DLJ (each was put, and its deletion failed: the next run repeats it "
                "marked a possible duplicate), and any behind them were not looked at "
                "(raise --seen-max)"
            )
        return (
            f"ending with the record full: {self.engine.seen} messages held are "
            "left on the DLQ, and any behind them were not looked at (raise "
            "--seen-max, or move what no rule takes with a catch-all rule)"
        )

    async def _work(self, client, message: Message, limiter: trio.CapacityLimiter) -> None:
        try:
            await self._work_one(client, message, limiter)
        finally:
            self._leave_lane(message.seq)
            self._arrival_of.pop(message.seq, None)
            self._uncertain.discard(message.seq)
            self._working -= 1
            self._held_bytes -= len(message.body)
            self._idle_since = self.clock()
            if self._working == 0:
                self._all_done.set()
            self._wake()

    async def _work_one(self, client, message: Message, limiter) -> None:
        seq = message.seq
        while True:
            step = self.engine.step(seq, self.clock())
            if step.kind is StepKind.NO_HEADER:
                self._no_header[seq] = None
                self.counts["no_header"] += 1
                self._event(message, None, "NONE", 0, "left", step.reason)
                return self._leave(message)
            if step.kind is StepKind.IGNORE:
                self.counts["ignored"] += 1
                self._event(message, step.rule, "IGNORE", step.attempt, "left", step.reason)
                return self._leave(message)
            if step.kind is StepKind.LOOPED:
                self.counts["looped"] += 1
                self._event(message, None, "NONE", 0, "left", step.reason)
                return self._leave(message)
            if step.kind is StepKind.WAIT:
                await trio.sleep(step.wait_s)
                continue
            assert step.rule is not None, "an ACT step names its rule"
            if not await self._first_in_lane(seq):
                continue  # an earlier letter left the lane: look at the step again
            async with limiter:
                outcome, target, detail = await self._acting(client, step.rule, message)
            if outcome == HELD:  # done, but still held: in held_not_removed too
                outcome = "forwarded" if step.rule.action is Action.FWD else "retried"
            elif outcome in ("discarded", "forwarded", "retried"):
                self.engine.forget(seq)
            if outcome in ("discarded", "forwarded", "retried"):
                self.counts[outcome] += 1
                self._event(
                    message,
                    step.rule,
                    step.rule.action.value,
                    step.attempt,
                    outcome,
                    detail,
                    target,
                )
                return
            self.engine.failed(seq, self.clock())
            self._join_lane(message)  # the same destination, or the next rule's
            self.counts["attempts_failed"] += 1
            self._event(
                message, step.rule, step.rule.action.value, step.attempt, "failed", detail, target
            )

    def _leave(self, message: Message) -> None:
        """The letter is left where it is. A DLQ letter stays leased to the handler, so
        it stays in the record (--seen-max). A DLJ record has no lease: the handler
        passes over it and forgets it. Why: five IGNOREd DLJ records held
        `--seen-max 5` full, and the run ended without looking at the records behind
        them, which a catch-all rule would have forwarded."""
        if isinstance(self.source, DljSource):
            self.engine.forget(message.seq)
            self._no_header.pop(message.seq, None)
            self.source.leave(message)

    def _input(self) -> DlqSource | DljSource:
        assert self.source is not None, "the source is set before anything is taken"
        return self.source

    # ------------------------------------------------------------------ lanes
    def _join_lane(self, message: Message) -> None:
        """Put the letter in the lane of the destination its current rule puts to
        (none for DISCARD/IGNORE, or a target that cannot be named)."""
        seq = message.seq
        target = self._destination(message)
        if self._lane_of.get(seq) == target:
            return
        self._leave_lane(seq)
        if target is None:
            return
        lane = self._lanes.setdefault(target, _Lane())
        bisect.insort(lane.waiting, self._arrival_of[seq])
        self._lane_of[seq] = target

    def _leave_lane(self, seq: int) -> None:
        target = self._lane_of.pop(seq, None)
        if target is None:
            return
        lane = self._lanes[target]
        lane.waiting.remove(self._arrival_of[seq])
        if not lane.waiting:
            del self._lanes[target]
            return
        lane.wake_first()

    def _destination(self, message: Message) -> str | None:
        step = self.engine.step(message.seq, self.clock())
        if step.kind not in (StepKind.ACT, StepKind.WAIT) or step.rule is None:
            return None
        if step.rule.action not in (Action.FWD, Action.RETRY):
            return None
        try:
            target = target_text(step.rule, message)
            return str(self.options.bus.resolve(target, self.options.group_id))
        except (NoTarget, LookupError, ValueError):
            return None

    async def _first_in_lane(self, seq: int) -> bool:
        """Wait until no earlier letter to the same destination is still on the DLQ
        for it (waiting for its retry, or being put). False: woken, look again."""
        target = self._lane_of.get(seq)
        if target is None:
            return True
        lane = self._lanes[target]
        arrival = self._arrival_of[seq]
        if lane.waiting[0] == arrival and lane.acting is None:
            return True
        woken = lane.wakers.setdefault(arrival, trio.Event())
        await woken.wait()
        return False

    async def _acting(self, client, rule: Rule, message: Message) -> tuple[str, str, str]:
        lane = self._lanes.get(self._lane_of.get(message.seq, ""))
        if lane is not None:
            lane.acting = self._arrival_of[message.seq]
        try:
            return await self._act(client, rule, message)
        finally:
            if lane is not None:
                lane.acting = None
                # An earlier letter may have joined the lane's front while this put was
                # on its way (its own rule for another destination gave up) and waits
                # for the put to end. Why: woken only when a letter left the lane, it
                # waited for ever behind a failed put that stays for its next RETRYINT,
                # which itself waited behind it: both held, `--once` never ended.
                if lane.waiting:
                    lane.wake_first()

    async def _act(self, client, rule: Rule, message: Message) -> tuple[str, str, str]:
        """(outcome, target, detail). The DLQ confirm comes only after a stored put."""
        if rule.action is Action.DISCARD:
            try:
                await self._input().remove(message, discarded=True)
            except NotRemoved as error:
                return "failed", "", f"{error}; still held"  # RETRYINT, as a failed put
            return "discarded", "", ""
        try:
            target = target_text(rule, message)
            address = self.options.bus.resolve(target, self.options.group_id)
        except (NoTarget, LookupError, ValueError) as error:
            return "failed", "", str(error)
        repeat = message.seq in self._uncertain
        plan = plan_put(rule, message, self.options.group_id, str(address), repeat)
        own_dlq = isinstance(self.source, DlqSource)
        if own_dlq and (why := headerless_into_own_dlq(plan, address, self.options.group_id)):
            return "failed", str(address), why
        uma = uma_for(plan.delivery, address.group != self.options.group_id)
        try:
            await self._input().before_put(message)
        except NotMarked as error:
            return "failed", str(address), str(error)
        try:
            psb = await client.put(
                message.body,
                str(address),
                delivery=plan.delivery,
                uma=uma,
                msg_class=message.msg_class,
                msg_type=message.msg_type,
                priority=message.priority,
                correlation_id=message.correlation_id,
                headers=plan.headers,
                timeout=self.options.put_timeout_s,
            )
        except ConnectionLost:
            raise  # the handler ends (exit 3); what it held goes back to the DLQ
        except MrsError as error:
            if error.status == Status.TIMEOUT:
                self._uncertain.add(message.seq)
                return "failed", str(address), "put timed out; outcome unknown, will repeat"
            if error.status in REFUSED_OUTRIGHT:
                await self._nothing_stored(message)
            return "failed", str(address), f"{_name(error.status)}: {error}"
        if not _stored(psb):
            await self._not_stored(message, psb)
            return (
                "failed",
                str(address),
                f"not stored: {_name(psb.delivery_status)}/" + _name(psb.uma_status),
            )
        try:
            await self._input().remove(message)
        except NotRemoved as error:
            # Stored: never put again by this run (it stays in the record, held). The
            # group counted the put, so the letter comes back POSSDUPL after the run,
            # and the next run's put of it is marked (and keyed) as a repeat.
            return (
                HELD,
                str(address),
                (
                    f"{_name(psb.delivery_status)}; not removed from the {self._input().name}: "
                    f"{error}; {self._input().held_then}"
                ),
            )
        outcome = "forwarded" if rule.action is Action.FWD else "retried"
        return outcome, str(address), _name(psb.delivery_status)

    async def _not_stored(self, message: Message, psb: Psb) -> None:
        """A put answered as not delivered. One whose answer says no copy was kept may
        be made again as it was; any other (LINK_DOWN: its link may have dropped after
        the message reached the other group) marks every later put of the letter a
        possible duplicate. Why: after LINK_DOWN the handler put a memory letter again
        unmarked, and the receiver got two copies, neither flagged."""
        if psb.kept_no_copy:
            await self._nothing_stored(message)
        else:
            self._uncertain.add(message.seq)

    async def _nothing_stored(self, message: Message) -> None:
        """The group answered that this put stored no copy: the source may take back
        its attempt mark, unless an earlier put of the letter may have stored one (it
        timed out in this run, or the letter came marked POSSDUPL)."""
        if not isinstance(self.source, DljSource):
            return  # the DLQ: the group counts the put as it takes it in (its own rule)
        if message.seq not in self._uncertain and message.delivery_status != Status.POSSDUPL:
            await self.source.nothing_stored(message)

    async def _report_no_header_periodically(self) -> None:
        interval_s = max(self.engine.retry_interval_s, DLQ_HANDLER_POLL_S)
        while True:
            await trio.sleep(interval_s)
            if self._no_header:
                seqs = ", ".join(str(seq) for seq in list(self._no_header)[:10])
                self.reporter.note(
                    f"{len(self._no_header)} messages without a dead-letter header stay on the "
                    f"DLQ (seq {seqs})"
                )

    def _event(self, message, rule, action, attempt, outcome, detail, target="") -> None:
        self.reporter.event(
            Event(
                seq=message.seq,
                rule_line=rule.line if rule else 0,
                action=action,
                attempt=attempt,
                outcome=outcome,
                target=target,
                detail=detail,
                possdupl=message.delivery_status == Status.POSSDUPL,
            )
        )

    def summary(self) -> dict:
        keys = (
            "forwarded",
            "retried",
            "discarded",
            "ignored",
            "attempts_failed",
            "no_header",
            "looped",
        )
        result = {key: self.counts.get(key, 0) for key in keys}
        result["held_not_removed"] = self.engine.seen
        return result


@dataclass(eq=False)
class _Lane:
    """The letters bound for one destination, by arrival: only the first may put, so
    a destination gets its letters in DLQ order even while the first waits."""

    waiting: list[int] = field(default_factory=list)
    acting: int | None = None
    wakers: dict[int, trio.Event] = field(default_factory=dict)

    def wake_first(self) -> None:
        if (woken := self.wakers.pop(self.waiting[0], None)) is not None:
            woken.set()


async def _until_lost(client) -> None:
    """Raise ConnectionLost within DLQ_HANDLER_POLL_S of the connection dropping, even
    while no request is out (takers waiting for room, letters waiting for a retry,
    --once waiting for its last letters): a request in flight notices at once."""
    while True:
        await client.wait_connected()  # returns while connected; raises once it is lost
        await trio.sleep(DLQ_HANDLER_POLL_S)


HELD = "held"
"""What `_act` answers when a FWD/RETRY put was stored but the letter could not be
removed (`NotRemoved`): reported as forwarded/retried, and the letter stays held."""


REFUSED_OUTRIGHT = frozenset(
    {
        Status.NOTSUPPORTED,
        Status.BADDELIVERY,
        Status.BADUMA,
        Status.NOSUCHQUEUE,
        Status.MSGTOOBIG,
        Status.BADPARAM,
        Status.KEY_REUSED,
        Status.QUEUE_BUSY,
        Status.NOTAUTHORIZED,
    }
)
"""What a put raises when the group refused it as it arrived (or the library did not
send it): nothing was stored. Any other error (a timeout, a lost connection, a
server or journal fault) leaves the outcome unknown."""


def _stored(psb: Psb) -> bool:
    return (int(psb.status) > 0 and int(psb.delivery_status) > 0) or psb.uma_status == (
        Status.SAF_SUCCESS
    )


def _name(status: object) -> str:
    return getattr(status, "name", str(status))


def letter_of(message: Message) -> Letter:
    reply_to = None
    reply_text = (message.headers or {}).get(REPLY_QUEUE_HEADER)
    if isinstance(reply_text, str):
        # Address.parse: digits 0-9 only, as many as an id has. Why: "²" is isdigit(),
        # and a dead letter whose sender wrote reply_q = "².1" (or 5000 digits) raised
        # int()'s ValueError here and stopped the handler at that letter, every run
        with contextlib.suppress(ValueError):
            address = Address.parse(reply_text)
            reply_to = (address.group, address.queue)
    return Letter(
        seq=message.seq,
        header=message.dead_letter_header,
        source=(message.source.group, message.source.queue),
        msg_type=message.msg_type,
        recoverable=message.delivery.recoverable,
        correlation_id=message.correlation_id,
        headers=message.headers,
        reply_to=reply_to,
        returns=returns_of(message.headers),
    )
