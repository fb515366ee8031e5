"""A target queue driven the way the server drives it, against a plain model.

Rules: offer, get (take and deliver, or park a waiter), confirm any seq, detach.
The model is a list of pending seqs, a list of unconfirmed seqs in delivery order and
the sets of confirmed and finished messages; the machine checks the real
`TargetQueue` and `check_confirm` against it after every step.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from mrs.config.bus import QueueConfig
from mrs.core.delivery import Refused, check_confirm, delivery_status_on_get
from mrs.group.queues import GetWaiter, TargetQueue
from mrs.group.shapes import Entry
from mrs.model import Address, ConfirmStyle, DeliveryMode, Status

# kind of message -> (delivery mode, journaled)
KINDS = {
    "recoverable": (DeliveryMode.WF_DQF, True),
    "conf": (DeliveryMode.AK_CONF, True),
    "ack": (DeliveryMode.WF_ACK, False),
    "memory": (DeliveryMode.NN_MEM, False),
    "deq": (DeliveryMode.AK_DEQ, False),
}
UNCONFIRMED_MAX = 2
QUEUE = Address(2, 20)


class ConfirmationMachine(RuleBasedStateMachine):
    style: ConfirmStyle = ConfirmStyle.EXPLICIT_IN_ORDER

    def __init__(self) -> None:
        super().__init__()
        config = QueueConfig(
            id=QUEUE.queue,
            name="ORDERS",
            confirm=self.style,
            messages_max=1000,
            unconfirmed_max=UNCONFIRMED_MAX,
            permanent=True,
        )
        self.queue = TargetQueue(config, QUEUE)
        self.offered: dict[int, Entry] = {}
        self.pending: list[int] = []  # model: seqs waiting, front first
        self.unconfirmed: list[int] = []  # model: delivered, unconfirmed, delivery order
        self.confirmed: set[int] = set()
        self.finished: set[int] = set()  # delivered, needing no confirm
        self.deliveries: Counter[int] = Counter()
        self.waiting_gets = 0
        self.serving = False

    @initialize()
    def attach(self) -> None:
        self.queue.attached_session = 1

    # ----------------------------------------------------------------- helpers
    def _hand_over(self, entry: Entry) -> None:
        """What the server does with an entry a get receives."""
        # A get is handed an entry only while the cap allows (parked ones wait).
        assert len(self.queue.unconfirmed) < UNCONFIRMED_MAX
        if self.serving:
            assert entry.seq == self.pending.pop(0)
            self.waiting_gets -= 1
        status = delivery_status_on_get(entry.needs_confirm, entry.times_delivered)
        if entry.needs_confirm:
            first = self.deliveries[entry.seq] == 0
            assert status == (Status.CONFIRMREQ if first else Status.POSSDUPL)
        else:
            assert status == Status.SUCCESS
        entry.times_delivered += 1
        self.deliveries[entry.seq] += 1
        if entry.needs_confirm:
            self.queue.unconfirmed[entry.seq] = entry
            self.unconfirmed.append(entry.seq)
        else:
            self.finished.add(entry.seq)

    def _confirm_implicitly(self) -> None:
        if self.style is not ConfirmStyle.IMPLICIT:
            return
        for seq in list(self.queue.unconfirmed):
            self.queue.unconfirmed.pop(seq)
        self.confirmed.update(self.unconfirmed)
        self.unconfirmed.clear()
        self._serve_waiters()

    def _serve_waiters(self) -> None:
        """What the server does once a confirm frees room under the cap."""
        self.serving = True
        try:
            self.queue.serve_waiters()
        finally:
            self.serving = False

    # ----------------------------------------------------------------- rules
    @rule(seq=st.integers(0, 60), kind=st.sampled_from(sorted(KINDS)))
    def offer(self, seq: int, kind: str) -> None:
        if seq in self.offered:
            return  # sequence numbers are unique per message
        mode, journaled = KINDS[kind]
        entry = Entry(seq, b"m%d" % seq, Address(1, 10), QUEUE, mode, journaled=journaled)
        self.offered[seq] = entry
        # To a parked get only if nothing older waits and the cap allows.
        had_waiter = (
            self.waiting_gets > 0 and not self.pending and len(self.unconfirmed) < UNCONFIRMED_MAX
        )
        if not had_waiter:
            self.pending.append(seq)
        self.queue.offer(entry)
        if had_waiter:
            self.waiting_gets -= 1

    @rule()
    def get(self) -> None:
        self._confirm_implicitly()
        if len(self.queue.unconfirmed) >= UNCONFIRMED_MAX:
            assert len(self.unconfirmed) >= UNCONFIRMED_MAX  # answered EXCMAXUNCONF
            return
        entry = self.queue.take()
        if entry is None:
            assert self.pending == []
            return
        assert entry.seq == self.pending.pop(0)
        self._hand_over(entry)

    @precondition(lambda self: not self.queue.pending)
    @rule()
    def get_and_wait(self) -> None:
        self._confirm_implicitly()
        if len(self.queue.unconfirmed) >= UNCONFIRMED_MAX:
            return
        assert self.queue.take() is None
        self.queue.park(GetWaiter(deliver=self._hand_over, session_id=1))
        self.waiting_gets += 1

    @rule(data=st.data())
    def confirm(self, data) -> None:
        known = sorted(self.offered)
        seq = data.draw(
            st.sampled_from(known) | st.integers(0, 70) if known else st.integers(0, 70),
            label="seq",
        )
        oldest = self.unconfirmed[0] if self.unconfirmed else None
        allowed = seq in self.unconfirmed and (
            self.style is not ConfirmStyle.EXPLICIT_IN_ORDER or seq == oldest
        )
        try:
            check_confirm(self.style, self.queue.unconfirmed, seq)
        except Refused as refused:
            assert refused.status == Status.BADSEQ
            assert not allowed, f"confirm({seq}) refused; model allows it"
            return
        assert allowed, f"confirm({seq}) accepted; unconfirmed {self.unconfirmed}"
        if self.style is ConfirmStyle.EXPLICIT_IN_ORDER:
            assert seq == oldest
        self.queue.unconfirmed.pop(seq)
        self.unconfirmed.remove(seq)
        self.confirmed.add(seq)
        self._serve_waiters()

    @rule()
    def detach(self) -> None:
        before = list(self.pending)
        returned = self.queue.detach()
        expected = sorted(self.unconfirmed)
        assert [entry.seq for entry in returned] == expected
        assert all(entry.times_delivered >= 1 for entry in returned)
        assert [entry.seq for entry in self.queue.pending][: len(expected)] == expected
        assert not self.queue.waiters
        self.pending = expected + before
        self.unconfirmed = []
        self.waiting_gets = 0
        self.queue.attached_session = 1  # the application attaches again

    # ----------------------------------------------------------------- invariants
    @invariant()
    def queue_matches_the_model(self) -> None:
        assert [entry.seq for entry in self.queue.pending] == self.pending
        assert list(self.queue.unconfirmed) == self.unconfirmed
        assert len(self.queue.waiters) == self.waiting_gets

    @invariant()
    def every_message_is_in_exactly_one_place(self) -> None:
        places = Counter(entry.seq for entry in self.queue.pending)
        places.update(self.queue.unconfirmed.keys())
        places.update(self.confirmed)
        places.update(self.finished)
        assert places == Counter(self.offered.keys()), places
        for seq, entry in self.queue.unconfirmed.items():
            assert entry is self.offered[seq] and entry.needs_confirm

    @invariant()
    def no_get_waits_while_a_message_could_be_delivered(self) -> None:
        assert not (self.queue.waiters and self.queue.pending and self.queue.can_deliver())

    @invariant()
    def unconfirmed_stays_under_its_cap(self) -> None:
        assert len(self.queue.unconfirmed) <= UNCONFIRMED_MAX

    @invariant()
    def memory_count_counts_nonjournaled_pending(self) -> None:
        expected = sum(1 for entry in self.queue.pending if not entry.journaled)
        assert self.queue.memory_count == expected

    @invariant()
    def in_order_queue_accepts_only_the_oldest(self) -> None:
        if self.style is not ConfirmStyle.EXPLICIT_IN_ORDER:
            return
        for position, seq in enumerate(self.unconfirmed):
            try:
                check_confirm(self.style, self.queue.unconfirmed, seq)
            except Refused:
                assert position > 0
            else:
                assert position == 0


MACHINE_SETTINGS = settings(max_examples=300, stateful_step_count=50, deadline=None)


class InOrderMachine(ConfirmationMachine):
    style = ConfirmStyle.EXPLICIT_IN_ORDER


class OutOfOrderMachine(ConfirmationMachine):
    style = ConfirmStyle.EXPLICIT_OUT_OF_ORDER


class ImplicitMachine(ConfirmationMachine):
    style = ConfirmStyle.IMPLICIT


TestInOrderConfirmation = InOrderMachine.TestCase
TestInOrderConfirmation.settings = MACHINE_SETTINGS
TestOutOfOrderConfirmation = OutOfOrderMachine.TestCase
TestOutOfOrderConfirmation.settings = MACHINE_SETTINGS
TestImplicitConfirmation = ImplicitMachine.TestCase
TestImplicitConfirmation.settings = MACHINE_SETTINGS
