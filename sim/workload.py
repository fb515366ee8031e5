"""The workload both the simulation and the real-process scenarios drive: producers that
put every delivery mode with every UMA, consumers with one or several gets in flight
that sometimes walk away with messages unconfirmed, and the final drains.

Everything a consumer learns goes into the `History`, including what it cannot know:
a get or a confirm whose answer never came (connection lost, group crashed, cancelled)
is recorded as such, so the checker can tell a marked redelivery the consumer never
saw from a first delivery wrongly marked POSSDUPL.

A run object (`sim.simulation.Simulation`, `sim.scenarios.RealRun`) gives the workload
`rng`, `history`, `stopping`, `group_ids`, `connect(group_id, queue)`,
`paused_consumers` (group ids whose consumers hold off, so backlogs build) and,
optionally, `consumer_delay_s` (a lagging consumer) and `walk_away_probability`.
"""

from __future__ import annotations

import random
from typing import Any, Protocol

import msgpack
import trio

from clients import DeliveryMode, MrsError, NoMoreMessages, ReplyTimeout
from mrs.core.delivery import supported
from mrs.core.selection import Selection, by_correlation_id, by_priority
from mrs.model import DEAD_LETTER_QUEUE, MRS_ACK_TYPE, MRS_CLASS, InterestPoint, Status, Uma
from sim.checker import History, Sent

IN_ORDER_QUEUE = 10
"""Explicit in-order confirms, one get at a time: FIFO is checked here."""
PARALLEL_QUEUE = 11
"""Explicit out-of-order confirms, several gets in flight, small caps."""
PARALLEL_GETS = 4
UNCONFIRMED_MAX = 3
"""unconfirmed_max of the parallel queue: below PARALLEL_GETS, so the cap is reached."""
MEMORY_MESSAGES_MAX = 8
"""messages_max of the parallel queue: memory puts beyond it take their UMA."""
PRODUCER_QUEUE_FIRST = 20
PUT_TIMEOUT_S = 10.0
WALK_AWAY_PROBABILITY = 0.03
"""A consumer closes its connection with messages unconfirmed (they must come back)."""
UNSUPPORTED_PROBABILITY = 0.02
"""A producer tries a mode/UMA pair MessageQ does not combine (must be refused)."""
PRIORITIES = (0, 0, 0, 0, 1, 7, 99)
"""A put's priority: mostly 0, so lanes of several priorities fill and overtake."""
SELECTIVE_PROBABILITY = 0.2
"""A get on the parallel queue is selective (by priority or by a correlation id)."""

PLANS: tuple[tuple[DeliveryMode, Uma], ...] = tuple(
    (mode, uma) for mode in DeliveryMode for uma in Uma if supported(mode, uma)
)
"""Every supported (mode, UMA) pair: all 15 modes, all 6 UMAs."""
UNSUPPORTED_PLANS = tuple(
    (mode, uma) for mode in DeliveryMode for uma in Uma if not supported(mode, uma)
)


BURST_MODES = (DeliveryMode.NN_DQF, DeliveryMode.AK_DQF, DeliveryMode.NN_SAF) * 3 + (
    DeliveryMode.WF_DQF,
)
"""Mostly fire-and-forget (a burst is fast), some WF so its outcomes are seen."""


def queues_toml(producers_per_group: int) -> str:
    """The [[group.queue]] tables every group of the workload has."""
    return (
        f'[[group.queue]]\nid = {IN_ORDER_QUEUE}\nname = "IN"\nconfirm = "explicit-in-order"\n'
        f'[[group.queue]]\nid = {PARALLEL_QUEUE}\nname = "PAR"\n'
        f'confirm = "explicit-out-of-order"\nunconfirmed_max = {UNCONFIRMED_MAX}\n'
        f"messages_max = {MEMORY_MESSAGES_MAX}\n"
        + "".join(
            f'[[group.queue]]\nid = {PRODUCER_QUEUE_FIRST + index}\nname = "P{index}"\n'
            for index in range(producers_per_group)
        )
    )


class Run(Protocol):
    rng: random.Random
    history: History
    stopping: bool
    group_ids: tuple[int, ...]
    paused_consumers: set[int]

    async def connect(self, group_id: int, queue: str | None) -> Any: ...


