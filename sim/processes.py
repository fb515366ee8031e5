"""Real `mrs serve` processes for tests, the demo and fault scenarios.

A `GroupProcess` starts one group's server as a child process, waits for its READY
line (an event, not a sleep), and can stop it gracefully (SIGTERM) or kill it
(SIGKILL) and start it again on the same data directory.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

READY_TIMEOUT_S = 30.0
LOG_TAIL_BYTES = 4096
"""How much of a dead server's log `death_words` reads for its last line."""
OWN_PROCESS_GROUP = 0
"""`Popen(process_group=0)`: a server started here is its own process group, so a
terminal's Ctrl-C (sent to every process of the foreground group) reaches only the
harness, which stops its servers in order. Sharing the harness's group, a server
being restarted by `mrs sim run` died of that SIGINT before its READY line, and the
run ended "group 1 did not start: <its last log line>", exit 1, instead of
"interrupted by SIGINT", exit 130 (two tries in three)."""


class ServerStartError(RuntimeError):
    """A server (or etcd) that did not start; its text is a first line and the tail
    of the process's log."""

    def last_words(self) -> str:
        """ "group 1 did not start: <the last line of its log>" (the first line when
        no log came with it): the one line a command prints for it, since the log is
        often in a temporary directory that is removed next."""
        first, *log = str(self).splitlines()
        said = [line.strip() for line in log if line.strip()]
        if not said:
            return first
        return f"{first.split(' did not start', 1)[0]} did not start: {said[-1]}"


def first_start_failure(error: BaseException) -> ServerStartError | None:
    """The first ServerStartError in `error` or the exception groups around it (a trio
    nursery's), or None."""
    if isinstance(error, ServerStartError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = first_start_failure(inner)
            if found is not None:
                return found
    return None


@dataclass
class GroupProcess:
    config_path: Path
    group_id: int
    log_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None
    address: str = ""
    ended_on_purpose: subprocess.Popen | None = None
    """The process `kill` or `terminate` ended (so its exit is no finding)."""

    def start(self) -> str:
        """Start the server and return HOST:PORT once it listens."""
        assert self.process is None or self.process.poll() is not None, "already running"
        log_path = self.log_path or self.config_path.parent / f"group{self.group_id}.log"
        log_file = open(log_path, "ab")  # noqa: SIM115 - handed to the child process
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mrs",
                "serve",
                "--config",
                str(self.config_path),
                "--group",
                str(self.group_id),
            ],
            stdout=subprocess.PIPE,
            stderr=log_file,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env},
            process_group=OWN_PROCESS_GROUP,
        )
        log_file.close()
        line = self._ready_line()
        if not line.startswith("READY "):
            self.kill()
            tail = log_path.read_text(errors="replace")[-2000:]
            raise ServerStartError(f"group {self.group_id} did not start: {line!r}\n{tail}")
        self.address = line.split(" ", 1)[1]
        return self.address

    def _ready_line(self) -> str:
        """The server's first stdout line, or "" if none comes in READY_TIMEOUT_S."""
        readable, _, _ = select.select([self.process.stdout], [], [], READY_TIMEOUT_S)
        if not readable:
            return ""
        return self.process.stdout.readline().decode(errors="replace").strip()

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs; only what was committed survives."""
        if self.process is not None and self.process.poll() is None:
            self.ended_on_purpose = self.process
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait for a graceful exit; returns the exit code."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.ended_on_purpose = self.process
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout_s)

    @property
    def died_unbidden(self) -> bool:
        """The server exited and neither `kill` nor `terminate` ended it: it crashed
        (a bug, a malformed peer's bytes, the OOM killer, someone's `kill`). A
        scenario must say so: the nemesis's next crash restarted such a group without a
        word, and one that stayed down showed as lost and stuck messages, blamed on the
        journals, after four minutes of waiting for its links to settle."""
        process = self.process
        return (
            process is not None
            and process is not self.ended_on_purpose
            and process.poll() is not None
        )

    def death_words(self) -> str:
        """ "group N exited unbidden (code C): <the last line of its log>"."""
        assert self.process is not None
        code = self.process.returncode
        how = f"code {code}"
        if code < 0:
            with contextlib.suppress(ValueError):  # a number no name is known for
                how = f"signal {signal.Signals(-code).name}"
        words = f"group {self.group_id} exited unbidden ({how})"
        log_path = self.log_path or self.config_path.parent / f"group{self.group_id}.log"
        try:
            tail = log_path.read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace")
        except OSError:
            tail = ""
        said = [line.strip() for line in tail.splitlines() if line.strip()]
        return f"{words}: {said[-1]}" if said else words

    def restart(self) -> str:
        self.kill()
        return self.start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def write_single_group_config(
    directory: Path, queues: str = "", group_extra: str = "", limits: str = ""
) -> Path:
    """A one-group bus listening on an ephemeral port, for tests and the demo."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bus.toml"
    text = textwrap.dedent(f"""\
        [[group]]
        id = 1
        name = "NYC"
        listen = "127.0.0.1:0"
        data_dir = "g1"
        {group_extra}
        [group.limits]
        {limits}
        """) + textwrap.dedent(queues)
    path.write_text(text)
    return path
