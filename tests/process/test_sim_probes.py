"""Probes of the fault-injection harness itself (`mrs sim`, the fault proxy, the bus
of real processes), as a tester uses it: interrupted runs, reused or wrong paths, the
replay line of a failing seed, and the proxy's TCP behaviour.

A harness that leaves `mrs serve` or etcd processes running after it was stopped, or
that judges an earlier run's journals as its own, sends testers after bugs the server
never had."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from sim.bus import LinkedBus
from sim.ports import free_port
from sim.proxy import FaultProxy
from tests.cli_helpers import run_mrs

WAIT_S_MAX = 90.0
POLL_S = 0.1
SWARM_SEEDS = 100_000
"""The interrupted swarm's seeds: hours of work. With 500 (78 s), a loaded CI host saw
the second seed's short-lived scratch directory late, and the swarm ended before
the signal came (exit 1, not 130)."""


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _alive(pid: int) -> bool:
    """Running or stopped; a zombie has ended (its parent only has not reaped it)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (children, and theirs)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return {each for each in found if _alive(each)}


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll a condition another process makes true (there is no event to await)."""
    deadline = time.monotonic() + WAIT_S_MAX
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S_MAX} s"
        time.sleep(POLL_S)


def _start_mrs(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`mrs ARGS` as a terminal would start it: SIGINT at its default (a test runner
    in the background may have inherited it ignored)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mrs", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.fixture
def reaped() -> Iterator[set[int]]:
    """Pids a test saw the harness start: whatever is left of them is killed at the end
    (the harness under test failed to), so no test leaves a server behind."""
    pids: set[int] = set()
    yield pids
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _interrupt(
    process: subprocess.Popen, signum: signal.Signals, children: set[int]
) -> tuple[int, str]:
    """Send `signum`; its exit code and output, once every child it had is gone too."""
    process.send_signal(signum)
    output, _ = process.communicate(timeout=WAIT_S_MAX)
    _wait_for(lambda: not any(_alive(pid) for pid in children), "end of the children")
    return process.returncode, output


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signalled_scenario_stops_its_servers_and_says_so(
    tmp_path: Path, reaped: set[int], signum: signal.Signals
) -> None:
    """SIGTERM (a CI job cancelled, `kill`) and SIGHUP (the terminal closed) used to
    end `mrs sim run` at once and leave both `mrs serve` processes running,
    reparented to init; Ctrl-C ended it with no word of where the bus was. Each stops
    the servers, names the signal and the bus kept, and exits 128 + the signal."""
    scratch = tmp_path / "scratch"
    process = _start_mrs(
        "sim", "run", "partition-storm", "--seconds", "300", "--scratch", str(scratch), cwd=tmp_path
    )
    _wait_for(lambda: len(_servers(process.pid, str(scratch))) == 2, "two servers of the scenario")
    children = _descendants(process.pid)
    reaped |= children
    code, output = _interrupt(process, signum, children)
    assert code == 128 + signum, output
    assert f"interrupted by {signum.name}" in output
    assert str(scratch) in output.replace("\n", "")
    assert (scratch / "bus" / "g1").is_dir()


def _servers(pid: int, marker: str) -> set[int]:
    return {
        child
        for child in _descendants(pid)
        if "serve" in _command_line(child) and marker in _command_line(child)
    }


def test_a_signalled_replicated_nemesis_stops_etcd_and_the_instances(
    tmp_path: Path, reaped: set[int]
) -> None:
    """The same for `mrs sim replicated`: SIGTERM left etcd and three instances
    running; now they are stopped and the command says it was interrupted."""
    scratch = tmp_path / "scratch"
    process = _start_mrs(
        "sim", "replicated", "--seconds", "300", "--scratch", str(scratch), cwd=tmp_path
    )

    def everything_up() -> bool:
        lines = [_command_line(child) for child in _descendants(process.pid)]
        instances = sum("--instance" in line and str(scratch) in line for line in lines)
        return instances == 3 and any("etcd" in line.split(" ", 1)[0] for line in lines)

    _wait_for(everything_up, "etcd and three instances")
    children = _descendants(process.pid)
    reaped |= children
    code, output = _interrupt(process, signal.SIGTERM, children)
    assert code == 128 + signal.SIGTERM, output
    assert "interrupted by SIGTERM" in output


def swarm_after_two_seeds(tmp_path: Path, *args: str) -> subprocess.Popen:
    """`mrs sim swarm --workload quick ARGS` started, once its second seed has begun
    (each seed runs in a scratch directory of its own under TMPDIR)."""
    seeds_dir = tmp_path / "tmp"
    seeds_dir.mkdir()
    process = _start_mrs(
        *("sim", "swarm", "--workload", "quick", *args),
        cwd=tmp_path,
        env={"TMPDIR": str(seeds_dir)},
    )
    seen: set[str] = set()

    def a_seed_done() -> bool:
        seen.update(entry.name for entry in seeds_dir.iterdir())
        return len(seen) >= 2

    _wait_for(a_seed_done, "a second seed's scratch directory")
    return process


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_swarm_still_prints_the_seeds_it_ran(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """Stopping a long swarm used to throw away every seed it had run (SIGTERM: killed
    with no output; Ctrl-C: exit 130, nothing printed). Now it prints the verdicts
    so far, each failing seed's replay line, and how far it got."""
    process = swarm_after_two_seeds(  # more seeds than it can run before the signal
        tmp_path, "--seeds", str(SWARM_SEEDS), "--unsafe", "possdupl-always"
    )
    code, output = _interrupt(process, signum, set())
    assert code == 128 + signum, output
    assert f"interrupted by {signum.name}: " in output
    assert f" of {SWARM_SEEDS} seeds run" in output
    assert "marked first deliveries" in output