class _WalkAway(Exception):
    """The consumer leaves with messages unconfirmed, on purpose."""


def priority_of(message_id: str) -> int:
    """A put's priority, drawn from its id: the run's random streams are not touched,
    so a seed's other draws (modes, targets, faults) stay what they were."""
    return random.Random(message_id).choice(PRIORITIES)


def choose_plan(rng: random.Random) -> tuple[DeliveryMode, Uma]:
    if rng.random() < UNSUPPORTED_PROBABILITY:
        return rng.choice(UNSUPPORTED_PLANS)
    mode = rng.choice(list(DeliveryMode))
    return mode, rng.choice([uma for plan_mode, uma in PLANS if plan_mode is mode])


# ---------------------------------------------------------------------- producers
async def producer(
    run: Run, group_id: int, index: int, messages_max: int, pause_s_max: float = 0.5
) -> None:
    """Put messages_max messages, each with a random plan, to a random group's queue."""
    name = f"{group_id}.{PRODUCER_QUEUE_FIRST + index}"
    rng = random.Random(run.rng.random())
    counter = 0
    while counter < messages_max and not run.stopping:
        try:
            async with await run.connect(group_id, f"P{index}") as client:
                while counter < messages_max and not run.stopping:
                    target_queue = rng.choice((IN_ORDER_QUEUE, IN_ORDER_QUEUE, PARALLEL_QUEUE))
                    target = f"{rng.choice(run.group_ids)}.{target_queue}"
                    counter += 1  # an id is never reused, even when its put fails
                    await put_one(run, client, name, counter - 1, target, rng)
                    await trio.sleep(rng.uniform(0.01, pause_s_max))
        except MrsError:
            await trio.sleep(0.2)


async def put_one(
    run: Run, client: Any, producer_name: str, counter: int, target: str, rng: random.Random
) -> None:
    """One put, recorded before it is sent and with whatever the PSB says."""
    mode, uma = choose_plan(rng)
    message_id = f"{producer_name}:{counter}"
    in_order = target.endswith(f".{IN_ORDER_QUEUE}")
    priority = priority_of(message_id)
    sent = Sent(message_id, producer_name, target, int(mode), int(uma), in_order, priority)
    run.history.record_send(sent)
    try:
        psb = await client.put(
            message_id.encode(),
            target=target,
            delivery=mode,
            uma=uma,
            timeout=PUT_TIMEOUT_S,
            priority=priority,
            correlation_id=message_id.encode(),  # what a selective get names
        )
    except MrsError as error:
        if error.status == Status.NOTSUPPORTED:
            run.history.record_observed("put NOTSUPPORTED")
            run.history.refused.add(message_id)
            return
        raise
    run.history.record_outcome(message_id, int(psb.delivery_status), int(psb.uma_status), psb.seq)


async def burst(run: Run, group_id: int, count: int) -> None:
    """A long backlog: `count` puts to one group's queues as fast as they go (its
    consumers are paused by the caller): recoverable ones to the in-order queue, past
    the server's in-memory window, and every tenth a WF_MEM to the parallel queue,
    past its messages_max (EXCEEDQUOTA)."""
    name = f"{group_id}.{PRODUCER_QUEUE_FIRST}/burst"  # its own FIFO stream
    rng = random.Random(run.rng.random())
    async with await run.connect(group_id, "P0") as client:
        for counter in range(count):
            if run.stopping:
                return
            target = f"{group_id}.{IN_ORDER_QUEUE}"
            mode = rng.choice(BURST_MODES)
            uma = (
                Uma.DLJ
                if mode.interest_point is InterestPoint.SAF
                else rng.choice((Uma.DLJ, Uma.SAF))
            )
            if counter % 10 == 9:
                target, mode, uma = f"{group_id}.{PARALLEL_QUEUE}", DeliveryMode.WF_MEM, Uma.DISC
            message_id = f"{name}:{counter}"
            in_order = target.endswith(f".{IN_ORDER_QUEUE}")
            priority = priority_of(message_id)  # lanes beyond the window, cold and recovered
            sent = Sent(message_id, name, target, int(mode), int(uma), in_order, priority)
            run.history.record_send(sent)
            psb = await client.put(
                message_id.encode(), target=target, delivery=mode, uma=uma, priority=priority
            )
            run.history.record_outcome(
                message_id, int(psb.delivery_status), int(psb.uma_status), psb.seq
            )


