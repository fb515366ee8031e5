"""The measured phases: pipelined WF_DQF puts, and put -> get -> confirm end to end.

Part of `mrs bench` (see mrs/tools/bench/__init__.py for what it measures and why).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

import trio

from mrs.tools.bench.results import (
    _STAMP,
    E2E_CONSUMER_TASKS,
    E2E_GET_TIMEOUT_S,
    E2E_PRODUCER_CONNECTIONS,
    E2E_PRODUCER_TASKS_PER_CONNECTION,
    LOCAL_GROUP,
    SENDER_QUEUE_FIRST,
    TARGET_QUEUE,
    Result,
)
from mrs.tools.bench.servers import Servers, _Failures, _Monitors, _route_label, psb_text


async def _put_phase(
    servers: Servers,
    connections: int,
    tasks_per_connection: int,
    seconds: float,
    body: bytes,
    target_group: int = LOCAL_GROUP,
) -> Result:
    """`connections` clients on group 1, each attached to its own sender queue, with
    `tasks_per_connection` tasks doing sequential WF_DQF puts on it to queue 10 of
    `target_group`, for `seconds`."""
    from clients import DeliveryMode, MrsError, Status, Uma, connect

    latencies: list[float] = []
    stored = [0]
    failures = _Failures()
    target = f"{target_group}.{TARGET_QUEUE}"
    address = servers.addresses[LOCAL_GROUP]
    start = trio.Event()
    timing: dict[str, float] = {}

    async def putter(client) -> None:
        await start.wait()
        deadline = timing["deadline"]
        perf = time.perf_counter
        while True:
            began = perf()
            if began >= deadline:
                return
            try:
                psb = await client.put(
                    body, target=target, delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ
                )
            except MrsError as error:
                failures.add(f"{type(error).__name__}: {error}")
                return
            if psb.status == Status.SUCCESS and psb.delivery_status == Status.STORED:
                latencies.append(perf() - began)  # a refusal's quick answer is no put's time
                stored[0] += 1
            else:
                failures.add(psb_text(psb))

    async def connection(index: int, *, task_status) -> None:
        queue = f"{LOCAL_GROUP}.{SENDER_QUEUE_FIRST + index}"
        async with (
            connect(address, queue=queue, program=f"mrs bench {index}") as client,
            trio.open_nursery() as nursery,
        ):
            for _ in range(tasks_per_connection):
                nursery.start_soon(putter, client)
            task_status.started()

    async with contextlib.AsyncExitStack() as stack:
        monitors = await _Monitors.open(servers, stack)
        async with trio.open_nursery() as nursery:
            timing["deadline"] = await monitors.start_connections(
                nursery, connection, connections, seconds
            )
            start.set()
        monitors.stop_clock()
        await monitors.after()

    failures.report("puts not stored")
    return _put_result(
        monitors, connections, tasks_per_connection, target_group, stored[0], latencies, failures
    )


def _put_result(
    monitors: _Monitors,
    connections: int,
    tasks_per_connection: int,
    target_group: int,
    stored: int,
    latencies: list[float],
    failures: _Failures,
) -> Result:
    """The put phase's row: puts stored in the window, named by its shape and route."""
    plural = "s" if connections != 1 else ""
    name = (
        f"WF_DQF puts, {connections} conn{plural} x {tasks_per_connection} in flight"
        f"{_route_label(target_group)}"
    )
    result = Result(
        name,
        "server",
        stored,
        monitors.elapsed,
        latencies,
        connections=connections,
        in_flight=connections * tasks_per_connection,
        failures=failures.count,
        workload="put",
        first_failure=failures.first_text,
    )
    monitors.fill(result, target_group)
    result.msgs_per_commit = monitors.msgs_per_commit(target_group)
    return result


@dataclass
class _EndToEnd:
    """What the end-to-end phase's producers and consumers share."""

    target: str
    deadline: float
    timed: bool
    filler: bytes
    latencies: list[float] = field(default_factory=list)
    stored: int = 0
    confirmed: int = 0
    put_failures: _Failures = field(default_factory=_Failures)
    consume_failures: _Failures = field(default_factory=_Failures)


