"""Probes of the client SAF journal, its drain and its reconnect, with a real `mrs
serve`, real LMDB files and real child processes: the edges the main tests
(test_client_saf*.py) do not reach, each found by attacking the client. A record over
the group's message limit, a drain wider than the server's request bound, deletes that
fail (no room: a file size limit on the child), an admission refusal during the
reconnect, bad journal options, a journal that cannot be created, and a put on a
closed client: nothing acknowledged is lost, and each mistake is one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import pytest
import trio

from clients import (
    BadParameter,
    DeliveryMode,
    JournalFailed,
    MrsError,
    Status,
    Uma,
    connect,
)
from tests.client_helpers import FAST_RECONNECT as FAST
from tests.client_helpers import FixedPortServer, take_all


@pytest.fixture
def server(tmp_path):
    """Configured, not started: the tests start it when they want it up."""
    server = FixedPortServer(tmp_path / "bus")
    yield server
    server.stop()


async def test_a_record_over_the_servers_limit_does_not_stall_the_drain(server, tmp_path) -> None:
    """A put journaled before the client ever reached its server cannot be checked
    against the group's message_bytes_max (1 MiB). Sent at drain time, its frame is
    over the server's limit and the server closes the connection: the drain used to
    reconnect and send it again for ever, and the records behind it never arrived.
    Now it is refused as the server would refuse it (MSGTOOBIG, kind "rejected")."""
    events = []
    async with connect(
        server.address, "SENDER", saf_journal=tmp_path / "j", reconnect=FAST, connect_timeout_s=2
    ) as client:
        client.add_journal_listener(events.append)
        await client.put(b"before", target="1.11", delivery=DeliveryMode.WF_DQF)
        big = await client.put(b"x" * 1_500_000, target="1.11", uma=Uma.DLJ)
        await client.put(b"after", target="1.11", delivery=DeliveryMode.WF_DQF)
        server.start()
        with trio.fail_after(20):
            await client.wait_journal_status(Status.LINK_UP)
        assert client.journal_backlog == 0
        assert client.reconnects <= 1, "the drain reconnected over the record"
    rejected = [event for event in events if event.kind == "rejected"]
    assert [(event.local_seq, event.status) for event in rejected] == [(big.seq, Status.MSGTOOBIG)]
    assert "message_bytes_max 1048576" in rejected[0].message
    async with connect(server.address, "ANYORDER") as receiver:
        assert [message.body for message in await take_all(receiver)] == [b"before", b"after"]


async def put_concurrently(client, bodies: list[bytes]) -> None:
    """Journal `bodies` at once (one group commit instead of one fsync each)."""
    async with trio.open_nursery() as nursery:
        for body in bodies:
            nursery.start_soon(partial(client.put, body, "1.11", delivery=DeliveryMode.NN_DQF))


async def test_a_drain_over_the_servers_request_bound_loses_nothing(tmp_path) -> None:
    """The server refuses a request past its connection's requests_in_flight_max with
    EXCEEDQUOTA. The drain took that for a refusal for good and removed every record
    past the bound from the journal (900 of 1000 acknowledged puts lost, each with a
    WARNING); now it keeps them, narrows its window and drains them all."""
    guards = "pcj_default = true\n[group.guards]\nrequests_in_flight_max = 100\n"
    server = FixedPortServer(tmp_path / "bus", group_extra=guards)
    try:
        events = []
        bodies = [b"m%d" % index for index in range(600)]
        async with connect(
            server.address, "SENDER", saf_journal=tmp_path / "j", reconnect=FAST
        ) as client:
            client.add_journal_listener(events.append)
            await put_concurrently(client, bodies)
            server.start()
            with trio.fail_after(60):
                await client.wait_journal_status(Status.LINK_UP)
            assert client.journal_backlog == 0
        assert [event for event in events if event.kind == "rejected"] == []
        async with connect(server.address, "ANYORDER") as receiver:
            received = [message.body for message in await take_all(receiver)]
        assert sorted(received) == sorted(bodies)
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"saf_messages_max": 0}, BadParameter, "saf_messages_max must be a whole number"),
        ({"saf_bytes_max": -5}, BadParameter, "saf_bytes_max must be a whole number"),
        ({"saf_bytes_max": 1 << 62}, BadParameter, "saf_bytes_max must be a whole number"),
        ({"saf_journal": "A_FILE"}, JournalFailed, "cannot be opened: File exists"),
        ({"saf_journal": "A_FILE/j"}, JournalFailed, "cannot be opened: Not a directory"),
    ],
)
async def test_a_bad_journal_option_is_one_line(tmp_path, options, error, words) -> None:
    """A cap of 0 made every put JOURNAL_FULL without a word; a byte cap LMDB cannot
    map ended in OverflowError or MemoryError; a file where the journal directory
    should be, in FileExistsError. Each is now an MrsError with one line, and a file
    in the way is left as it was."""
    in_the_way = tmp_path / "A_FILE"
    in_the_way.write_text("not a journal")
    options = {"saf_journal": tmp_path / "j", **options}
    if isinstance(options["saf_journal"], str):
        options["saf_journal"] = tmp_path / options["saf_journal"]
    with pytest.raises(error) as refused:
        async with connect("127.0.0.1:1", "SENDER", connect_timeout_s=1, **options):
            pass
    assert isinstance(refused.value, MrsError) and words in str(refused.value)
    assert "\n" not in str(refused.value)
    assert in_the_way.read_text() == "not a journal"


PUT_AFTER_CLOSE = textwrap.dedent("""
    import sys, trio
    from clients import ConnectionLost, connect

    async def main(journal):
        async with connect("127.0.0.1:1", "SENDER", saf_journal=journal, connect_timeout_s=1) as q:
            await q.put(b"inside", "1.10")
        try:
            await q.put(b"after", "1.10")
        except ConnectionLost as lost:
            print("raised", lost.status.name, lost.message)

    trio.run(main, sys.argv[1])