# ---------------------------------------------------------------------- consumers
def _answer_lost(error: MrsError) -> bool:
    """True when the request's answer never arrived (it may have been acted on): by
    the error's type (ReplyTimeout: the client gave up waiting), not its words, which
    name the request and the server."""
    if error.status == Status.LINK_DOWN or error.status == Status.PROTOCOL_ERROR:
        return True
    return isinstance(error, ReplyTimeout)


async def get_recorded(
    run: Run, client: Any, queue: str, timeout_s: float, select: Selection | None = None
) -> Any:
    """A get whose lost answer (error, cancel) is recorded before it propagates; a
    selective one's answer that does not match is recorded as a mismatch."""
    answered = False
    try:
        message = await client.get(timeout=timeout_s, select=select)
        answered = True
        if select is not None:
            run.history.record_observed(f"get selective by {select.keys[0].attribute}")
            if not select.matches(message):
                mismatch = f"{message.body!r} for {select.to_wire()}"
                run.history.selection_mismatches.append(mismatch)
        return message
    except MrsError as error:
        answered = not _answer_lost(error)
        raise
    finally:
        if not answered:
            run.history.record_lost_get(queue)


async def confirm_recorded(run: Run, client: Any, message: Any, message_id: str) -> bool:
    """Confirm; True if the server answered that it is confirmed."""
    answered = False
    try:
        await client.confirm(message.seq)
        answered = True
        run.history.record_confirm(message_id, str(message.target))
        return True
    except MrsError as error:
        answered = not _answer_lost(error)
        return False
    finally:
        if not answered:
            run.history.record_unsure_confirm(message_id)


async def consume_one(run: Run, client: Any, queue: str, timeout_s: float, rng) -> bool:
    """Get, record and confirm one message; False when none came in time."""
    delay_s = getattr(run, "consumer_delay_s", 0.0)  # a lagging consumer (scenarios)
    if delay_s and timeout_s:
        await trio.sleep(delay_s)
    try:
        message = await get_recorded(
            run, client, queue, timeout_s, choose_selection(run, queue, rng)
        )
    except NoMoreMessages:
        return False
    except MrsError as error:
        run.history.record_observed(f"get {getattr(error.status, 'name', error.status)}")
        if error.status in (Status.TIMEOUT, Status.EXCMAXUNCONF):
            if error.status == Status.EXCMAXUNCONF:
                await trio.sleep(0.05)
            return error.status == Status.EXCMAXUNCONF
        raise
    if message.msg_class == MRS_CLASS:
        return True  # an MRS_ACK (its body is a PSB), not a workload message
    message_id = message.body.decode()
    run.history.record_delivery(message_id, queue, message.delivery_status)
    run.history.record_observed(f"get {message.delivery.name}")
    if message.needs_confirm:
        walk_away_probability = getattr(run, "walk_away_probability", WALK_AWAY_PROBABILITY)
        if rng is not None and rng.random() < walk_away_probability:
            run.history.record_walk_away(queue, message_id)
            raise _WalkAway
        if rng is not None and rng.random() < 0.3:
            await trio.sleep(rng.uniform(0, 0.2))  # others get meanwhile: caps are reached
        if not await confirm_recorded(run, client, message, message_id):
            if message_id not in run.history.unsure_confirms:
                run.history.record_walk_away(queue, message_id)
            raise _WalkAway  # a confirm the server refused: leave, it comes back
    return True


def choose_selection(run: Run, queue: str, rng: random.Random | None) -> Selection | None:
    """Sometimes a selective get on the parallel queue (the in-order queue's checks
    assume plain gets): a priority at least some value, or the correlation id of a
    message sent there (pending, got already, or never stored: all must be right)."""
    if rng is None or not queue.endswith(f".{PARALLEL_QUEUE}"):
        return None
    rng = random.Random(f"{queue}:{len(run.history.deliveries)}")  # the consumer's is not drawn
    if rng.random() >= SELECTIVE_PROBABILITY:
        return None
    if rng.random() < 0.5:
        return by_priority("ge", rng.choice(PRIORITIES[-3:]))
    sent_here = [sent.message_id for sent in list(run.history.sent.values())[-50:]]
    sent_here = [
        message_id for message_id in sent_here if run.history.sent[message_id].target == queue
    ]
    if not sent_here:
        return None
    return by_correlation_id(rng.choice(sent_here).encode())