def test_a_failing_seeds_replay_line_reproduces_it_when_pasted(tmp_path: Path) -> None:
    """The replay line of a failing seed is one line even in a CI log (output not a
    terminal, 80 columns): wrapped, its tail (`--history seedN.json`) landed on a line
    of its own, and pasting the lines ran a shorter command, then a broken one. Pasted
    whole, it replays the same verdict and writes the history."""
    swarm = run_mrs(
        *("sim", "swarm", "--first", "1", "--seeds", "1", "--workload", "quick"),
        *("--unsafe", "skip-possdupl"),
        timeout_s=WAIT_S_MAX,
    )
    assert swarm.returncode == 1, swarm.stdout + swarm.stderr
    failure = next(line for line in swarm.stdout.splitlines() if line.startswith("seed 1 failed"))
    replay = next(line for line in swarm.stdout.splitlines() if line.startswith("  replay: "))
    assert replay.endswith("--history seed1.json"), swarm.stdout
    argv = shlex.split(replay.removeprefix("  replay: "))
    assert argv[:1] == ["mrs"]
    again = subprocess.run(
        [sys.executable, "-m", "mrs", *argv[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=WAIT_S_MAX,
    )
    assert again.returncode == 1 and failure in again.stdout, again.stdout + again.stderr
    assert (tmp_path / "seed1.json").stat().st_size > 0


def test_a_scratch_directory_holding_an_earlier_run_is_refused(tmp_path: Path) -> None:
    """A second `mrs sim run --scratch DIR` on the same DIR judged the first run's
    journals as its own: messages no one sent this time, redeliveries after a
    confirm, unmarked duplicates — violations the server never made (seen after an
    interrupted run). Now it is refused in one line, and the earlier bus is kept."""
    scratch = tmp_path / "scratch"
    first = run_mrs(
        *("sim", "run", "disk-full", "--seconds", "1", "--scratch", str(scratch)),
        timeout_s=WAIT_S_MAX * 2,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    again = run_mrs(
        *("sim", "run", "disk-full", "--seconds", "1", "--scratch", str(scratch)), timeout_s=30
    )
    assert again.returncode == 2 and again.stdout == "", again.stdout
    assert again.stderr.startswith("mrs: --scratch ") and "earlier run" in again.stderr
    assert len(again.stderr.splitlines()) == 1
    assert (scratch / "bus" / "g1" / "journals").is_dir()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["sim", "run", "mixed", "--history", "/nonexistent/h.json"], "--history"),
        (["sim", "run", "mixed", "--history", "/tmp"], "a directory"),
        (["sim", "replicated", "--figures", "/nonexistent/f.json"], "--figures"),
        (["sim", "swarm", "--seeds", "500", "--history", "h.json"], "give --seed"),
    ],
)
def test_an_output_file_that_cannot_be_written_is_refused_before_the_run(
    args: list[str], words: str
) -> None:
    """`--history`/`--figures` to a place that cannot take a file failed only after
    the whole run (ten minutes here), hiding its verdict behind the write error; the
    swarm's `--history` without `--seed` was ignored. Refused at once, in one line."""
    result = run_mrs(*args, timeout_s=30)  # the runs themselves take minutes
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("mrs: ") and words in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_stopping_a_bus_with_a_paused_group_ends_every_process(tmp_path: Path) -> None:
    """A group paused by the nemesis (SIGSTOP) when the run is stopped ignores the
    SIGTERM that stops it: `LinkedBus.stop` waited 30 s, raised, and left that group
    stopped for ever and the next group running. Now every group ends."""
    bus = LinkedBus(tmp_path / "bus")
    bus.start()
    pids = [process.process.pid for process in bus.processes.values() if process.process]
    try:
        os.kill(pids[0], signal.SIGSTOP)
        started_s = time.monotonic()
        bus.stop()
        assert time.monotonic() - started_s < 20
        assert not any(process.running for process in bus.processes.values())
    finally:
        for process in bus.processes.values():
            process.kill()


