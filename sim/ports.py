"""A TCP port for a server the tests, the simulator's real processes or a benchmark
are about to start.

Why not the OS's pick (`bind(("127.0.0.1", 0))`, then close): that port comes from
the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), the same range every
outgoing connection's local port comes from. Between the pick and the server's own
bind (seconds, when the server is a new Python process on a loaded machine), a
client connecting anywhere can take it, and the server fails to start with "address
in use" (a CI run's `test_security_auth`, two test workers side by side). A port
below the ephemeral range is never handed to an outgoing connection; it is taken only
if something binds it by number. So: a random port between PICK_PORT_LOW and the
range's start that binds now, and never the same port twice in one process.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

PICK_PORT_LOW = 20000
"""Lowest port picked: above the well-known and registered services' usual ports
(etcd 2379, RabbitMQ 5672, Redis 6379, peerbench's 4333/5679/6390)."""
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PICK_TRIES_MAX = 200

_picked: set[int] = set()
_random = random.SystemRandom()  # two processes forked with one seed still differ


def _ephemeral_start() -> int:
    """The first port of the ephemeral range (32768 where the file is unreadable:
    Linux's default, and what other systems mostly use as well)."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker_slice() -> tuple[int, int]:
    """(index, count): under pytest-xdist, each worker picks only the ports whose
    remainder by the workers' count is its own number. Two workers picked the same
    port now and then, and the second server to bind it did not start (a CI run's
    replicated nemesis: "replication = 127.0.0.1:23645: the port is in use"). Outside
    xdist, every port: (0, 1)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count_text = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count_text.isdigit():
        count = int(count_text)
        if count > 0:
            return int(worker[2:]) % count, count
    return 0, 1


def _binds(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now, outside the ephemeral range when there is
    room below it (else the OS's pick), not handed out before by this process."""
    high = _ephemeral_start()
    if high - PICK_PORT_LOW >= 1000:
        index, count = _worker_slice()
        for _ in range(PICK_TRIES_MAX):
            port = _random.randrange(PICK_PORT_LOW + count, high)
            port -= (port - PICK_PORT_LOW - index) % count  # this worker's ports only
            if port not in _picked and _binds(host, port):
                _picked.add(port)
                return port
    with socket.socket() as probe:
        probe.bind((host, 0))
        port = probe.getsockname()[1]
    _picked.add(port)
    return port
