"""Helpers for client-library tests: a group server on a fixed port, so a restarted
server is found again at the same address (as a real deployment's would be)."""

from __future__ import annotations

import socket
from pathlib import Path

from sim.processes import GroupProcess, write_single_group_config
from tests.conftest import STANDARD_QUEUES


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FixedPortServer:
    """One group (the standard queues) on a port that survives restarts; not started."""

    def __init__(self, directory: Path, group_extra: str = "pcj_default = true") -> None:
        self.port = free_port()
        path = write_single_group_config(directory, queues=STANDARD_QUEUES, group_extra=group_extra)
        path.write_text(path.read_text().replace("127.0.0.1:0", f"127.0.0.1:{self.port}"))
        self.process = GroupProcess(path, 1)
        self.address = f"127.0.0.1:{self.port}"

    def start(self) -> str:
        assert self.process.start() == self.address
        return self.address

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        if self.process.running:
            self.process.terminate()
