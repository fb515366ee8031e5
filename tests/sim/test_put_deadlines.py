"""WF put timeouts in shared buckets (mrs.group.put_deadlines): never early, at most one
tick late, an answered put never times out, and no bucket keeps answered puts."""

from __future__ import annotations

import heapq
import itertools

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from clients import DeliveryMode, MrsTimeout, Status
from mrs.group.put_deadlines import TICK_FRACTION, TICK_S_MAX, PutDeadlines


class ClockTimers:
    """Timers on a virtual clock the test advances; cancellable, as TrioTimers are."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self._heap: list = []
        self._order = itertools.count()
        self._live = 0

    def call_later(self, delay_s: float, callback):
        slot = [callback]
        heapq.heappush(self._heap, (self.now_s + delay_s, next(self._order), slot))
        self._live += 1

        def cancel() -> None:
            if slot[0] is not None:
                slot[0] = None
                self._live -= 1

        return cancel

    def live(self) -> int:
        """Timers neither fired nor cancelled."""
        return self._live

    def advance_to(self, when_s: float) -> None:
        while self._heap and self._heap[0][0] <= when_s:
            due_s, _, slot = heapq.heappop(self._heap)
            self.now_s = due_s
            if slot[0] is not None:
                callback, slot[0] = slot[0], None
                self._live -= 1
                callback()
        self.now_s = when_s


class Put:
    """A waiting WF put, as PutReply is to the deadlines."""

    def __init__(self, timers: ClockTimers) -> None:
        self.timers = timers
        self.timed_out_at: float | None = None
        self.bucket: dict | None = None

    def time_out(self, _timeout_s: float) -> None:
        assert self.timed_out_at is None, "timed out twice"
        self.timed_out_at = self.timers.now_s

    def answer(self) -> None:
        self.bucket.leave(self)


puts_strategy = st.lists(
    st.tuples(
        st.floats(0.0, 5.0),  # arrival
        st.sampled_from([0.01, 0.1, 1.0, 3.0, 30.0]),  # timeout
        st.one_of(st.none(), st.floats(0.0, 40.0)),  # answered after (None: never)
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(puts_strategy)
def test_a_put_times_out_after_its_timeout_within_a_tick_unless_answered(puts) -> None:
    timers = ClockTimers()
    deadlines = PutDeadlines(timers)
    events = []  # (time, kind, index)
    for index, (arrival_s, _timeout_s, answered_after_s) in enumerate(puts):
        events.append((arrival_s, 0, index))
        if answered_after_s is not None:
            events.append((arrival_s + answered_after_s, 1, index))
    made: dict[int, Put] = {}
    for when_s, kind, index in sorted(events):
        timers.advance_to(when_s)
        if kind == 0:
            made[index] = put = Put(timers)
            put.bucket = deadlines.add(puts[index][1], put)
        elif made[index].timed_out_at is None:
            made[index].answer()
    timers.advance_to(100.0)
    for index, put in made.items():
        arrival_s, timeout_s, answered_after_s = puts[index]
        answered_in_time = answered_after_s is not None and (
            put.timed_out_at is None or arrival_s + answered_after_s < put.timed_out_at
        )
        if answered_in_time:
            assert put.timed_out_at is None
            continue
        tick_s = min(TICK_S_MAX, timeout_s * TICK_FRACTION)
        assert put.timed_out_at is not None, "a put never answered was never timed out"
        assert arrival_s + timeout_s - 1e-9 <= put.timed_out_at
        assert put.timed_out_at <= arrival_s + timeout_s + tick_s + 1e-9
    assert deadlines.waiting == 0 and timers.live() == 0
    assert all(not put.bucket.replies for put in made.values()), "a bucket kept a put"


def test_answered_puts_leave_their_bucket_so_memory_stays_flat() -> None:
    """100,000 puts over 10 s, each answered at once: no bucket holds any, and the live
    buckets are bounded by timeout / tick, whatever the rate."""
    timers = ClockTimers()
    deadlines = PutDeadlines(timers)
    live_max = 0
    for index in range(100_000):
        timers.advance_to(index * 1e-4)
        put = Put(timers)
        put.bucket = deadlines.add(30.0, put)
        put.answer()
        assert not put.bucket.replies
        live_max = max(live_max, timers.live())
    assert live_max <= 2 * (30.0 / TICK_S_MAX + 2)
    timers.advance_to(100.0)
    assert deadlines.waiting == 0 and timers.live() == 0


def test_puts_with_ever_different_timeouts_leave_no_timer_once_answered() -> None:
    """A client passing what is left of its own deadline gives every put another
    timeout: each opens a bucket, and once answered and closed the bucket's expiry
    timer is cancelled, so live timers stay bounded by the puts of one tick."""
    timers = ClockTimers()
    deadlines = PutDeadlines(timers)
    for index in range(20_000):
        timers.advance_to(index * 1e-3)
        put = Put(timers)
        put.bucket = deadlines.add(30.0 - index * 1e-3, put)
        put.answer()
        assert timers.live() <= 2 * 60  # a tick of 50 ms holds at most 50 puts here
    timers.advance_to(timers.now_s + 0.06)
    assert timers.live() == 0 and deadlines.waiting == 0


async def test_a_wf_conf_put_nobody_gets_times_out_and_a_stored_one_does_not(mem_bus) -> None:
    """Through the real server: WF_CONF with nobody getting answers TIMEOUT after its
    timeout (not before); WF_DQF puts answered STORED are never followed by a Failure."""
    async with mem_bus.connect("SENDER") as sender:
        started_s = trio.current_time()
        with pytest.raises(MrsTimeout) as timed_out:
            await sender.put(b"nobody", target="ANYORDER", delivery=DeliveryMode.WF_CONF, timeout=2)
        assert timed_out.value.status is Status.TIMEOUT
        waited_s = trio.current_time() - started_s
        assert 2.0 <= waited_s <= 2.0 + TICK_S_MAX + 0.5
        for index in range(5):
            psb = await sender.put(
                b"%d" % index, target="ANYORDER", delivery=DeliveryMode.WF_DQF, timeout=1
            )
            assert psb.delivery_status == Status.STORED
        await trio.sleep(3)  # past every timeout: a late TIMEOUT would break the next put
        psb = await sender.put(b"last", target="ANYORDER", delivery=DeliveryMode.WF_DQF)
        assert psb.delivery_status == Status.STORED


def test_a_reply_answered_leaves_its_bucket_and_is_never_timed_out() -> None:
    """PutReply itself: answered STORED, it leaves the bucket (so the bucket does not
    keep it alive) and the bucket's expiry sends no Failure after the PutDone."""
    from mrs import protocol as wire
    from mrs.group.reply import PutReply
    from mrs.model import Address

    class Session:
        def __init__(self) -> None:
            self.events: list = []

        def send(self, event: object) -> None:
            self.events.append(event)

        answer = send

    timers = ClockTimers()
    deadlines = PutDeadlines(timers)
    session = Session()
    answered, waiting = (
        PutReply(None, session, request_id, DeliveryMode.WF_DQF, Address(1, 13), 7)
        for request_id in (1, 2)
    )
    bucket = answered.deadline = deadlines.add(1.0, answered)
    waiting.deadline = deadlines.add(1.0, waiting)
    assert waiting.deadline is bucket and list(bucket.replies) == [answered, waiting]
    answered.report_stored(7)
    assert list(bucket.replies) == [waiting]
    timers.advance_to(5.0)
    assert [type(event) for event in session.events] == [wire.PutDone, wire.Failure]
    assert session.events[0].request_id == 1 and session.events[0].seq == 7
    assert session.events[1].request_id == 2 and session.events[1].status == Status.TIMEOUT
