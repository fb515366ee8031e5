"""Probes of the blocking client (`connect_sync`) as a developer porting a threaded
MessageQ program uses it: one client shared by threads, a child forked after the
connect, a client dropped or a script ended without close(), close() from a journal
listener, the timeouts of its waits. Against real `mrs serve` processes.

What must hold each time: nothing lost or repeated, no call that waits for ever, a
mistake refused in one line, and the queue free for the next attach.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import (
    BadParameter,
    ConnectionLost,
    DeliveryMode,
    MrsError,
    NoMoreMessages,
    ReplyTimeout,
    Status,
    Uma,
    connect_sync,
)
from clients.connection import JournalEvent
from tests.client_helpers import FAST_RECONNECT, FixedPortServer

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 30.0
"""Generous: the machine is shared; an answer that never comes fails the test."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FixedPortServer]:
    server = FixedPortServer(tmp_path / "bus")
    server.start()
    yield server
    server.stop()


def _take_all(address: str, queue: str) -> list[bytes]:
    """Every message waiting on `queue` now, confirmed, in the order handed out."""
    bodies = []
    with connect_sync(address, queue) as client:
        while True:
            try:
                message = client.get(timeout=0)
            except NoMoreMessages:
                return bodies
            if message.needs_confirm:
                message.confirm()
            bodies.append(message.body)


