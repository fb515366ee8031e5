"""Messages given back to a queue, and a group's answers while it recovers, as an
application developer and an operator meet them: real `mrs serve` processes, real
sockets, real LMDB.

- A client that closes with read-ahead it never handed to a get gives it back
  (GiveBack); a producer filled the queue meanwhile, so the queue is over its
  messages_max. Nothing given back is lost; every new put is refused EXCEEDQUOTA until
  gets take the queue back under its bound, and `mrs status` says on the queue's row
  that it is over (before: nothing on the row, 7 pending of 4).
- A group whose recovery is long (a slow disk: the fault file's SLOW on the boot
  epoch's commit) answers its metrics and web endpoints at once with 503 "recovering"
  (before: the scrape hung until it timed out), `mrs status --config` shows it
  RECOVERING (before: DOWN, "no answer within 1 s"), and an application that
  connects meanwhile is held and served once recovery ends.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, MrsError, NoMoreMessages, Status, connect, connect_sync
from sim.ports import free_port
from sim.processes import GroupProcess, write_single_group_config
from tests.cli_helpers import run_mrs
from tests.conftest import Bus

pytestmark = pytest.mark.xdist_group("give_back_24b")

WAIT_S = 30.0
"""Deadline for what the server process must do (a loaded 2-core CI machine)."""
MESSAGES_MAX = 4
RECOVERY_SLOW_S = 8
"""How long the recovery's commit takes: the endpoints and `mrs status` are asked within it."""
BOUNDED_QUEUES = f"""
[[group.queue]]
id = 20
name = "BOUNDED"
messages_max = {MESSAGES_MAX}
[[group.queue]]
id = 16
name = "SENDER2"
"""


async def _put(address: str, bodies: list[bytes]) -> list[Status]:
    """WF_MEM puts to BOUNDED; each one's delivery status (EXCEEDQUOTA when refused)."""
    statuses = []
    async with connect(address, "SENDER2") as sender:
        for body in bodies:
            psb = await sender.put(body, "BOUNDED", delivery=DeliveryMode.WF_MEM)
            statuses.append(psb.delivery_status)
    return statuses


async def _fill_while_read_ahead_is_lent(address: str) -> list[bytes]:
    """The queue full, a reader takes one and reads the rest ahead, a producer fills
    the queue again meanwhile, and the reader closes (giving its read-ahead back)."""
    first = [b"m%d" % number for number in range(MESSAGES_MAX)]
    assert await _put(address, first) == [Status.UNATTACHEDQ] * MESSAGES_MAX
    async with connect(address, "BOUNDED") as reader:
        assert (await reader.get(timeout=WAIT_S)).body == b"m0"
        assert [message.body for message in reader.held] == first[1:]  # lent, not counted
        second = [b"m%d" % number for number in range(MESSAGES_MAX, 2 * MESSAGES_MAX)]
        assert await _put(address, second) == [Status.ENQUEUED] * MESSAGES_MAX
    return first[1:] + second


async def _take(address: str, count: int) -> list[bytes]:
    async with connect(address, "BOUNDED", read_ahead_max=0) as reader:
        return [(await reader.get(timeout=WAIT_S)).body for _ in range(count)]