async def consumer(run: Run, group_id: int, queue_id: int = IN_ORDER_QUEUE, gets: int = 1) -> None:
    """Consume a queue for the whole run with `gets` gets in flight."""
    queue = f"{group_id}.{queue_id}"
    rng = random.Random(run.rng.random())
    while True:
        while group_id in run.paused_consumers:
            await trio.sleep(0.2)
        try:
            async with await run.connect(group_id, queue) as client:
                try:
                    async with trio.open_nursery() as nursery:
                        for _ in range(gets):
                            nursery.start_soon(_get_loop, run, client, queue, rng)
                finally:
                    await _give_back_recorded(run, queue, client)
        except (MrsError, _WalkAway):
            await trio.sleep(rng.uniform(0.01, 0.3))
        except BaseExceptionGroup as group:
            _, rest = group.split((MrsError, _WalkAway))
            if rest is not None:
                raise rest from None
            await trio.sleep(rng.uniform(0.01, 0.3))


async def _give_back_recorded(run: Run, queue: str, client: Any) -> None:
    """Closing: what the client gives back (as `connect` does on leaving), and a lost
    get for each recoverable message it still holds: the server delivered it for a
    get whose caller had given up (its pool raised TIMEOUT from another batch's
    answer, or the caller left), no caller took it, and the connection's end drops
    it, so it comes back POSSDUPL. A replicated group holds a Delivery until its mark
    is on a replica, so such late deliveries are common there (seeds 733, 837 of
    `--replicated`: "marked first deliveries" no lost get explained). The held
    messages are `Client.held`."""
    with trio.CancelScope(shield=True):
        await client.lifetime.give_back_held()
    for message in client.held:
        if message.needs_confirm:
            run.history.record_lost_get(queue)


async def _get_loop(run: Run, client: Any, queue: str, rng: random.Random) -> None:
    group_id = int(queue.split(".")[0])
    while group_id not in run.paused_consumers:
        await consume_one(run, client, queue, 1.0, rng)
    raise _WalkAway  # paused: leave so the backlog builds on the server


# ---------------------------------------------------------------------- drains
async def drain(run: Run, group_id: int, queue_id: int) -> None:
    """After the run: get and confirm everything left on one queue."""
    queue = f"{group_id}.{queue_id}"
    for _ in range(3):  # a refused confirm makes us leave; the message comes back
        try:
            async with await run.connect(group_id, queue) as client:
                while await consume_one(run, client, queue, 0, None):
                    pass
                return
        except (MrsError, _WalkAway):
            await trio.sleep(0.2)


async def drain_side_queues(run: Run, group_id: int, producers_per_group: int) -> None:
    """Collect returned (RTS) copies and MRS_ACKs (the outcome of AK puts) from
    producers' queues, and the DLQ's contents."""
    for index in range(producers_per_group):
        await _collect(run, group_id, f"{group_id}.{PRODUCER_QUEUE_FIRST + index}", "returned")
    await _collect(run, group_id, f"{group_id}.{DEAD_LETTER_QUEUE}", "dead_letter_queue")


async def _collect(run: Run, group_id: int, queue: str, into: str) -> None:
    found: set[str] = getattr(run.history, into)
    try:
        async with await run.connect(group_id, queue) as client:
            while True:
                try:
                    message = await client.get(timeout=0)
                except NoMoreMessages:
                    return
                if message.msg_class != MRS_CLASS:
                    found.add(message.body.decode())
                elif message.msg_type == MRS_ACK_TYPE:
                    _, delivery_status, seq, uma_status = msgpack.unpackb(message.body)
                    run.history.record_mrs_ack(seq, delivery_status, uma_status)
                if message.needs_confirm:
                    await client.confirm(message.seq)
    except MrsError:
        return
