"""A group's resources under hostile or careless clients, and its ops endpoints: pollers
of the status, a bad `mrs web --listen`, descriptors running out, slow and idle
connections, absurd Hellos. Real `mrs serve` and `mrs web` processes, real TCP, real
LMDB files."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, QuotaExceeded, Uma, connect_sync
from mrs.config.bus import load_config
from mrs.config.schema import ConfigError
from mrs.exit_status import EXIT_USAGE
from mrs.limits import STATUS_BUILD_INTERVAL_S
from sim.ports import free_port
from tests.conftest import STANDARD_QUEUES, Bus
from tests.process.test_flood_limits import _accept_queue_length

POLLERS = 4
FLOOD_S = 1.0


def _get(port: int, path: str) -> bytes:
    """One GET on a new connection: the body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return body


def _flood(port: int, path: str, stamp) -> tuple[set, int, float]:
    """POLLERS threads ask `path` in a loop for FLOOD_S: (the distinct build stamps
    seen, answers, seconds the flood took)."""
    stamps: set = set()
    answers = [0]
    lock = threading.Lock()
    end_s = time.monotonic() + FLOOD_S

    def poll() -> None:
        while time.monotonic() < end_s:
            seen = stamp(_get(port, path))
            with lock:
                stamps.add(seen)
                answers[0] += 1

    started_s = time.monotonic()
    threads = [threading.Thread(target=poll) for _ in range(POLLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return stamps, answers[0], time.monotonic() - started_s


def _uptime_of_page(body: bytes) -> float:
    return json.loads(body)["groups"][0]["status"]["uptime_s"]


def _uptime_of_scrape(body: bytes) -> float:
    found = re.search(rb"^mrs_uptime_seconds\{[^}]*\} (\S+)$", body, re.MULTILINE)
    assert found, body[:500]
    return float(found.group(1))


def _ops_bus(make_bus) -> tuple[Bus, int, int]:
    web, metrics = free_port(), free_port()
    ops = f'[group.ops]\nweb_listen = "127.0.0.1:{web}"\nmetrics_listen = "127.0.0.1:{metrics}"\n'
    return make_bus(queues=ops + STANDARD_QUEUES), web, metrics


@pytest.mark.parametrize(
    ("endpoint", "path", "stamp"),
    [("web", "/api/status", _uptime_of_page), ("metrics", "/metrics", _uptime_of_scrape)],
)
def test_status_pollers_build_the_status_a_bounded_number_of_times(
    make_bus, endpoint: str, path: str, stamp
) -> None:
    """Four pollers asking /api/status (or /metrics) in a loop had the group build its
    status on its own event loop ~2,000 times a second, and the group's WF puts fell
    to half. Now it is built at most once per STATUS_BUILD_INTERVAL_S, shared by every
    asker waiting (each build has its own uptime stamp, so the stamps count them)."""
    bus, web, metrics = _ops_bus(make_bus)
    port = web if endpoint == "web" else metrics
    stamps, answers, took_s = _flood(port, path, stamp)
    assert len(stamps) <= took_s / STATUS_BUILD_INTERVAL_S + 2, (len(stamps), answers)
    assert answers >= len(stamps)


def test_an_answer_is_built_after_it_was_asked_for(make_bus) -> None:
    """Shared builds are not a cache: a put and then a look at the page shows the put
    (an operator acts, then reads), even right after another look."""
    bus, web, _metrics = _ops_bus(make_bus)
    with connect_sync(bus.address, "SENDER") as sender:
        for count in range(1, 4):
            _get(web, "/api/status")
            sender.put(b"x", "ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
            status = json.loads(_get(web, "/api/status"))["groups"][0]["status"]
            assert status["journal"]["records"]["dqf"] == count


async def test_status_requests_build_the_status_a_bounded_number_of_times(bus) -> None:
    """Four clients keeping 8 StatusRequests in flight each had the group build its
    status once per request (puts fell from ~60,000/s to 5,000-11,000/s). Now a
    request within STATUS_BUILD_INTERVAL_S of the last build waits for the next one,
    shared by every request waiting; a request after a quiet interval is answered at
    once, with what came before it."""
    stamps: set[float] = set()
    answers = [0]

    async def poller(client) -> None:
        with trio.move_on_after(FLOOD_S):
            while True:
                status = await client.status()
                stamps.add(status["uptime_s"])
                answers[0] += 1

    started_s = trio.current_time()
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(bus.connect()) for _ in range(POLLERS)]
        async with trio.open_nursery() as nursery:
            for client in clients:
                for _ in range(8):
                    nursery.start_soon(poller, client)
    took_s = trio.current_time() - started_s
    assert len(stamps) <= took_s / STATUS_BUILD_INTERVAL_S + 2, (len(stamps), answers)
    assert answers[0] >= POLLERS * 8
    async with bus.connect(queue="SENDER") as sender:
        await sender.put(b"x", target="ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
        status = await sender.status()
    assert status["journal"]["records"]["dqf"] == 1


# ---------------------------------------------------------------- mrs web --listen
def _problem_in_file(tmp_path: Path, listen: str) -> str:
    """What the bus file says of `web_listen = listen`."""
    config = tmp_path / "bus.toml"
    config.write_text(
        f'[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:{free_port()}"\n'
        f'data_dir = "g1"\n[group.ops]\nweb_listen = "{listen}"\n'
    )
    with pytest.raises(ConfigError) as refused:
        load_config(config)
    return refused.value.problem


@pytest.mark.parametrize(
    "listen",
    ["::1:8100", "127.0.0.1", "127.0.0.1:70000", "[]:8100", "web host:8100", "127.0.0.1:\u00b2"],
)
def test_mrs_web_reads_listen_as_the_bus_file_does(tmp_path: Path, listen: str) -> None:
    """`mrs web --listen` had a parser of its own: it served on `::1:8100` (the file
    wants `[::1]:8100`), tried to resolve `web host` and said "cannot listen", and
    worded its refusals apart from the file's. It now reads the address with the
    file's reader and refuses it in the same words, exit 2, one line."""
    said = _problem_in_file(tmp_path, listen)
    config = tmp_path / "bus.toml"
    config.write_text('[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n')
    web = subprocess.Popen(
        [sys.executable, "-m", "mrs", "web", "--config", str(config), "--listen", listen],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        out, err = web.communicate(timeout=30)
    finally:
        web.kill()
    assert (web.returncode, out) == (EXIT_USAGE, "")
    assert err == f"mrs: --listen: {said}\n"


# ---------------------------------------------------------------- out of descriptors
def _until(condition, within_s: float = 10.0) -> None:
    """Return once `condition()` holds (it watches the server), else fail."""
    deadline_s = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline_s, "the server never got there"
        time.sleep(0.01)


def _lines_with(bus, text: str) -> list[str]:
    return [line for line in bus.log_text().splitlines() if text in line]


def _pid(bus: Bus) -> int:
    assert bus.process.process is not None
    return bus.process.process.pid


def _put(client, body: bytes) -> None:
    psb = client.put(body, "ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
    assert psb.status.name == "SUCCESS", psb


def test_out_of_descriptors_is_one_line_and_the_server_recovers(make_bus) -> None:
    """A server with no descriptor free logged "accept: Too many open files" ten times
    a second for as long as it lasted. Now it says once what is wrong and what to do,
    serves the clients it has meanwhile, and says when it accepts again; the
    connection that waited in the backlog is then served."""
    bus = make_bus(queues=STANDARD_QUEUES)
    pid = _pid(bus)
    host, port = bus.address.rsplit(":", 1)
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    with connect_sync(bus.address, "SENDER") as client:
        _put(client, b"before")
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")), hard))
        try:
            waiting = socket.create_connection((host, int(port)))
            _until(lambda: _lines_with(bus, "cannot accept connections"))
            retried_until_s = time.monotonic() + 1.0  # ten retries of the accept
            while time.monotonic() < retried_until_s:
                _put(client, b"while out of descriptors")
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        _until(lambda: _lines_with(bus, "accepting connections again"))
        waiting.close()
        # the accept's one line; others may name the same errno once each (a seq
        # reservation's mark, data_dir/seq_reserved, written while no descriptor was free)
        (said,) = [line for line in _lines_with(bus, "Too many open files") if "accept" in line]
        assert "cannot accept connections" in said and "ulimit -n" in said
        with connect_sync(bus.address, "ANYORDER") as reader:
            assert reader.get(timeout=5).body == b"before"


def test_the_ops_endpoints_together_leave_the_clients_their_descriptors(make_bus) -> None:
    """The web view and the metrics each held 64 idle connections, though the server
    keeps room for 64 web requests in all: limited to 200 descriptors, it admitted 72
    clients and then could not accept (EMFILE) anyone, not even to say no. Now its
    endpoints hold 64 together, the 73rd client is refused EXCEEDQUOTA in words, and
    once the flood closes a client connects and is served."""
    bus, web, metrics = _ops_bus(make_bus)
    pid = _pid(bus)
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (200, hard))
    host, port = bus.address.rsplit(":", 1)
    with contextlib.ExitStack() as flood:
        for http_port in (web, metrics) * 64:
            flood.enter_context(socket.create_connection(("127.0.0.1", http_port)))
        _until(lambda: _accept_queue_length(web) + _accept_queue_length(metrics) <= 64)
        for index in range(100):
            sock = flood.enter_context(socket.socket())
            sock.bind((f"127.0.0.{2 + index % 8}", 0))
            sock.connect((host, int(port)))
        _until(lambda: _accept_queue_length(int(port)) == 0)
        with pytest.raises(QuotaExceeded, match="descriptors"):
            connect_sync(bus.address, "SENDER").close()
    assert not _lines_with(bus, "Too many open files")
    _until(lambda: _accept_queue_length(web) + _accept_queue_length(metrics) == 0)
    with connect_sync(bus.address, "SENDER") as client:
        _put(client, b"after the flood")


@pytest.mark.parametrize("address", ["127.0.0.1:\u00b2", "127.0.0.1:0", ":7001", "127.0.0.1"])
def test_mrs_status_reads_address_as_the_bus_file_does(address: str) -> None:
    """`mrs status --address 127.0.0.1:²` passed str.isdigit, broke int() and stopped
    with "unexpected error: ValueError"; it is now read as the bus file reads `listen`
    and refused in one line, exit 2."""
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "status", "--address", address],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == EXIT_USAGE, result.stderr
    assert result.stderr.startswith("mrs: --address: ") and "e.g. 127.0.0.1:7001" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
