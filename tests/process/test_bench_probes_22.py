# ruff: noqa: F811  (the fixtures `reaped` and `small_disk` are imported, then named as arguments)
"""Probes of the performance tools as an engineer comparing MRS with Redis or RabbitMQ
runs them, exactly as benchmarks/README.md writes them: `mrs bench` on a disk that
cannot hold what its servers reserve, on a machine where its server cannot start, on a
full disk, with a length that never ends; and `benchmarks/client_cpu.py` run, stopped
and misused.

What each guards: a bench that cannot measure says why in one line and exits non-zero
instead of printing 0 puts/s with exit 0, a page of server log or "unexpected error";
a benchmark script leaves no `mrs serve` and no data directory behind, whether it ends,
is stopped by a signal or is given a count it cannot run."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.disk_helpers import mounted_tmpfs
from tests.process.test_cli_errors import small_disk  # noqa: F401 (a fixture)
from tests.process.test_command_line_probes_19 import _one_line, _stop, _using
from tests.process.test_sim_probes import (  # the /proc helpers and clean-up fixture
    _command_line,
    _descendants,
    _wait_for,
    reaped,  # noqa: F401 (a fixture)
)

ROOT = Path(__file__).resolve().parents[2]
CLIENT_CPU = ROOT / "benchmarks" / "client_cpu.py"
RUN_S_MAX = 60.0
"""A bench that stops at its first server row, or a two-second client_cpu run."""
UNDER_THE_RESERVE_MIB = 150
"""A disk this large holds the bench's disk measurements but is under its servers'
journal reserve (5% of journal_bytes_max 8 GiB: about 410 MiB)."""
MANY_CLIENTS = 600
"""Past the default accept_burst (500), within the 900 sender queues `--clients` takes."""
CROSS_CONNECTIONS = 4
"""Few puts per group-2 commit, so group 2's own batches weigh in its batches per commit."""
ADDRESS_SPACE_BYTES = 4 << 30
"""Room for the bench's own 1 GiB LMDB map, not for its server's 8 GiB journal map."""


@pytest.fixture
def disk_under_the_reserve(tmp_path: Path) -> Iterator[Path]:
    """A real tmpfs of UNDER_THE_RESERVE_MIB: its free space is really measured."""
    yield from mounted_tmpfs(tmp_path / "disk", f"{UNDER_THE_RESERVE_MIB}m")


def _bench(
    scratch: Path, tmp: Path, reaped: set[int], *extra: str, preexec=None
) -> tuple[int, str, str]:
    """`mrs bench` of one client and one group with short rows; its exit code, stdout
    and stderr, with nothing it started left running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mrs", "bench", "--seconds", "0.3", "--clients", "1"]
        + ["--skip-cross-group", "--scratch", str(scratch), *extra],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
    )
    out, err = _finish(process, reaped)
    assert not _using(scratch), "a server of the bench outlived it"
    assert not scratch.exists()
    return process.returncode, out, err


def _finish(process: subprocess.Popen, reaped: set[int]) -> tuple[str, str]:
    """Its stdout and stderr once it exits; killed, with what it started, if it does
    not within RUN_S_MAX."""
    try:
        return process.communicate(timeout=RUN_S_MAX)
    except subprocess.TimeoutExpired:
        reaped |= _descendants(process.pid)
        process.kill()
        process.communicate()
        raise AssertionError(f"{process.args} still running after {RUN_S_MAX} s") from None


def _last_line(err: str) -> str:
    """The bench's own line after its progress lines (each "mrs bench: ... ...")."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and "unexpected error" not in err, err
    assert "server log tail" not in err, err
    return lines[-1]


