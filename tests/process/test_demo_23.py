# ruff: noqa: F811  (the fixture `reaped` is imported, then named as an argument)
"""Probes of `mrs demo`'s failover chapter (mrs.tools.demo_failover) where a newcomer's
machine differs from CI's: a scratch disk too small for etcd's WAL or for the journal
reserve, and a `--messages` that does not divide among the chapter's senders.

The whole demo runs in tests/process/test_demo.py; these run the chapter alone, on a
real tmpfs (a real ENOSPC, a real journal reserve), with real etcd and instances.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from mrs.exit_status import CommandError
from mrs.tools import demo_failover
from sim.etcd import EtcdServer, etcd_fatal_line
from sim.processes import ServerStartError
from tests.disk_helpers import mounted_tmpfs
from tests.etcd_helpers import skip_without_etcd
from tests.process.test_sim_probes import (  # the /proc helpers and clean-up fixture
    _alive,
    _command_line,
    _descendants,
    _wait_for,
    reaped,  # noqa: F401 (a fixture)
)

ETCD_WAL_BYTES = 64 * 1024 * 1024
"""etcd 3.4 preallocates its first WAL file: a disk with less room does not start it."""
STOPPED_S_MAX = 15.0
"""How long a Ctrl-C may take to stop the chapter (it took the wait's 60 s)."""
HEALTHY_ONLY_ETCD = """\
    #!{python}
    # answers etcd's /health and refuses the rest: no instance ever becomes active
    import sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    url = sys.argv[sys.argv.index("--listen-client-urls") + 1]
    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b'{{"health":"true"}}')
        def do_POST(self):
            self.send_response(503); self.end_headers()
        def log_message(self, *args):
            pass
    HTTPServer((host, int(port)), Handler).serve_forever()
    """
CHAPTER_ALONE = """\
    import sys
    from pathlib import Path
    from mrs.tools.cli_support import run_stoppable
    from mrs.tools.console import ToolConsole
    from mrs.tools.demo_failover import run_failover_chapter
    chapter = lambda: run_failover_chapter(ToolConsole(), Path(sys.argv[1]), 20)
    sys.exit(run_stoppable("mrs demo", chapter, lambda: "every process it started is stopped"))
    """


@pytest.fixture
def no_room_for_etcd(tmp_path: Path) -> Iterator[Path]:
    """A disk smaller than etcd's first WAL file."""
    yield from mounted_tmpfs(tmp_path / "disk", "40m")


@pytest.fixture
def under_the_reserve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A disk with less room than the journal reserve (50 MiB) for the instances, and
    etcd's data on the ordinary disk beside it. With etcd on the small disk too the
    test raced etcd: its WAL pipeline preallocates the next 64 MiB file while its
    first snapshot commits, and in CI the snapshot lost (ENOSPC at 110 MiB and 100)."""
    etcd_home = tmp_path / "etcd"
    etcd_home.mkdir()
    monkeypatch.setattr(demo_failover, "EtcdServer", lambda _directory: EtcdServer(etcd_home))
    yield from mounted_tmpfs(tmp_path / "disk", "40m")


def _chapter(directory: Path, messages: int) -> tuple[int, str]:
    if shutil.which("etcd") is None:
        skip_without_etcd("the failover chapter needs etcd")
    out = io.StringIO()
    console = Console(file=out, width=400, color_system=None)
    try:
        return demo_failover.run_failover_chapter(console, directory, messages), out.getvalue()
    finally:
        left = [line for line in map(_command_line, _pids()) if str(directory) in line]
        assert not left, f"still running after the chapter: {left}"


def _pids() -> list[int]:
    return [
        int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and _alive(int(e.name))
    ]


def test_a_chapter_whose_orders_are_refused_stops_in_one_line(under_the_reserve: Path) -> None:
    """On a scratch disk under the journal reserve every order's PSB said MRS_RES_EXH
    (status SUCCESS, nothing stored); the chapter counted each as acknowledged and
    printed "lost 600 ... FAILED: lost", a broken guarantee that was a full disk.
    Now an order is acknowledged only when stored, and a chapter whose orders are
    all refused stops as the story does: one line naming the refusal and the
    server's own warning."""
    with pytest.raises(CommandError) as stopped:
        _chapter(under_the_reserve / "failover", 40)
    etcd_home = str(under_the_reserve.parent / "etcd")
    assert not [line for line in map(_command_line, _pids()) if etcd_home in line]
    line = str(stopped.value)
    assert "\n" not in line and "lost" not in line, line
    assert line.startswith(
        "the demo stopped in chapter 7: LDN acknowledged 0 of 40 orders as stored and "
        "refused the rest (40 MRS_RES_EXH); its log: "
    ), line
    assert "under the journal reserve" in line, line


def test_etcd_that_cannot_start_is_named_by_its_reason(no_room_for_etcd: Path) -> None:
    """On a scratch disk with no room for its WAL etcd panics, and its log ends in
    the goroutine stack: the demo's line was "etcd did not start:
    go.etcd.io/etcd/main.go:28 +0x17". It is what etcd said when it gave up."""
    assert shutil.disk_usage(no_room_for_etcd).free < ETCD_WAL_BYTES
    with pytest.raises(ServerStartError) as failed:
        _chapter(no_room_for_etcd / "failover", 40)
    assert failed.value.last_words() == (
        "etcd did not start: create wal error: no space left on device"
    ), str(failed.value)[-600:]


def test_etcd_fatal_line_reads_both_log_formats() -> None:
    """etcd 3.4 (Debian's) logs capnslog text; 3.5 logs zap JSON. Either way, the
    line it gave up with, and nothing for a log without one."""
    capnslog = (
        "2026-12-06 10:54:25.694858 I | etcdmain: setting maximum number of CPUs to 2\n"
        "2026-12-06 10:54:25.698356 C | etcdmain: listen tcp 127.0.0.1:23795: bind: "
        "address already in use\n"
    )
    assert etcd_fatal_line(capnslog) == "\nlisten tcp 127.0.0.1:23795: bind: address already in use"
    zap = (
        '{"level":"info","msg":"configuring peer listeners"}\n'
        '{"level":"fatal","msg":"discovery failed","error":"listen tcp: address already in use"}\n'
        "goroutine 1 [running]:\n"
    )
    assert etcd_fatal_line(zap) == "\ndiscovery failed: listen tcp: address already in use"
    assert etcd_fatal_line("goroutine 1 [running]:\nmain.main()\n") == ""


@pytest.mark.parametrize("orders", [1, 3, 5, 6, 599, 600])
def test_the_chapter_sends_the_orders_it_says(orders: int) -> None:
    """`--messages 3` printed "a client sends 3 orders" and sent none (orders // 4
    tasks each; 596 for 599 said); the tasks' shares add up to the number said."""
    shares = [demo_failover._task_orders(orders, task) for task in range(demo_failover.TASKS)]
    assert sum(shares) == orders and max(shares) - min(shares) <= 1, shares


def test_ctrl_c_while_the_chapter_waits_for_an_active_instance_stops_it_at_once(
    tmp_path: Path, reaped: set[int]
) -> None:
    """Ctrl-C while the chapter waited in a thread for an instance's READY (the
    instances coming up, a failover) did nothing until that wait ended: 2 to 4 s
    on an idle machine, the wait's 60 s when no instance becomes active, and the
    demo printed "took over" after the Ctrl-C. Here no instance can become active
    (an etcd that answers only /health): the Ctrl-C stops it at once, one line,
    exit 130, every instance gone."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "etcd"
    fake.write_text(textwrap.dedent(HEALTHY_ONLY_ETCD).format(python=sys.executable))
    fake.chmod(0o755)
    directory = tmp_path / "failover"
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHAPTER_ALONE), str(directory)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )
    try:
        _wait_for(lambda: _instances_up(directory) and bool(_logged(directory)), "3 instances")
        children = _descendants(process.pid)
        reaped |= children
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=STOPPED_S_MAX)
    finally:
        reaped |= _descendants(process.pid)
        process.kill()
        process.wait()
    assert process.returncode == 130, err
    assert err.strip() == "mrs demo: interrupted by SIGINT; every process it started is stopped"
    assert not [pid for pid in children if _alive(pid)]


def _instances_up(directory: Path) -> bool:
    lines = map(_command_line, _pids())
    return sum(1 for line in lines if "--instance" in line and str(directory) in line) == 3


def _logged(directory: Path) -> list[str]:
    """The instances' complaints about the coordinator: each is up and waiting."""
    return [
        name
        for name in demo_failover.NAMES
        if "coordinator unavailable" in _read(directory / f"{name}.log")
    ]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
