"""AK_DQF puts answered by MRS_ACKs, in the pipelined WF row's shape.

Part of `mrs bench` (see mrs/tools/bench/__init__.py for what it measures and why).

An AK put returns at once; the durable answer is the MRS_ACK (class 28, type -801,
body = the PSB) the server queues on the sender's own queue after the commit. Each
of the `tasks_per_connection` tasks of a connection puts, then gets one MRS_ACK off
the sender queue (any put's: they come in commit order), then puts again; so a
connection has at most that many puts unacknowledged, as the WF row has that many
WF puts in flight, and the two rows compare the same window. It is written the way
an AK producer should be (docs/client-library.md): the task that put takes an ack
itself, so every put costs one task switch for its answer and one for an ack that
the server lends in the same frame as the commit's others (clients.get_pool). The
earlier shape, a `trio.Semaphore` slot per put given back by one reader task per
connection, cost a third switch per put (reader, then putter): 0.65 of WF against
0.77, and 0.81-0.82 once the server wrote an AK put's answer as soon as it had read
the put (benchmarks/README.md, twenty-second session).
"""

from __future__ import annotations

import contextlib
import time

import trio

from mrs.tools.bench.results import (
    LOCAL_GROUP,
    SENDER_QUEUE_FIRST,
    TARGET_QUEUE,
    Result,
)
from mrs.tools.bench.servers import Servers, _Failures, _Monitors, psb_text


class _AckWindow:
    """One connection's puts whose MRS_ACK has not come: put time by seq."""

    def __init__(self) -> None:
        self.put_at: dict[int, float] = {}
        self.acked_early: dict[int, bool] = {}
        """MRS_ACKs read before their put's task resumed (same connection, one loop):
        seq -> whether it reported the message stored."""


class _AkRun:
    """What every connection's putters share: the body, the deadline and the tallies."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.target = f"{LOCAL_GROUP}.{TARGET_QUEUE}"
        self.start = trio.Event()
        self.deadline = 0.0
        self.latencies: list[float] = []
        self.stored = 0
        self.failures = _Failures()

    async def putter(self, client, window: _AckWindow) -> None:
        """AK_DQF puts until the deadline, each followed by taking one MRS_ACK off the
        sender queue (any put's: so at most one put per task is unacknowledged)."""
        from clients import DeliveryMode, MrsError, Status, Uma

        await self.start.wait()
        perf = time.perf_counter
        while (began := perf()) < self.deadline:
            try:
                psb = await client.put(
                    self.body, target=self.target, delivery=DeliveryMode.AK_DQF, uma=Uma.DLJ
                )
            except MrsError as error:
                self.failures.add(f"{type(error).__name__}: {error}")
                return
            if psb.status != Status.SUCCESS:  # refused: no MRS_ACK will come
                self.failures.add(f"AK put {psb_text(psb)}")
                continue
            if (stored := window.acked_early.pop(psb.seq, None)) is not None:
                if stored:  # a refusal's quick MRS_ACK is no put's time
                    self.latencies.append(perf() - began)
            else:
                window.put_at[psb.seq] = began
            # no timeout: the phase ends by cancelling every task at the deadline
            self._acknowledged(await client.get(), window, perf)

    def _acknowledged(self, message, window: _AckWindow, perf) -> None:
        """One MRS_ACK read: its put's latency and whether it reports (SUCCESS, STORED)."""
        from clients import Status

        if not message.is_mrs_ack:
            self.failures.add(f"not an MRS_ACK on the sender queue: {message.msg_class}")
            return
        psb = message.ack_psb()
        stored = psb.status == Status.SUCCESS and psb.delivery_status == Status.STORED
        began = window.put_at.pop(psb.seq, None)
        if began is None:
            window.acked_early[psb.seq] = stored
        elif stored:  # a refusal's quick MRS_ACK is no put's time
            self.latencies.append(perf() - began)
        if stored:
            self.stored += perf() <= self.deadline
        else:
            self.failures.add(f"MRS_ACK {psb_text(psb)}")


async def _ak_phase(
    servers: Servers, connections: int, tasks_per_connection: int, seconds: float, body: bytes
) -> Result:
    """`connections` clients, each with `tasks_per_connection` AK_DQF puts whose
    MRS_ACK is outstanding, for `seconds`; counts MRS_ACKs reporting (SUCCESS, STORED)."""
    from clients import connect

    run = _AkRun(body)

    async def connection(index: int, *, task_status) -> None:
        queue = f"{LOCAL_GROUP}.{SENDER_QUEUE_FIRST + index}"
        window = _AckWindow()
        address = servers.addresses[LOCAL_GROUP]
        async with (
            connect(address, queue=queue, program=f"mrs bench ak {index}") as client,
            trio.open_nursery() as nursery,
        ):
            for _ in range(tasks_per_connection):
                nursery.start_soon(run.putter, client, window)
            task_status.started()

    async with contextlib.AsyncExitStack() as stack:
        monitors = await _Monitors.open(servers, stack)
        async with trio.open_nursery() as nursery:
            run.deadline = await monitors.start_connections(
                nursery, connection, connections, seconds
            )
            run.start.set()
            # The window closes at the deadline: what is still unacknowledged then
            # is not counted, and the readers stop with it.
            await trio.sleep(seconds)
            monitors.stop_clock()
            nursery.cancel_scope.cancel()
        await monitors.after()
    run.failures.report("AK puts not acknowledged STORED")
    return _ak_result(monitors, connections, tasks_per_connection, run)


def _ak_result(
    monitors: _Monitors, connections: int, tasks_per_connection: int, run: _AkRun
) -> Result:
    plural = "s" if connections != 1 else ""
    result = Result(
        f"AK_DQF puts + MRS_ACKs, {connections} conn{plural} x {tasks_per_connection} unacked",
        "server",
        run.stored,
        monitors.elapsed,
        run.latencies,
        connections=connections,
        in_flight=connections * tasks_per_connection,
        failures=run.failures.count,
        workload="put-ak",
        first_failure=run.failures.first_text,
    )
    monitors.fill(result, LOCAL_GROUP)
    result.msgs_per_commit = monitors.msgs_per_commit(LOCAL_GROUP)
    return result