async def _echo_after_eof(stream: trio.SocketStream) -> None:
    """A server that reads a whole request (to the dialer's half-close), then answers."""
    request = b""
    while chunk := await stream.receive_some(4096):
        request += chunk
    await stream.send_all(b"echo:" + request)
    await stream.aclose()


async def _echo(stream: trio.SocketStream) -> None:
    """A server that answers each chunk at once."""
    with contextlib.suppress(trio.BrokenResourceError):
        while chunk := await stream.receive_some(4096):
            await stream.send_all(chunk)


async def _read_to_end(stream: trio.SocketStream) -> bytes:
    answer = b""
    while chunk := await stream.receive_some(4096):
        answer += chunk
    return answer


async def test_the_proxy_passes_on_a_half_close_and_the_answer_after_it() -> None:
    """A dialer that shuts its sending side after a request (as `nc -N` or an HTTP/1.0
    client does) gets the answer over TCP; through the proxy the connection was
    torn down at the half-close and the answer lost, so a test behind a proxy saw
    a failure a direct connection never has."""
    target_port = free_port()
    proxy = FaultProxy(free_port(), target_port)
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(target_port, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, _echo_after_eof, listeners)
        await nursery.start(proxy.run)
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream("127.0.0.1", proxy.listen_port)
            await stream.send_all(b"hello")
            await stream.send_eof()
            assert await _read_to_end(stream) == b"echo:hello"
        nursery.cancel_scope.cancel()


async def test_a_connection_dialling_when_the_link_is_cut_never_carries_a_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`cut()` drops every connection and refuses new ones until `heal()`; one whose
    dial to the peer was under way at the cut was not known to it yet, so it came up
    after the cut and carried the link through the partition. Its dial is held here
    (the real dial, gated) until the cut has happened."""
    target_port = free_port()
    proxy = FaultProxy(free_port(), target_port)
    dialling, release = trio.Event(), trio.Event()
    real_dial = trio.open_tcp_stream

    async def gated_dial(host: str, port: int, **options: object) -> trio.SocketStream:
        if port == target_port:
            dialling.set()
            await release.wait()
        return await real_dial(host, port, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(trio, "open_tcp_stream", gated_dial)
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(target_port, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, _echo, listeners)
        await nursery.start(proxy.run)
        with trio.fail_after(10):
            stream = await real_dial("127.0.0.1", proxy.listen_port)
            await dialling.wait()
            proxy.cut()
            release.set()
            try:
                await stream.send_all(b"through the partition")
                answer = await stream.receive_some(4096)
            except trio.BrokenResourceError:  # closed by the cut: a reset
                answer = b""
            assert answer == b""
        nursery.cancel_scope.cancel()


def test_a_server_that_cannot_start_is_named_in_one_line(tmp_path: Path) -> None:
    """When a scenario's `mrs serve` refuses to start, the tester read only
    "unexpected error: ExceptionGroup: Exceptions from Trio nursery"; now the line
    names the group and its own last words."""
    result = run_mrs(
        *("sim", "run", "crash-loop", "--seconds", "1", "--scratch", str(tmp_path / "s")),
        env={"MRS_HARNESS_UNSAFE": "no-such-switch"},
        timeout_s=WAIT_S_MAX,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith("mrs: group 1 did not start: ")
    assert "no-such-switch" in result.stderr and len(result.stderr.splitlines()) == 1
