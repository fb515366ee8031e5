# ruff: noqa: F811  (the fixtures `reaped` and `small_disk` are imported, then named as arguments)
"""Probes of the newcomer's and the tester's commands (`mrs demo`, `mrs bench`, `mrs sim
swarm`, `mrs serve --ready-file`) as people stop and misuse them: a signal at any
moment, a disk short of space, a server that cannot start, a value that would run
forever.

What each guards: a command stopped by `kill`, `timeout`, a cancelled CI job or a
closed terminal leaves no `mrs serve`, etcd or temporary directory behind and says in
one line what stopped it; a command that cannot go on says why in one line instead
of waiting forever or printing "unexpected error"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.process.test_cli_errors import small_disk  # noqa: F401 (a fixture)
from tests.process.test_sim_probes import (  # the same /proc helpers and clean-up fixture
    POLL_S,
    WAIT_S_MAX,
    _alive,
    _command_line,
    _descendants,
    _wait_for,
    reaped,  # noqa: F401 (a fixture)
)

SWARM_SEEDS = 100_000
"""More seeds than the swarm runs before the signal, on any host."""


def _start_mrs(*args: str, tmp: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`mrs ARGS` as a terminal would start it (SIGINT at its default), its temporary
    directories made in `tmp`, stdout and stderr apart."""
    return subprocess.Popen(
        [sys.executable, "-m", "mrs", *args],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp), **(env or {})},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _stop(
    process: subprocess.Popen, signum: signal.Signals, reaped: set[int]
) -> tuple[int, str, str, set[int]]:
    """Send `signum` once what it started is seen; its exit code, stdout, stderr and
    the pids of its children still alive a moment after it exited."""
    children = set(_descendants(process.pid))
    reaped |= children
    process.send_signal(signum)
    out, err = process.communicate(timeout=WAIT_S_MAX)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return process.returncode, out, err, {pid for pid in children if _alive(pid)}


def _servers(pid: int) -> list[str]:
    return [line for line in map(_command_line, _descendants(pid)) if " serve " in line]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signalled_demo_stops_its_servers_and_removes_its_scratch(
    tmp_path: Path, reaped: set[int], signum: signal.Signals
) -> None:
    """SIGTERM (`kill`, `timeout`) and SIGHUP (a closed terminal) ended `mrs demo` at
    once: both `mrs serve` processes ran on, reparented to init, and the scratch
    directory stayed in /tmp; Ctrl-C stopped them but said nothing. Now each stops
    every process, removes the temporary directory, names the signal in one line and
    exits 128 + the signal."""
    process = _start_mrs("demo", "--messages", "100000", tmp=tmp_path)
    _wait_for(lambda: len(_servers(process.pid)) == 2, "the demo's two servers")
    code, _, err, left = _stop(process, signum, reaped)
    assert code == 128 + signum, err
    line = _one_line(err)
    assert line.startswith(f"mrs demo: interrupted by {signum.name}; ") and "stopped" in line
    assert not left, f"still running: {left}"
    assert not _using(tmp_path)
    assert not list(tmp_path.glob("mrs-demo-*")), list(tmp_path.iterdir())


def _using(directory: Path) -> list[str]:
    """Every live process whose command line names `directory` (an orphan of the
    command, whoever its parent is now)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _alive(int(entry.name)):
            line = _command_line(int(entry.name))
            if str(directory) in line and "pytest" not in line:
                found.append(line)
    return found


def test_a_demo_interrupted_during_its_spark_audit_says_so_in_one_line(
    tmp_path: Path, reaped: set[int]
) -> None:
    """Ctrl-C while Spark audited the journals went through pyspark's own handler,
    which calls into the JVM from inside the handler: py4j logged its tracebacks
    (30 lines) before the demo's line, and an mrs-demo-audit-* directory with only
    spark.log in it stayed in /tmp."""
    process = _start_mrs("demo", "--messages", "50", tmp=tmp_path)
    assert process.stdout is not None
    for line in process.stdout:
        if "8. Audit" in line:
            break
    else:
        raise AssertionError("the demo ended before its audit")

    def spark_job_running() -> bool:  # Python workers run under a job
        return any("pyspark.daemon" in _command_line(each) for each in _descendants(process.pid))

    _wait_for(spark_job_running, "a Spark job of the audit")
    code, _, err, left = _stop(process, signal.SIGINT, reaped)
    assert code == 130, err
    assert _one_line(err).startswith("mrs demo: interrupted by SIGINT; ")
    assert not left, f"still running: {left}"
    assert not list(tmp_path.glob("mrs-demo-*")), list(tmp_path.iterdir())


def test_a_demo_whose_servers_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    """A server that did not start was "unexpected error: ServerStartError: ... (run
    with -v for the traceback)", as if the demo had a bug; it is the server's own
    last words, and the temporary directory is removed."""
    process = _start_mrs("demo", "--messages", "10", tmp=tmp_path, env={"MRS_WRITER": "bogus"})
    _, err = process.communicate(timeout=WAIT_S_MAX)
    assert process.returncode == 1, err
    line = _one_line(err)
    assert "unexpected error" not in line and "group 1 did not start" in line, line
    assert "MRS_WRITER: 'bogus' is not one of" in line
    assert not list(tmp_path.glob("mrs-demo-*"))


def test_a_demo_on_a_disk_short_of_space_says_so_instead_of_waiting_forever(
    small_disk: Path, reaped: set[int]
) -> None:
    """With its scratch directory on a disk under the journal reserve, NYC refused
    every order (MRS_RES_EXH) and the demo waited forever at step 1 for
    acknowledgements that could not come. Now it stops in one line naming the
    refusal and the server's own warning, with nothing left running."""
    process = _start_mrs("demo", "--messages", "200", tmp=small_disk)
    try:
        _, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        reaped |= set(_descendants(process.pid))
        process.kill()
        process.communicate()
        raise AssertionError("mrs demo still waiting after 60 s on a disk short of space") from None
    assert process.returncode == 1, err
    line = _one_line(err)
    assert "NYC acknowledged 0 of 200 orders and refused the rest (200 MRS_RES_EXH)" in line
    assert "under the journal reserve" in line
    assert not list(small_disk.glob("mrs-demo-*"))