async def _produce(run: _EndToEnd, client) -> None:
    """Sequential WF_DQF puts until the deadline; counts those STORED in the window."""
    from clients import DeliveryMode, MrsError, Status, Uma

    now, perf = trio.current_time, time.perf_counter
    while now() < run.deadline:
        body = _STAMP.pack(perf()) + run.filler if run.timed else run.filler
        try:
            psb = await client.put(
                body, target=run.target, delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ
            )
        except MrsError as error:
            run.put_failures.add(f"{type(error).__name__}: {error}")
            return
        if psb.status == Status.SUCCESS and psb.delivery_status == Status.STORED:
            if now() <= run.deadline:
                run.stored += 1
        else:
            run.put_failures.add(psb_text(psb))


async def _consume(run: _EndToEnd, client) -> None:
    """get -> confirm until the deadline; the latency runs from the put's stamp."""
    from clients import MrsError, MrsTimeout, NoMoreMessages, ReplyTimeout

    now, perf = trio.current_time, time.perf_counter
    while now() < run.deadline:
        try:
            message = await client.get(timeout=E2E_GET_TIMEOUT_S)
        except (MrsTimeout, ReplyTimeout, NoMoreMessages):
            continue
        except MrsError as error:
            run.consume_failures.add(f"get: {type(error).__name__}: {error}")
            return
        try:
            await client.confirm(message.seq)
        except MrsError as error:
            run.consume_failures.add(f"confirm: {type(error).__name__}: {error}")
            return
        if now() <= run.deadline:
            run.confirmed += 1
            if run.timed:
                run.latencies.append(perf() - _STAMP.unpack_from(message.body)[0])


async def _end_to_end_phase(
    servers: Servers, target_group: int, seconds: float, body_bytes: int
) -> Result:
    """Producers on group 1 (4 connections x 32 tasks of sequential WF_DQF puts) and
    one consumer connection attached to queue 10 of `target_group`, on which 32 tasks
    each loop get -> confirm. Counts the messages whose confirm was answered within
    the window; the latency is from the start of the put to the confirm's answer."""
    from clients import connect

    target = f"{target_group}.{TARGET_QUEUE}"
    timed = body_bytes >= _STAMP.size
    filler = os.urandom(body_bytes - _STAMP.size if timed else body_bytes)
    async with contextlib.AsyncExitStack() as stack:
        producers = [
            await stack.enter_async_context(
                connect(
                    servers.addresses[LOCAL_GROUP],
                    queue=f"{LOCAL_GROUP}.{SENDER_QUEUE_FIRST + index}",
                    program=f"mrs bench producer {index}",
                )
            )
            for index in range(E2E_PRODUCER_CONNECTIONS)
        ]
        consumer_client = await stack.enter_async_context(
            connect(servers.addresses[target_group], queue=target, program="mrs bench consumer")
        )
        monitors = await _Monitors.open(servers, stack)
        await monitors.before()
        run = _EndToEnd(target, trio.current_time() + seconds, timed, filler)
        # Whatever is still in flight at the deadline is cancelled and not counted.
        with trio.move_on_at(run.deadline):
            async with trio.open_nursery() as nursery:
                for client in producers:
                    for _ in range(E2E_PRODUCER_TASKS_PER_CONNECTION):
                        nursery.start_soon(_produce, run, client)
                for _ in range(E2E_CONSUMER_TASKS):
                    nursery.start_soon(_consume, run, consumer_client)
        monitors.stop_clock()
        await monitors.after()

    run.put_failures.report("end-to-end puts not stored")
    run.consume_failures.report("end-to-end gets/confirms failed")
    route = "same group" if target_group == LOCAL_GROUP else "across the link"
    result = Result(
        f"put -> get -> confirm, {route} ({target})",
        "server",
        run.confirmed,
        seconds,
        run.latencies,
        connections=E2E_PRODUCER_CONNECTIONS,
        in_flight=E2E_PRODUCER_CONNECTIONS * E2E_PRODUCER_TASKS_PER_CONNECTION,
        failures=run.put_failures.count + run.consume_failures.count,
        workload="put-get-confirm",
        consumer_in_flight=E2E_CONSUMER_TASKS,
        puts_stored=run.stored,
        first_failure=run.put_failures.first_text or run.consume_failures.first_text,
    )
    return monitors.fill(result, target_group)
