"""A real single-member etcd, and a replicated group's `mrs serve --instance` processes:
the real-process harness of a replicated group (tests/etcd_helpers.py,
benchmarks/replication.py).

etcd runs on free ports with its data directory where the caller says; CI installs it
(.ci/system-packages --tests).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

from sim.ports import free_port
from sim.processes import OWN_PROCESS_GROUP, ServerStartError

ETCD_START_S = 20.0
INSTANCE_START_S = 30.0


class EtcdMissing(RuntimeError):
    """No `etcd` on PATH."""


class EtcdServer:
    """One etcd member on 127.0.0.1, data in `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.client_port = free_port()
        self.peer_port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.client_port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            raise EtcdMissing("etcd is not installed (.ci/system-packages --tests installs it)")
        log = open(self.directory / "etcd.log", "ab")  # noqa: SIM115 - the child's
        self.process = subprocess.Popen(
            [
                binary,
                "--name",
                "test",
                "--data-dir",
                str(self.directory / "etcd-data"),
                "--listen-client-urls",
                self.endpoint,
                "--advertise-client-urls",
                self.endpoint,
                "--listen-peer-urls",
                f"http://127.0.0.1:{self.peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{self.peer_port}",
                "--initial-cluster",
                f"test=http://127.0.0.1:{self.peer_port}",
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            process_group=OWN_PROCESS_GROUP,  # the harness stops it, not the terminal
        )
        log.close()
        deadline = time.monotonic() + ETCD_START_S
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(self.endpoint + "/health", timeout=1) as answer,
            ):
                if b'"true"' in answer.read():
                    return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        text = (self.directory / "etcd.log").read_text(errors="replace")
        raise ServerStartError(
            f"etcd did not start: see {self.directory / 'etcd.log'}\n"
            + text[-2000:]
            + etcd_fatal_line(text)  # last, for last_words: a panic's log ended in its stack
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def wipe(self) -> None:
        """SIGKILL it and delete its data: started again, it holds nothing (a lost
        member disk, or a member set rebuilt empty)."""
        self.stop()
        shutil.rmtree(self.directory / "etcd-data", ignore_errors=True)


def etcd_fatal_line(log: str) -> str:
    """What etcd said when it gave up, as a last line ("\ncreate wal error: no space
    left on device"), or "": its critical line (capnslog's ` C | `, zap's level fatal
    or panic, with the error). A panic's log ends in its goroutine stack, and `mrs demo`
    said "etcd did not start: go.etcd.io/etcd/main.go:28 +0x17"."""
    for line in reversed(log.splitlines()):
        if " C | " in line:
            return "\n" + line.split(" C | ", 1)[1].split(": ", 1)[-1].strip()
        if line.startswith("{") and ('"level":"fatal"' in line or '"level":"panic"' in line):
            with contextlib.suppress(ValueError):
                said = json.loads(line)
                if isinstance(said, dict):
                    error = said.get("error")
                    return "\n" + str(said.get("msg", "")) + (f": {error}" if error else "")
    return ""


def write_replicated_config(directory: Path, endpoint: str, queues: str, ttl_s: int = 3) -> Path:
    """A one-group bus of three instances (a, b, c) on free ports."""
    directory.mkdir(parents=True, exist_ok=True)
    instances = "".join(
        textwrap.dedent(f"""\
            [[group.instance]]
            name = "{name}"
            listen = "127.0.0.1:{free_port()}"
            replication = "127.0.0.1:{free_port()}"
            data_dir = "{name}"
            """)
        for name in ("a", "b", "c")
    )
    path = directory / "bus.toml"
    path.write_text(
        textwrap.dedent(f"""\
            [coordinator]
            etcd = ["{endpoint}"]
            lease_ttl_s = {ttl_s}
            prefix = "/mrs/{directory.name}"

            [[group]]
            id = 1
            name = "NYC"
            """)
        + instances
        + queues
    )
    return path


class InstanceProcess:
    """`mrs serve --instance NAME`; its stdout lines read by a thread, for `wait_for`."""

    def __init__(self, config_path: Path, name: str, group_id: int = 1) -> None:
        self.config_path = config_path
        self.name = name
        self.group_id = group_id
        self.process: subprocess.Popen | None = None
        self.lines: queue.Queue[str] = queue.Queue()
        self.address = ""
        """HOST:PORT from its last READY line (`wait_active`)."""

    def start(self) -> None:
        log = open(self.config_path.parent / f"{self.name}.log", "ab")  # noqa: SIM115
        self.lines = queue.Queue()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mrs", "serve", "--config", str(self.config_path)]
            + ["--group", str(self.group_id), "--instance", self.name],
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ),
            process_group=OWN_PROCESS_GROUP,  # the harness stops it, not the terminal
        )
        log.close()
        threading.Thread(target=self._read, args=(self.process, self.lines), daemon=True).start()

    @staticmethod
    def _read(process: subprocess.Popen, lines: queue.Queue[str]) -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            lines.put(raw.decode(errors="replace").strip())
        lines.put("EXITED")

    def wait_for(self, prefix: str, timeout_s: float = INSTANCE_START_S) -> str:
        """The next stdout line starting with `prefix` (AssertionError if none comes)."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(remaining, 0.01))
            except queue.Empty:
                raise AssertionError(f"{self.name}: no {prefix!r} in {timeout_s} s") from None
            if line.startswith(prefix):
                return line
            if line == "EXITED":
                tail = (self.config_path.parent / f"{self.name}.log").read_text()[-3000:]
                raise AssertionError(f"{self.name} exited waiting for {prefix!r}:\n{tail}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def pause(self) -> None:
        """SIGSTOP: a frozen process (its connections stay open, nothing answers)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_active(processes: dict[str, InstanceProcess], timeout_s: float) -> str:
    """The name of the instance that prints READY next (the new active)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name, process in processes.items():
            if process.process is None or process.process.poll() is not None:
                continue
            try:
                line = process.lines.get(timeout=0.05)
            except queue.Empty:
                continue
            if line.startswith("READY"):
                process.address = line.split()[1]
                return name
    raise AssertionError(f"no instance became active within {timeout_s} s")