def test_a_signalled_bench_stops_its_servers_and_removes_its_scratch(
    tmp_path: Path, reaped: set[int]
) -> None:
    """SIGTERM ended `mrs bench` at once: the `mrs serve` it measured ran on and its
    --scratch directory (documented as removed afterwards) stayed."""
    scratch = tmp_path / "bench"
    process = _start_mrs(
        *("bench", "--seconds", "2", "--clients", "1", "--skip-cross-group"),
        *("--scratch", str(scratch)),
        tmp=tmp_path,
    )
    _wait_for(lambda: len(_servers(process.pid)) == 1, "the bench's server")
    code, _, err, left = _stop(process, signal.SIGTERM, reaped)
    assert code == 128 + signal.SIGTERM, err
    assert "mrs bench: interrupted by SIGTERM; its servers are stopped" in err
    assert "Traceback" not in err
    assert not left, f"still running: {left}"
    assert not scratch.exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--seconds", "nan"], "> 0, got nan"),
        (["--seconds", "inf"], "> 0, got inf"),
        (["--body-bytes", "2000000"], "message_bytes_max"),
    ],
    ids=["nan", "inf", "body"],
)
def test_a_bench_that_would_run_forever_or_measure_nothing_is_refused(
    tmp_path: Path, args: list[str], words: str
) -> None:
    """`--seconds nan` and `inf` measured forever; a body over the servers'
    message_bytes_max had every put refused and the bench reported 0 puts/s with
    exit 0. Each is a usage error before anything starts."""
    scratch = tmp_path / "bench"
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "bench", *args, "--scratch", str(scratch)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    line = _one_line(result.stderr)
    assert line.startswith("mrs bench: ") and words in line, line
    assert not scratch.exists()


def test_serve_refuses_a_ready_file_it_cannot_write_before_starting(tmp_path: Path) -> None:
    """An unwritable --ready-file was found only after the start: the server committed
    a new epoch, printed READY (which a harness takes for "up"), then exited 1."""
    config = tmp_path / "bus.toml"
    config.write_text('[[group]]\nid = 1\nname = "A"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n')
    for ready in (tmp_path / "no" / "such" / "dir" / "ready", tmp_path):
        result = subprocess.run(
            [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", "1"]
            + ["--ready-file", str(ready)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2, result.stderr
        assert result.stdout == ""  # no READY
        assert _one_line(result.stderr).startswith(f"mrs: --ready-file {ready}: cannot write")
    assert not (tmp_path / "g1").exists()  # nothing was started or committed


def test_two_scenarios_given_one_scratch_at_once_do_not_share_it(
    tmp_path: Path, reaped: set[int]
) -> None:
    """Both runs passed the check that --scratch holds no earlier bus (neither had
    made it yet); the second rewrote the bus file with its own ports under the first,
    which then failed or hung until killed. Now one runs and the other is refused in
    one line."""
    scratch = tmp_path / "scratch"
    args = ("sim", "run", "mixed", "--seconds", "1", "--scratch", str(scratch))
    runs = [_start_mrs(*args, tmp=tmp_path), _start_mrs(*args, tmp=tmp_path)]
    results = []
    for process in runs:
        try:
            out, err = process.communicate(timeout=WAIT_S_MAX)
        except subprocess.TimeoutExpired:
            for each in runs:
                reaped |= set(_descendants(each.pid))
                each.kill()
            raise AssertionError("a scenario of 1 s still running after 120 s") from None
        results.append((process.returncode, out, err))
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, _, err in results if code == 2)
    assert f"--scratch {scratch}" in _one_line(refused)