def test_a_bench_on_a_disk_under_its_servers_reserve_stops_in_one_line(
    tmp_path: Path, disk_under_the_reserve: Path, reaped: set[int]
) -> None:
    """With less free space than the servers' journal reserve (about 410 MiB for the
    bench's 8 GiB journal_bytes_max), every put was refused MRS_RES_EXH, and the bench
    ran every row, printed 0 puts/s throughout and exited 0: an engineer read it as
    "MRS stores nothing". Now the first row that stored nothing stops it in one line
    naming the refusal and the server's own reason."""
    code, out, err = _bench(disk_under_the_reserve / "bench", tmp_path, reaped)
    assert code == 1, err
    line = _last_line(err)
    assert line.startswith("mrs: bench stopped: WF_DQF puts, 1 conn x 1 in flight: "), line
    assert "nothing was stored" in line and "MRS_RES_EXH" in line, line
    assert "under the journal reserve" in line, line
    assert "BENCH_JSON" not in out  # no figures that measured nothing
    assert "4 conns x 32" not in err  # stopped at the first row, not after all of them


def test_a_bench_whose_server_cannot_start_says_why_in_one_line(
    tmp_path: Path, reaped: set[int]
) -> None:
    """Where the server cannot map its 8 GiB journal (an address-space limit), the
    bench printed a page of the server's log, then "mrs: unexpected error:
    ServerStartError: ..." as if it were a bug."""

    def limit_address_space() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))

    code, _, err = _bench(tmp_path / "bench", tmp_path, reaped, preexec=limit_address_space)
    assert code == 1, err
    line = _last_line(err)
    assert line.startswith("mrs: bench stopped: group 1 did not start: "), line
    assert "cannot map a journal that large here" in line, line


def test_a_bench_on_a_full_disk_says_so_in_one_line(
    tmp_path: Path, small_disk: Path, reaped: set[int]
) -> None:
    """The LMDB measurement filling the disk ended in "mrs: unexpected error:
    JournalDeviceError: ..." (a bug's words, "run with -v for the traceback")."""
    code, _, err = _bench(small_disk / "bench", tmp_path, reaped)
    assert code == 1, err
    line = _last_line(err)
    assert line.startswith("mrs: bench stopped: LMDB synced commits in "), line
    assert "no space left on device" in line, line


def test_a_bench_of_more_clients_than_the_default_accept_burst_measures_them(
    tmp_path: Path, reaped: set[int]
) -> None:
    """`--clients` takes 1 to 900 (one sender queue each), but the server's default
    accept_burst (500 connections at once from one address) refused the rest
    EXCEEDQUOTA: `--clients 600` printed a page of server log and "mrs: unexpected
    error: QuotaExceeded". The bench's server now has room for every client."""
    code, out, err = _bench(tmp_path / "bench", tmp_path, reaped, "--clients", str(MANY_CLIENTS))
    assert code == 0, err
    payload = json.loads(out.split("BENCH_JSON ", 1)[1])
    row = next(r for r in payload["results"] if r["connections"] == MANY_CLIENTS)
    assert row["count"] > 0 and row["failures"] == 0, row


def test_the_cross_group_row_counts_messages_per_commit_not_batches(tmp_path: Path) -> None:
    """benchmarks/README.md: the cross-group row's batches/commit is "how many of these
    puts shared one of group 2's synced commits" (msgs_per_commit in the JSON). It was
    group 2's writer batches per commit, and group 2 commits batches of its own for the
    link: 2.95 "puts" per commit where 2.02 had shared one, at 4 connections."""
    from mrs.tools.bench.runner import measure_cross_group

    result = measure_cross_group(tmp_path / "cross", CROSS_CONNECTIONS, 0.5, 1024)
    assert result.failures == 0 and result.count > 0, result
    commits = result.writer_delta["commits"]
    # Nothing is consumed in a put row: the DQF holds every message stored in the run.
    assert result.dqf_messages_after == result.count, result
    assert result.msgs_per_commit == pytest.approx(result.count / commits), result.writer_delta
    assert not (tmp_path / "cross").exists()


def test_a_bench_that_would_never_report_is_refused(tmp_path: Path) -> None:
    """`--seconds nan` and `inf` were refused as running forever; `1e300` ran forever."""
    scratch = tmp_path / "bench"
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "bench", "--seconds", "1e300", "--scratch", str(scratch)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert _one_line(result.stderr).startswith("mrs bench: --seconds must be at most"), result
    assert not scratch.exists()