# ----------------------------------------------------------------- threads
def test_one_client_shared_by_threads_loses_and_repeats_nothing(server) -> None:
    """The docs say a blocking client may be shared by threads: producers and
    consumers on one connection at once, each message got exactly once."""
    producers, per_producer = 4, 50
    got: list[bytes] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    with connect_sync(server.address, "ANYORDER") as client:

        def produce(number: int) -> None:
            for index in range(per_producer):
                body = b"%d:%d" % (number, index)
                client.put(body, "ANYORDER", delivery=DeliveryMode.WF_DQF, timeout=WAIT_S)

        def consume() -> None:
            while len(got) < producers * per_producer:
                try:
                    message = client.get(timeout=2)
                except MrsError as error:  # nothing in 2 s: the others took the rest
                    assert error.status == Status.TIMEOUT, error
                    return
                message.confirm()
                with lock:
                    got.append(message.body)

        def guarded(work, *args: int) -> None:
            try:
                work(*args)
            except BaseException as error:  # noqa: BLE001 - reported by the test
                errors.append(error)

        threads = [threading.Thread(target=guarded, args=(produce, n)) for n in range(4)]
        threads += [threading.Thread(target=guarded, args=(consume,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S * 4)
        assert not errors
    assert sorted(got) == sorted(b"%d:%d" % (n, i) for n in range(4) for i in range(50))


# ----------------------------------------------------------------- fork
def test_a_forked_child_is_refused_at_once_and_the_parent_stays_attached(server) -> None:
    """A MessageQ program that forks workers after it attached: the child's copy of the
    client has no thread behind it (fork copies only the caller's thread). Before,
    the child's put and its close() waited for ever; now the put is refused in one
    line, and the close does nothing, so the parent keeps its connection and queue."""
    with connect_sync(server.address, "ANYORDER") as client:
        client.put(b"before", "ANYORDER", delivery=DeliveryMode.WF_DQF)
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports by its exit status
            code = 3
            try:
                signal.alarm(int(WAIT_S))  # a call that waits for ever ends the child
                try:
                    client.put(b"from the child", "ANYORDER")
                except BadParameter as refused:
                    code = 0 if "connect again in this process" in str(refused) else 4
                client.close()
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert client.connected
        message = client.get(timeout=WAIT_S)
        message.confirm()
        assert message.body == b"before"
        assert client.put(b"after", "ANYORDER", delivery=DeliveryMode.WF_DQF).status == (
            Status.SUCCESS
        )
    assert _take_all(server.address, "ANYORDER") == [b"after"]


# ----------------------------------------------------------------- without close
def _attach_and_drop(address: str) -> None:
    """A helper that forgets close(): its client is dropped when it returns."""
    client = connect_sync(address, "ANYORDER", reconnect=None)
    assert client.put(b"dropped", "ANYORDER", delivery=DeliveryMode.WF_DQF).status == (
        Status.SUCCESS
    )


def test_a_client_dropped_without_close_is_closed_and_its_queue_is_free(server) -> None:
    """Before, the client's thread held the SyncClient, so a dropped one was never
    collected: its thread and attach lived on, and the next attach to its queue met
    QUEUE_BUSY for the rest of the process. Now it is closed when collected, with a
    ResourceWarning as an unclosed file gives."""
    with pytest.warns(ResourceWarning, match="was not closed"):
        _attach_and_drop(server.address)
        gc.collect()
    assert not [t for t in threading.enumerate() if t.name == "mrs-client"]
    with connect_sync(server.address, "ANYORDER", reconnect=None) as again:
        message = again.get(timeout=WAIT_S)
        message.confirm()
        assert message.body == b"dropped"
    again.close()  # a second close does nothing
    with pytest.raises(ConnectionLost, match="client closed"):
        again.put(b"late", "ANYORDER")


def test_a_script_ended_without_close_gives_back_what_it_read_ahead(server) -> None:
    """A script that gets one message and ends without close(): the client had read
    ahead the memory messages behind it (docs/client-library.md, Read-ahead), and
    before, they went with the process: 19 of 20 lost. Now the client is closed as
    the interpreter exits, so they are given back to the queue."""
    with connect_sync(server.address, "SENDER") as sender:
        for index in range(20):
            sender.put(b"memory %d" % index, "ANYORDER", delivery=DeliveryMode.NN_MEM, uma=Uma.DISC)
    script = (
        "import clients\n"
        f"q = clients.connect_sync({server.address!r}, 'ANYORDER')\n"
        "print(q.get(timeout=30).body.decode())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S * 2
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "memory 0"
    assert _take_all(server.address, "ANYORDER") == [b"memory %d" % i for i in range(1, 20)]


# ----------------------------------------------------------------- close, waits
def test_close_in_a_journal_listener_returns_and_the_client_ends(server, tmp_path) -> None:
    """A journal listener runs in the client's own thread; a close() made there
    waited for that very thread, for ever (and so did every later close)."""
    closed = threading.Event()
    client = connect_sync(  # no `with`: a close here would hang if the listener's did
        server.address, "SENDER", saf_journal=str(tmp_path / "saf"), reconnect=FAST_RECONNECT
    )

    def listener(event: JournalEvent) -> None:
        if event.kind == "status" and event.status == Status.JOURNAL_ON:
            client.close()
            closed.set()

    client.add_journal_listener(listener)
    server.kill()  # the drop turns the journal on: the listener closes
    assert closed.wait(WAIT_S), "close() in the listener did not return"
    with pytest.raises(ConnectionLost, match="client closed"):
        client.put(b"late", "ANYORDER")


def test_the_blocking_waits_time_out_with_a_timeout_error(server, tmp_path) -> None:
    """wait_connected and wait_journal_status said they raise TimeoutError; they
    raised trio's TooSlowError, neither a TimeoutError nor an MrsError, so
    `except TimeoutError` and `except MrsError` both missed it."""
    server.kill()
    with connect_sync(
        server.address, "SENDER", saf_journal=str(tmp_path / "saf"), reconnect=FAST_RECONNECT
    ) as client:
        assert client.journal_status == Status.JOURNAL_ON
        for wait in (
            lambda: client.wait_connected(timeout=0.2),
            lambda: client.wait_journal_status(Status.LINK_UP, timeout=0.2),
        ):
            with pytest.raises(ReplyTimeout, match="within 0.2 s") as timed_out:
                wait()
            assert isinstance(timed_out.value, TimeoutError)
            assert timed_out.value.status == Status.TIMEOUT
