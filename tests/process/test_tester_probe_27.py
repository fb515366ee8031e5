"""The fault-injection harness as a tester uses it (docs/sim.md): `mrs sim run`'s bus of
real processes when a group does not start, the journals it reads after the drain,
and the fault proxy's heal after a blackhole."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import pytest
import trio

import sim.scenarios
from journals import Journal
from sim.bus import LinkedBus
from sim.checker import History, check
from sim.ports import free_port
from sim.processes import ServerStartError
from sim.proxy import FaultProxy
from tests.journal_helpers import key_for, record, write_raw, write_records

WAIT_S = 10.0


class _PortTakenBus(LinkedBus):
    """A LinkedBus whose group 2 cannot start: its port is taken before it starts (as
    on a busy host, where a free port is taken again before the server binds it)."""

    made: list[_PortTakenBus] = []
    held: list[socket.socket] = []

    def __post_init__(self) -> None:
        super().__post_init__()
        taker = socket.socket()
        taker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taker.bind(("127.0.0.1", self.ports[2]))
        taker.listen()
        self.held.append(taker)
        self.made.append(self)


async def test_a_scenario_whose_second_group_does_not_start_leaves_no_server_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mrs sim run` started group 1, then group 2 did not start: the command said so in
    one line and ended, and group 1's `mrs serve` (in a process group of its own, so no
    Ctrl-C reached it) kept running, holding its port and journals, for ever."""
    monkeypatch.setattr(_PortTakenBus, "made", [])
    monkeypatch.setattr(_PortTakenBus, "held", [])
    monkeypatch.setattr(sim.scenarios, "LinkedBus", _PortTakenBus)
    failed: list[ServerStartError] = []
    try:
        await sim.scenarios.run_scenario("crash-loop", 1, 1.0, tmp_path / "run")
    except* ServerStartError as group:
        failed.extend(each for each in group.exceptions if isinstance(each, ServerStartError))
    finally:
        for taker in _PortTakenBus.held:
            taker.close()
    assert failed and str(failed[0]).startswith("group 2 did not start"), failed
    (bus,) = _PortTakenBus.made
    first = bus.processes[1]
    try:
        assert first.process is not None, "group 1 was never started"
        assert not first.running, f"group 1 (pid {first.process.pid}) outlived the run"
    finally:
        first.kill()


async def _echo(stream: trio.SocketStream) -> None:
    with contextlib.suppress(trio.BrokenResourceError):
        while chunk := await stream.receive_some(4096):
            await stream.send_all(chunk)


async def _read_until(stream: trio.SocketStream, wanted: bytes) -> bytes:
    """What the stream gives until it holds `wanted`, or its end (a reset ends it too)."""
    got = b""
    with contextlib.suppress(trio.BrokenResourceError):
        while wanted not in got and (chunk := await stream.receive_some(4096)):
            got += chunk
    return got


@pytest.mark.parametrize("direction", ["forward", "backward", None])
async def test_healing_a_blackhole_drops_the_connection_that_lost_bytes(
    direction: str | None,
) -> None:
    """After `blackhole(...)` and `heal()` the proxy went on carrying the connection
    whose bytes had vanished, so its peer read a stream with a hole in it, which TCP
    never gives: a link through it stayed up with its transfers unanswered until the
    silence limit (15 s), and the frames sent after the heal overtook the lost ones.
    The in-memory proxy (sim.membus) resets such a connection; now this one drops it
    too, and a new connection carries everything. `blackhole()` with no direction (how
    the in-memory proxy is called: a peer that lost power) was a TypeError here; it is
    both ways."""
    target_port = free_port()
    proxy = FaultProxy(free_port(), target_port)
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(target_port, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, _echo, listeners)
        await nursery.start(proxy.run)
        with trio.fail_after(WAIT_S):
            stream = await trio.open_tcp_stream("127.0.0.1", proxy.listen_port)
            await stream.send_all(b"before;")
            assert await _read_until(stream, b"before;") == b"before;"
            proxy.blackhole(direction)
            await stream.send_all(b"lost;")
            with trio.move_on_after(0.3):  # it must not come back while blackholed
                assert await stream.receive_some(4096) == b""
            proxy.heal()
            with contextlib.suppress(trio.BrokenResourceError):
                await stream.send_all(b"after;")
            assert await _read_until(stream, b"after;") == b"", "a stream with a hole went on"
            again = await trio.open_tcp_stream("127.0.0.1", proxy.listen_port)
            await again.send_all(b"whole;")
            assert await _read_until(again, b"whole;") == b"whole;"
        nursery.cancel_scope.cancel()


def test_a_corrupt_record_left_in_a_scenarios_journal_is_a_verdict_not_a_crash(
    tmp_path: Path,
) -> None:
    """After the drain `mrs sim run` reads the journals (sim.scenarios._read_journals);
    a record that fails its checksum came out of the scan as a CorruptRecord and
    `record.body` ended the run in "unexpected error: AttributeError" with no verdict,
    after minutes of faults. Now it is left over, named, and the verdict says stuck."""
    journals = tmp_path / "journals"
    kept = record(1)
    write_records(journals, Journal.DQF, [kept])
    write_records(journals, Journal.DLJ, [record(2, body=b"dead")])
    write_raw(journals, Journal.DQF, key_for(Journal.DQF, record(3)), b"\x00not a record")
    history = History(seed=1)
    sim.scenarios._read_journals(history, 2, journals)
    left = history.leftovers["g2 DQF"]
    assert left[0] == kept.body.decode() and left[1].startswith("corrupt: "), left
    assert history.dead_letter_journal == {"dead"}
    assert len(check(history).stuck) == 2