def _bounded_row(address: str) -> dict:
    result = run_mrs("status", "--address", address, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["queues"]["1.20"]


def test_given_back_messages_are_kept_and_new_puts_refused_until_under(make_bus) -> None:
    bus: Bus = make_bus(queues=BOUNDED_QUEUES)
    waiting = trio.run(_fill_while_read_ahead_is_lent, bus.address)
    row = _bounded_row(bus.address)
    assert row["pending"] == 2 * MESSAGES_MAX - 1  # every one given back waits again
    assert "7 messages, messages_max=4" in row["over_bound"], row
    table = run_mrs("status", "--address", bus.address)
    assert "over bound: holds 7 messages" in " ".join(table.stdout.split()), table.stdout
    refused = trio.run(_put, bus.address, [b"late 1"])
    assert refused == [Status.EXCEEDQUOTA]
    # Still over after three gets (4 left = messages_max): refused; one more: room.
    assert trio.run(_take, bus.address, 3) == waiting[:3]
    assert "over_bound" not in _bounded_row(bus.address)
    assert trio.run(_put, bus.address, [b"late 2"]) == [Status.EXCEEDQUOTA]
    assert trio.run(_take, bus.address, 1) == waiting[3:4]
    assert trio.run(_put, bus.address, [b"late 3"]) == [Status.UNATTACHEDQ]  # stored: room
    rest = trio.run(_take, bus.address, MESSAGES_MAX)
    assert rest == [*waiting[4:], b"late 3"]  # none lost, in order, nothing refused kept
    with (
        connect_sync(bus.address, "BOUNDED", read_ahead_max=0) as reader,
        pytest.raises(MrsError) as empty,
    ):
        reader.get(timeout=0.5)
    assert isinstance(empty.value, NoMoreMessages) or empty.value.status == Status.TIMEOUT


# ------------------------------------------------------------ a long recovery
def _recovering_group(directory: Path) -> tuple[Path, Path, int, int, str]:
    """A group with metrics and web endpoints whose journal commits are slow (the
    fault file, read at each commit): (config, fault file, metrics port, web port,
    client address)."""
    metrics_port, web_port, client_port = free_port(), free_port(), free_port()
    ops = (
        f'[group.ops]\nmetrics_listen = "127.0.0.1:{metrics_port}"\n'
        f'web_listen = "127.0.0.1:{web_port}"'
    )
    config = write_single_group_config(directory, queues=BOUNDED_QUEUES, group_extra=ops)
    address = f"127.0.0.1:{client_port}"
    config.write_text(config.read_text().replace("127.0.0.1:0", address))
    fault = directory / "fault"
    return config, fault, metrics_port, web_port, address


def _wait_bound(port: int) -> None:
    """Until the port takes connections: the server binds it first thing, and another
    process's bind gives this one no event to wait on, so it is polled."""
    deadline_s = time.monotonic() + WAIT_S
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline_s, f"port {port} never bound"
            time.sleep(0.05)


def _http_get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of a GET that must be answered within 5 s."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _attach_during_recovery(address: str, attached: list[str]) -> None:
    """An application connecting while the group recovers: held, then served."""
    with connect_sync(address, "BOUNDED", connect_timeout_s=WAIT_S) as client:
        attached.append(str(client.queue))


def test_a_recovering_group_says_so_on_its_endpoints_and_in_status(tmp_path: Path) -> None:
    config, fault, metrics_port, web_port, address = _recovering_group(tmp_path)
    fault.write_text(f"SLOW {RECOVERY_SLOW_S}")  # the boot epoch's commit, in recovery
    server = GroupProcess(config, 1, env={"MRS_FAULT_FILE": str(fault)})
    starting = threading.Thread(target=server.start)
    starting.start()
    attached: list[str] = []
    application = threading.Thread(target=_attach_during_recovery, args=(address, attached))
    try:
        _wait_bound(metrics_port)
        application.start()
        status, body = _http_get(metrics_port, "/metrics")
        assert (status, body.split(":")[0]) == (503, "recovering"), body
        assert body.count("\n") == 1 and "group 1 (NYC)" in body
        status, body = _http_get(web_port, "/")
        assert (status, body.split(":")[0]) == (503, "recovering"), body
        look = run_mrs("status", "--config", str(config), "--timeout", "1", "--json")
        assert look.returncode == 1, look.stderr
        view = json.loads(look.stdout)["groups"][0]
        assert (view["state"], view["recovering"][:10]) == ("RECOVERING", "recovering"), view
        one = run_mrs("status", "--config", str(config), "--group", "1", "--timeout", "1")
        assert "is RECOVERING (recovering: group 1 (NYC)" in one.stderr, one.stderr
        assert not attached  # held: the group serves no client before it has recovered
    finally:
        fault.write_text("")  # the commits after recovery at full speed
        starting.join()
        if application.ident is not None:
            application.join()
    try:
        assert attached == ["1.20"]  # the held connection was served once it had recovered
        assert _http_get(metrics_port, "/metrics")[0] == 200
        assert run_mrs("status", "--config", str(config), "--json").returncode == 0
    finally:
        server.terminate()