def _client_cpu(tmp: Path, *args: str) -> subprocess.Popen:
    """benchmarks/client_cpu.py with its temporary directory made in `tmp`."""
    return subprocess.Popen(
        [sys.executable, str(CLIENT_CPU), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_client_cpu_leaves_no_data_directory_behind(tmp_path: Path, reaped: set[int]) -> None:
    """Every run left its server's data directory (about 50 MB) in /tmp: the README
    runs it again and again, interleaved with a base checkout."""
    process = _client_cpu(tmp_path, "--rounds", "1", "--messages", "300", "--window", "30")
    out, err = _finish(process, reaped)
    assert process.returncode == 0, err
    assert '"puts_per_s"' in out
    assert not list(tmp_path.glob("mrs-client-cpu-*"))


def test_a_signalled_client_cpu_stops_its_server(tmp_path: Path, reaped: set[int]) -> None:
    """SIGTERM (`timeout`, a cancelled job) ended client_cpu.py at once and left its
    `mrs serve` running, reparented to init, and its directory in /tmp."""
    process = _client_cpu(tmp_path, "--rounds", "1000", "--messages", "1000")
    _wait_for(lambda: bool(_servers_of(process.pid)), "client_cpu's server")
    code, _, err, left = _stop(process, signal.SIGTERM, reaped)
    assert code == 128 + signal.SIGTERM, err
    assert _one_line(err).startswith("client_cpu: interrupted by SIGTERM"), err
    assert not left, f"still running: {left}"
    assert not list(tmp_path.glob("mrs-client-cpu-*"))


def _servers_of(pid: int) -> list[int]:
    return [each for each in _descendants(pid) if " serve " in _command_line(each)]


@pytest.mark.parametrize("args", [["--messages", "0"], ["--window", "0"], ["--rounds", "0"]])
def test_client_cpu_refuses_a_count_it_cannot_run(
    tmp_path: Path, reaped: set[int], args: list[str]
) -> None:
    """`--messages 0` and `--window 0` waited forever for messages never put (with a
    server running), `--rounds 0` ended in a StatisticsError traceback."""
    process = _client_cpu(tmp_path, *args)
    _, err = _finish(process, reaped)
    assert process.returncode == 2, err
    line = _one_line(err)
    assert line.startswith(f"client_cpu.py: argument {args[0]}: must be a whole number >= 1"), line
    assert not list(tmp_path.glob("mrs-client-cpu-*"))


@pytest.mark.parametrize(
    ("script", "option", "value"),
    [
        ("flood.py", "--rounds", "0"),  # ZeroDivisionError after the run
        ("put_path.py", "--puts", "0"),  # ZeroDivisionError
        ("handover_cpu.py", "--rounds", "0"),  # ZeroDivisionError
        ("protection_cost.py", "--messages", "0"),  # ZeroDivisionError (--end-to-end)
        ("dlq_handler.py", "--letters", "0"),  # a server start failure, two tracebacks
        ("drain_resends.py", "--fill-s", "-1"),  # trio's ValueError inside a group
        ("saf_backlog_drain.py", "--backlog", "-3"),  # an AssertionError after a fill
        ("audit_report.py", "--runs", "0"),  # an empty table, exit 0, a journal left in /tmp
    ],
)
def test_benchmark_scripts_refuse_a_count_they_cannot_run_in_one_line(
    tmp_path: Path, script: str, option: str, value: str
) -> None:
    """Each of these, given a zero or negative count or length, started servers and
    ended in a Python traceback; now it is one usage line, exit 2, before anything
    starts."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), option, value, "--end-to-end"]
        if script == "protection_cost.py"
        else [sys.executable, str(ROOT / "benchmarks" / script), option, value],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_S_MAX,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert result.returncode == 2, result.stderr
    line = _one_line(result.stderr)
    assert line.startswith(f"{script}: argument {option}: must be"), line
    assert list(tmp_path.iterdir()) == []  # nothing was started or left
