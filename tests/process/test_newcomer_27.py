"""A newcomer following docs/getting-started.md, probed as real processes.

The most common first mistake: running the quickstart (or any program of one's own)
before the group's server is started, or with the wrong port. The program's error
must say why in words and what to do, as `mrs status` does for the same address.
Before: `mrs: LINK_DOWN: cannot connect to 127.0.0.1:PORT: all attempts to connect
to 127.0.0.1:PORT failed` (trio's text, the reason -- connection refused -- lost,
no advice).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from clients import ConnectionLost, connect_sync
from sim.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_the_quickstart_without_a_server_says_nothing_listens_and_what_to_do() -> None:
    address = f"127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / "quickstart.py"), address],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"mrs.errors.ConnectionLost: mrs: LINK_DOWN: cannot connect to {address}: "
        "connection refused: nothing listens there; is the group's server running? "
        "(start it with `mrs serve`)"
    ), done.stderr


def test_each_instance_says_its_own_reason() -> None:
    """A replicated group's addresses: each named with its reason, the advice once."""
    first, second = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    with pytest.raises(ConnectionLost) as lost:
        connect_sync(f"{first},{second}", "ORDERS", connect_timeout_s=1)
    assert lost.value.message == (
        f"cannot connect to {first},{second}: {first}: connection refused: nothing "
        f"listens there; {second}: connection refused: nothing listens there; is the "
        "group's server running? (start it with `mrs serve`)"
    )


def test_mrs_web_on_a_port_in_use_says_what_to_do(tmp_path: Path) -> None:
    """A second `mrs web` on 8100 said only `cannot listen (Address already in use)`,
    where `mrs serve` says what to do: now the same words (mrs.transport.bind_failure)."""
    from tests.process.test_web_bus_admin import _plain_bus

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "mrs", "web", "--config", str(_plain_bus(tmp_path)),
             "--listen", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"mrs: mrs web --listen 127.0.0.1:{port}: the port is in use by another process; "
        "stop it or change --listen\n"
    )