""")


def run_script(script: str, journal: Path, timeout_s: float) -> subprocess.CompletedProcess:
    """`script` in a child Python from the repository's root, the journal's path its
    argument: a hang, or a process limit it sets, stays in the child."""
    return subprocess.run(
        [sys.executable, "-c", script, str(journal)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_a_put_after_the_client_closed_raises(tmp_path) -> None:
    """A recoverable put made on a journaled client after its `connect` block ended
    (a task that outlived it) waited, shielded, for a commit no writer would make:
    it hung for ever and no cancel scope could end it. Now it raises ConnectionLost
    ("client closed"), as every other call on a closed client does. In a child
    process, so the old hang fails this test instead of hanging the run."""
    done = run_script(PUT_AFTER_CLOSE, tmp_path / "j", timeout_s=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "raised LINK_DOWN client closed"


async def test_an_admission_refusal_does_not_end_reconnecting(tmp_path) -> None:
    """A server at its connections_per_peer_max answers a new connection
    Fatal(EXCEEDQUOTA). A journaled client met it at attach and raised QuotaExceeded
    instead of attaching JOURNAL_ON, and met on a reconnect it stopped reconnecting
    for good: the journal never drained and every call raised. Now it waits, as for
    QUEUE_BUSY, and drains once the other connection is gone."""
    guards = "pcj_default = true\n[group.guards]\nconnections_per_peer_max = 1\n"
    server = FixedPortServer(tmp_path / "bus", group_extra=guards)
    server.start()
    dialed_s: list[float] = []
    refused_twice = trio.Event()

    async def counting_dial(host: str, port: int) -> trio.abc.Stream:
        """Dials as usual; the server answers a refused peer at most once a second, so
        a dial 1.2 s after the first has met its second Fatal(EXCEEDQUOTA)."""
        dialed_s.append(trio.current_time())
        if dialed_s[-1] - dialed_s[0] > 1.2:
            refused_twice.set()
        return await trio.open_tcp_stream(host, port)

    release = trio.Event()

    async def hold_the_one_connection(task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with connect(server.address, "ANYORDER"):
            task_status.started()
            await release.wait()

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(hold_the_one_connection)
            async with connect(
                server.address,
                "SENDER",
                saf_journal=tmp_path / "j",
                reconnect=FAST,
                open_stream=counting_dial,
            ) as client:
                assert client.attach_status == Status.JOURNAL_ON
                psb = await client.put(b"kept", target="1.11")
                assert psb.status == Status.JOURNAL_ON
                with trio.fail_after(20):
                    await refused_twice.wait()
                release.set()
                with trio.fail_after(20):
                    await client.wait_journal_status(Status.LINK_UP)
        async with connect(server.address, "ANYORDER") as receiver:
            assert [message.body for message in await take_all(receiver)] == [b"kept"]
    finally:
        server.stop()


DELETES_FAIL = textwrap.dedent("""
    import resource, signal, sys
    from functools import partial
    from pathlib import Path
    import trio
    from clients import DeliveryMode, Reconnect, Status, connect

    async def main(address, journal):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
        all_stored = trio.Event()
        stored = []

        def heard(event):
            if event.kind == "drained":
                stored.append(event.local_seq)
                if len(set(stored)) == 200:
                    all_stored.set()

        fast = Reconnect(delay_s_initial=0.02, delay_s_max=0.2)
        async with connect(address, "SENDER", saf_journal=journal, reconnect=fast) as q:
            q.add_journal_listener(heard)
            async with trio.open_nursery() as nursery:
                for i in range(200):
                    put = partial(q.put, b"m%d" % i, "1.11", delivery=DeliveryMode.NN_DQF)
                    nursery.start_soon(put)
            # no journal file may grow now: the drain's deletes fail as on a full disk
            largest = max(path.stat().st_size for path in Path(journal).iterdir())
            soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (largest, hard))
            print("limited", flush=True)
            await all_stored.wait()
            print("stored", q.journal_backlog, flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
            with trio.move_on_after(20):
                await q.wait_journal_status(Status.LINK_UP)
            print("end", q.journal_status.name, q.journal_backlog, flush=True)

    trio.run(main, sys.argv[1], sys.argv[2])
""")


async def test_records_whose_delete_failed_leave_the_journal_later(server, tmp_path) -> None:
    """A drained record is deleted once the server stored it; when the delete failed
    (the disk full: here no journal file may grow), the record stayed and was never
    sent again on that connection: the journal kept its backlog and JOURNAL_ON for
    ever (every later put journaled), though the server had every message. Now the
    drain sends such records again after a pause, the server answers each with its
    first copy, and the journal empties once the disk has room: LINK_UP, and each
    message stored once."""
    child = subprocess.Popen(
        [sys.executable, "-c", DELETES_FAIL, server.address, str(tmp_path / "j")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert await trio.to_thread.run_sync(child.stdout.readline) == "limited\n"
        server.start()
        assert await trio.to_thread.run_sync(child.stdout.readline) == "stored 200\n"
        child.stdin.write("room again\n")
        child.stdin.flush()
        assert await trio.to_thread.run_sync(child.stdout.readline) == "end LINK_UP 0\n"
    finally:
        child.kill()
        child.wait()
    async with connect(server.address, "ANYORDER") as receiver:
        bodies = [message.body for message in await take_all(receiver)]
    assert sorted(bodies) == sorted(b"m%d" % index for index in range(200))


NO_ROOM_FOR_A_NEW_JOURNAL = textwrap.dedent("""
    import resource, signal, sys
    import trio
    from clients import MrsError, connect

    async def attach(journal):
        async with connect("127.0.0.1:1", "SENDER", saf_journal=journal, connect_timeout_s=1):
            print("attached", flush=True)

    async def main(journal):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        # room to create the journal's files, none for the commit of its id
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, hard))
        try:
            await attach(journal)
        except MrsError as error:
            print("refused", type(error).__name__, error, flush=True)
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        await attach(journal)  # the same process, once there is room

    trio.run(main, sys.argv[1])
""")


def test_a_journal_that_cannot_be_created_is_let_go(tmp_path) -> None:
    """A new journal whose id could not be committed (no room on the disk: here a
    file size limit) raised a bare JournalDeviceError, and kept its LMDB environment
    and owner lock: a second connect in the same process, once there was room, was
    refused JournalBusy naming the process itself. Now the first is one line
    (JournalFailed) and lets go of everything, and the second attaches."""
    done = run_script(NO_ROOM_FOR_A_NEW_JOURNAL, tmp_path / "j", timeout_s=60)
    assert done.returncode == 0, done.stderr[-2000:]
    refused, attached = done.stdout.splitlines()
    assert refused.startswith("refused JournalFailed mrs: JOURNAL_FAIL: client SAF journal")
    assert "cannot be opened: journal device failed: File too large" in refused
    assert attached == "attached"
