"""Run one phase against fresh servers (one group, or two linked) and stop them.

Part of `mrs bench` (see mrs/tools/bench/__init__.py for what it measures and why).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

import trio

from mrs.errors import MrsError
from mrs.exit_status import CommandError
from mrs.offline.stop_signals import run_stoppable
from mrs.tools.bench.ak_phase import _ak_phase
from mrs.tools.bench.phases import _end_to_end_phase, _put_phase
from mrs.tools.bench.results import (
    E2E_PRODUCER_CONNECTIONS,
    LINK_UP_WAIT_S,
    LOCAL_GROUP,
    REMOTE_GROUP,
    SERVER_STOP_TIMEOUT_S,
    Result,
)
from mrs.tools.bench.servers import Phase, Servers, _bench_config, _limits_toml, _queues_toml
from mrs.tools.server_log import first_warning
from sim.bus import LinkedBus
from sim.processes import GroupProcess, first_start_failure


def _log_path(group_id: int, process: GroupProcess) -> Path:
    return process.log_path or process.config_path.parent / f"group{group_id}.log"


def _stop_all(processes: dict[int, GroupProcess], report: bool = True) -> None:
    """SIGTERM every running server and wait; report unclean exits. Raises on timeout
    (the caller kills what is left)."""
    for group_id, process in processes.items():
        if process.running:
            code = process.terminate(SERVER_STOP_TIMEOUT_S)
            if code != 0 and report:
                print(f"mrs bench: group {group_id} exited with code {code}", file=sys.stderr)


def _kill_all(processes: dict[int, GroupProcess]) -> None:
    for process in processes.values():
        with contextlib.suppress(Exception):
            if process.running:
                try:
                    process.terminate(SERVER_STOP_TIMEOUT_S)
                finally:
                    process.kill()  # a no-op once it has exited


async def _wait_link_up(address: str, peer: int) -> None:
    from clients import connect

    async with connect(address, queue=None, program="mrs bench link check") as client:
        with trio.fail_after(LINK_UP_WAIT_S):
            while (await client.status())["links"][str(peer)]["state"] != "up":
                await trio.sleep(0.02)


async def _run_phase(
    processes: dict[int, GroupProcess], bus: LinkedBus | None, phase: Phase
) -> Result:
    """Start the servers (and the link's proxy), run `phase`, stop the servers."""
    async with trio.open_nursery() as nursery:
        if bus is not None:
            await bus.start_proxies(nursery)
        try:
            # The highest group first: the lower one dials it, and finds it listening.
            for group_id in sorted(processes, reverse=True):
                await trio.to_thread.run_sync(processes[group_id].start)
            servers = Servers(
                {g: p.address for g, p in processes.items()},
                {g: p.process.pid for g, p in processes.items()},
            )
            if bus is not None:
                await _wait_link_up(servers.addresses[LOCAL_GROUP], REMOTE_GROUP)
            result = await phase(servers)
        except BaseException:
            # On Ctrl-C the servers got SIGINT too and may already be exiting: a
            # SIGTERM landing after their handler is gone is no failure worth a line.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_stop_all, processes, False)
            raise
        else:
            # Stop the servers while the link's proxy still runs, so the link does
            # not drop (and divert to the SAF) first.
            await trio.to_thread.run_sync(_stop_all, processes)
            return result
        finally:
            nursery.cancel_scope.cancel()


def _single(group: BaseExceptionGroup) -> BaseException:
    """The one exception inside nested groups; the group itself if there are several."""
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = inner
    return group


def _check_measured(result: Result, processes: dict[int, GroupProcess]) -> None:
    """A server row that stored nothing while its requests failed measured nothing: it
    stops the bench in one line (what the server answered, and why in its own words,
    read now: its log is removed next). Why: on a disk with less free space than the
    servers' journal reserve (5% of the bench's 8 GiB journal_bytes_max, about 410 MiB)
    every put was refused MRS_RES_EXH, and the bench went on through every row, printed
    0 puts/s throughout and exited 0."""
    if result.kind != "server" or result.count or not result.failures:
        return
    group_id = result.dqf_group or LOCAL_GROUP
    process = processes.get(group_id)
    warning = first_warning(_log_path(group_id, process)) if process is not None else ""
    line = (
        f"bench stopped: {result.name}: nothing was stored, {result.failures:,} requests "
        f"failed or were refused (the first {result.first_failure})"
    )
    raise CommandError(line + (f"; group {group_id} logged: {warning}" if warning else ""))


def measure(directory: Path, *, linked: bool, senders: int, phase: Phase) -> Result:
    """Fresh servers on a fresh data directory (one group, or groups 1 and 2 with a
    link), `phase` against them, then stop them and remove the directory, whatever
    happens (also on Ctrl-C). A server that does not start, or a row that stored
    nothing, is one line (CommandError)."""
    directory.mkdir(parents=True)
    bus: LinkedBus | None = None
    processes: dict[int, GroupProcess] = {}
    try:
        if linked:
            bus = LinkedBus(directory, queues=_queues_toml(senders), limits=_limits_toml())
            processes = bus.processes
        else:
            processes = {LOCAL_GROUP: GroupProcess(_bench_config(directory, senders), 1)}
        try:
            result = run_stoppable(_run_phase, processes, bus, phase)
        except BaseExceptionGroup as group:
            # Errors come out of trio's nurseries wrapped in groups; `mrs` exits 130
            # on a plain KeyboardInterrupt (Ctrl-C).
            if group.subgroup(KeyboardInterrupt) is not None:
                raise KeyboardInterrupt from None
            raise _single(group) from None
        _check_measured(result, processes)
        return result
    except CommandError:
        raise
    except Exception as error:
        if isinstance(error, MrsError):  # a server's refusal says why in its own words
            raise CommandError(f"bench stopped: {' '.join(str(error).split())}") from None
        started = first_start_failure(error)
        if started is not None:
            # Its last words say why; its log (in the directory removed next) would
            # be a page of it, and "unexpected error" a bug, which it is not.
            words = started.last_words().replace(" did not start: mrs: ", " did not start: ")
            raise CommandError(f"bench stopped: {words}") from None
        for group_id, process in processes.items():
            log_path = _log_path(group_id, process)
            if log_path.exists():
                tail = log_path.read_text(errors="replace")[-3000:]
                print(f"mrs bench: server log tail ({log_path}):\n{tail}", file=sys.stderr)
        raise
    finally:
        _kill_all(processes)
        shutil.rmtree(directory, ignore_errors=True)


def measure_server(
    directory: Path,
    connections: int,
    tasks_per_connection: int,
    seconds: float,
    body_bytes: int,
    *,
    ak: bool = False,
) -> Result:
    """WF_DQF puts to queue 1.10 of one fresh `mrs serve`; with `ak`, AK_DQF puts,
    each answered by its MRS_ACK (mrs.tools.bench.ak_phase)."""
    body = os.urandom(body_bytes)
    run_phase = _ak_phase if ak else _put_phase
    return measure(
        directory,
        linked=False,
        senders=connections,
        phase=lambda servers: run_phase(servers, connections, tasks_per_connection, seconds, body),
    )


def measure_cross_group(
    directory: Path, connections: int, seconds: float, body_bytes: int
) -> Result:
    """WF_DQF puts from group 1 to queue 2.10, one in flight per connection."""
    body = os.urandom(body_bytes)
    return measure(
        directory,
        linked=True,
        senders=connections,
        phase=lambda servers: _put_phase(
            servers, connections, 1, seconds, body, target_group=REMOTE_GROUP
        ),
    )


def measure_end_to_end(
    directory: Path, target_group: int, seconds: float, body_bytes: int
) -> Result:
    """put -> get -> confirm to queue 10 of group 1 (one server) or group 2 (linked)."""
    return measure(
        directory,
        linked=target_group != LOCAL_GROUP,
        senders=E2E_PRODUCER_CONNECTIONS,
        phase=lambda servers: _end_to_end_phase(servers, target_group, seconds, body_bytes),
    )
