"""A group's ops endpoints and `mrs status` while it starts and recovers, as an operator
meets them: real `mrs serve`, `mrs status` and `mrs web` processes, real sockets, real
LMDB, a slow disk made by the fault file (`SLOW <seconds>` on every commit's flush).

- A new group on a slow disk: its recovery ended (the ops ports served by the group's
  own loop, "metrics on ..." logged), then it committed its journals' incarnation on
  that loop before serving its client port, so for one slow commit the metrics and
  web ports held every request unanswered and `mrs status` said "did not answer ...
  is it running?". The incarnation is now written inside the recovery, while the
  ports answer 503 "recovering".
- `mrs web --config` (the bus page) showed a recovering group DOWN with "no answer
  within 3 s", where `mrs status` said RECOVERING with the group's line: the page now
  shows the state `mrs status` computed, and why.
- A group SIGKILLed mid-recovery is DOWN in one line (connection refused), not still
  RECOVERING, and no traceback.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from sim.ports import free_port
from tests.cli_helpers import run_mrs

pytestmark = pytest.mark.xdist_group("status_recovering_25")

WAIT_S = 60.0
"""Deadline for what a server process must do (a loaded 2-core CI machine)."""
SLOW_S = 6.0
"""How long each journal commit takes on the slow disk."""


@dataclass
class BusFile:
    config: Path
    fault: Path
    client_port: int
    metrics_port: int
    web_port: int


def _bus_file(directory: Path) -> BusFile:
    """One group with a fixed client port and both ops endpoints."""
    client, metrics, web = free_port(), free_port(), free_port()
    config = directory / "bus.toml"
    config.write_text(
        f'[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:{client}"\ndata_dir = "g1"\n'
        f'[group.ops]\nmetrics_listen = "127.0.0.1:{metrics}"\n'
        f'web_listen = "127.0.0.1:{web}"\n'
        '[[group.queue]]\nid = 10\nname = "ORDERS"\n'
    )
    return BusFile(config, directory / "fault", client, metrics, web)


class Served:
    """`mrs serve` with its log lines read as they come (events to wait for)."""

    def __init__(self, bus: BusFile) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mrs", "serve", "--config", str(bus.config), "--group", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "MRS_FAULT_FILE": str(bus.fault)},
            process_group=0,
        )
        self.lines: list[str] = []
        self._said = threading.Condition()
        for stream in (self.process.stdout, self.process.stderr):
            threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._said:
                self.lines.append(line.rstrip("\n"))
                self._said.notify_all()
        with self._said:
            self.lines.append("<closed>")
            self._said.notify_all()

    def wait_for(self, text: str) -> str:
        """The first line holding `text`; fails with the log when it never comes."""
        with self._said:
            found = self._said.wait_for(
                lambda: next((line for line in self.lines if text in line), None), WAIT_S
            )
        assert found, f"never said {text!r}: {self.lines}"
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=WAIT_S)


@contextmanager
def _serving(bus: BusFile) -> Iterator[Served]:
    server = Served(bus)
    try:
        yield server
    finally:
        bus.fault.write_text("")
        server.stop()


def _http_get(port: int, timeout_s: float) -> tuple[int, str]:
    """(status, first line) of GET /metrics, or (0, why) when it is not answered."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as got:
            return got.status, got.read().decode().split("\n")[0]
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode().split("\n")[0]
    except (TimeoutError, urllib.error.URLError) as error:
        return 0, f"no answer within {timeout_s} s ({error})"


def test_a_new_group_on_a_slow_disk_answers_once_its_endpoints_serve(tmp_path: Path) -> None:
    bus = _bus_file(tmp_path)
    bus.fault.write_text(f"SLOW {SLOW_S:g}")  # every commit of the start, on a new journal
    with _serving(bus) as server:
        server.wait_for("metrics on http://")  # recovery over: the group's loop serves it
        status, line = _http_get(bus.metrics_port, SLOW_S / 2)
        assert status == 200, line  # before: held through the incarnation's commit
        look = run_mrs("status", "--config", str(bus.config), "--group", "1", "--timeout", "2")
        assert look.returncode == 0, look.stderr  # before: "did not answer ... running?"
        assert "1 NYC  UP" in look.stdout, look.stdout
        server.wait_for("READY 127.0.0.1:")


def _chromium() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium is not None, "needs chromium (.ci/system-packages --tests installs it)"
    return chromium


def _state_shown(key: str) -> str:
    """A script: the text of the bus page's cell `key` ("" before the page fills it)."""
    return f"((document.querySelector('[data-key=\"{key}\"]') || {{}}).textContent || '')"


def test_the_bus_page_shows_a_recovering_group_as_status_does(tmp_path: Path) -> None:
    from tests.browser_cdp import Browser
    from tests.process.test_web_bus_admin import start_web, stop_web

    bus = _bus_file(tmp_path)
    bus.fault.write_text("SLOW 20")  # the recovery's commit (the boot epoch's seqs)
    with _serving(bus) as server:
        web, url = start_web(bus.config, "--timeout", "1")
        browser = Browser(_chromium())
        try:
            browser.open(url)
            # state and why read in one render (a loaded host's late ops answer makes
            # a later render DOWN): the first RECOVERING the page shows, with its why
            recovering = f"{_state_shown('1.state')} === 'RECOVERING'"
            browser.until(f"{recovering} && (window.shownWhy = {_state_shown('1.why')}, true)")
            why = browser.evaluate("window.shownWhy")  # before: the page said DOWN
            bus.fault.write_text("")  # the commits after this one at full speed
            server.wait_for("READY 127.0.0.1:")
            browser.until(f"{_state_shown('1.state')} === 'UP'")
        finally:
            browser.close()
            stop_web(web)
    assert why.startswith("recovering: group 1 (NYC) is opening its journals"), why


def test_a_group_killed_mid_recovery_is_down_in_one_line(tmp_path: Path) -> None:
    bus = _bus_file(tmp_path)
    bus.fault.write_text(f"SLOW {SLOW_S:g}")
    server = Served(bus)
    try:
        look = run_mrs("status", "--config", str(bus.config), "--group", "1", "--timeout", "1")
        while "connection refused" in look.stderr:  # before the bind: ask again
            look = run_mrs("status", "--config", str(bus.config), "--group", "1", "--timeout", "1")
        assert "is RECOVERING (recovering: group 1 (NYC)" in look.stderr, look.stderr
    finally:
        server.process.kill()
        server.process.wait(timeout=WAIT_S)
    look = run_mrs("status", "--config", str(bus.config), "--group", "1", "--timeout", "1")
    assert look.returncode == 1
    assert look.stderr == (
        f"mrs: group at 127.0.0.1:{bus.client_port} did not answer (connection refused: "
        "nothing listens there); is it running? (start it with `mrs serve`)\n"
    )
