"""The measured phases: pipelined WF_DQF puts, and put -> get -> confirm end to end.

Part of `mrs bench` (see mrs/tools/bench/__init__.py for what it measures and why).
"""

from __future__ import annotations

import contextlib
import os
import time

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
from mrs.tools.bench.servers import Servers, _Failures, _Monitors, _route_label


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
            latencies.append(perf() - began)
            if psb.status == Status.SUCCESS and psb.delivery_status == Status.STORED:
                stored[0] += 1
            else:
                failures.add(repr(psb))

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
            for index in range(connections):
                await nursery.start(connection, index)
            await monitors.before()
            timing["deadline"] = monitors.started + seconds
            start.set()
        monitors.stop_clock()
        await monitors.after()

    failures.report("puts not stored")
    in_flight = connections * tasks_per_connection
    plural = "s" if connections != 1 else ""
    name = (
        f"WF_DQF puts, {connections} conn{plural} x {tasks_per_connection} in flight"
        f"{_route_label(target_group)}"
    )
    result = Result(
        name,
        "server",
        stored[0],
        monitors.elapsed,
        latencies,
        connections=connections,
        in_flight=in_flight,
        failures=failures.count,
        workload="put",
    )
    monitors.fill(result, target_group)
    result.msgs_per_commit = result.batches_per_commit
    return result


async def _end_to_end_phase(
    servers: Servers, target_group: int, seconds: float, body_bytes: int
) -> Result:
    """Producers on group 1 (4 connections x 32 tasks of sequential WF_DQF puts) and
    one consumer connection attached to queue 10 of `target_group`, on which 32 tasks
    each loop get -> confirm. Counts the messages whose confirm was answered within
    the window; the latency is from the start of the put to the confirm's answer."""
    from clients import (
        DeliveryMode,
        MrsError,
        MrsTimeout,
        NoMoreMessages,
        ReplyTimeout,
        Status,
        Uma,
        connect,
    )

    target = f"{target_group}.{TARGET_QUEUE}"
    latencies: list[float] = []
    counts = {"stored": 0, "confirmed": 0}
    put_failures, consume_failures = _Failures(), _Failures()
    timed = body_bytes >= _STAMP.size
    filler = os.urandom(body_bytes - _STAMP.size if timed else body_bytes)
    perf = time.perf_counter
    now = trio.current_time

    async def producer(client, deadline: float) -> None:
        while now() < deadline:
            body = _STAMP.pack(perf()) + filler if timed else filler
            try:
                psb = await client.put(
                    body, target=target, delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ
                )
            except MrsError as error:
                put_failures.add(f"{type(error).__name__}: {error}")
                return
            if psb.status == Status.SUCCESS and psb.delivery_status == Status.STORED:
                if now() <= deadline:
                    counts["stored"] += 1
            else:
                put_failures.add(repr(psb))

    async def consumer(client, deadline: float) -> None:
        while now() < deadline:
            try:
                message = await client.get(timeout=E2E_GET_TIMEOUT_S)
            except (MrsTimeout, ReplyTimeout, NoMoreMessages):
                continue
            except MrsError as error:
                consume_failures.add(f"get: {type(error).__name__}: {error}")
                return
            try:
                await client.confirm(message.seq)
            except MrsError as error:
                consume_failures.add(f"confirm: {type(error).__name__}: {error}")
                return
            if now() <= deadline:
                counts["confirmed"] += 1
                if timed:
                    latencies.append(perf() - _STAMP.unpack_from(message.body)[0])

    async with contextlib.AsyncExitStack() as stack:
        producers = []
        for index in range(E2E_PRODUCER_CONNECTIONS):
            producers.append(
                await stack.enter_async_context(
                    connect(
                        servers.addresses[LOCAL_GROUP],
                        queue=f"{LOCAL_GROUP}.{SENDER_QUEUE_FIRST + index}",
                        program=f"mrs bench producer {index}",
                    )
                )
            )
        consumer_client = await stack.enter_async_context(
            connect(servers.addresses[target_group], queue=target, program="mrs bench consumer")
        )
        monitors = await _Monitors.open(servers, stack)
        await monitors.before()
        deadline = now() + seconds
        # Whatever is still in flight at the deadline is cancelled and not counted.
        with trio.move_on_at(deadline):
            async with trio.open_nursery() as nursery:
                for client in producers:
                    for _ in range(E2E_PRODUCER_TASKS_PER_CONNECTION):
                        nursery.start_soon(producer, client, deadline)
                for _ in range(E2E_CONSUMER_TASKS):
                    nursery.start_soon(consumer, consumer_client, deadline)
        monitors.stop_clock()
        await monitors.after()

    put_failures.report("end-to-end puts not stored")
    consume_failures.report("end-to-end gets/confirms failed")
    route = "same group" if target_group == LOCAL_GROUP else "across the link"
    result = Result(
        f"put -> get -> confirm, {route} ({target})",
        "server",
        counts["confirmed"],
        seconds,
        latencies,
        connections=E2E_PRODUCER_CONNECTIONS,
        in_flight=E2E_PRODUCER_CONNECTIONS * E2E_PRODUCER_TASKS_PER_CONNECTION,
        failures=put_failures.count + consume_failures.count,
        workload="put-get-confirm",
        consumer_in_flight=E2E_CONSUMER_TASKS,
        puts_stored=counts["stored"],
    )
    return monitors.fill(result, target_group)
