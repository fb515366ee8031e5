"""The accepting side of a link: each kind of refused link Hello has its own log line
(rate-limited per kind, claimed group and host), and a rebuilt peer's messages leave
the old journals' PCJ records alone. Real `mrs serve` processes, real sockets, real
LMDB and the real CLI.

Why: the acceptor keyed its refusal lines so that one kind hid another for the rate
window (10 s): a rebuilt group 1 dialing with new journals hid a stray process dialing
as group 1 without any, and every refused link Hello also wrote a "protocol error"
line in the slot all protocol errors of its host share, hiding an application's
protocol error from that host. A Hello from the wrong principal was logged without
any limit, once per redial, forever.
"""

from __future__ import annotations

import re
from pathlib import Path

import trio

from clients import DeliveryMode, ForceJrn, Status, Uma
from journals import Journal, JournalStore, Record, Selection
from mrs import protocol as wire
from mrs.security.handshake import authenticate
from sim.bus import LinkedBus
from tests.auth_helpers import SecureBus, creds
from tests.cli_helpers import run_mrs
from tests.process.test_auth import first_event, raw_stream, wait_link_up
from tests.process.test_link_admission_24b import EARLIER_HELLO, SAID_NONE, _answer
from tests.process.test_link_incarnation import _logged, _second_group_one
from tests.process.test_links import proc_bus, wait_for_link

__all__ = ["proc_bus"]  # the fixture: two real groups behind a fault proxy

WAIT_S = 30.0
"""How long a wait for another process's log line lasts at most on a loaded machine."""
OTHER_JOURNALS = r"refused link: group 1's journals \(incarnation"


def _lines(bus: LinkedBus, group: int, pattern: str) -> list[str]:
    path = bus.directory / f"group{group}.log"
    return [
        line for line in path.read_text(errors="replace").splitlines() if re.search(pattern, line)
    ]


async def _rebuilt_group_one_refused(bus: LinkedBus) -> None:
    """Group 1 rebuilt on an empty data directory dials group 2: refused, logged."""
    await trio.to_thread.run_sync(bus.processes[1].kill)
    bus.processes[1] = _second_group_one(bus)
    await trio.to_thread.run_sync(bus.processes[1].start)
    await _logged(bus, 2, OTHER_JOURNALS)
    await wait_for_link(bus, 2, 1, "down")


async def test_a_second_kind_of_refused_link_is_logged_beside_the_first(proc_bus) -> None:
    """Group 1 comes back rebuilt (other journals), and within the rate window a
    stray process dials group 2 as group 1 without journals: two problems, two
    lines (before: the second was hidden for 10 s). An application's protocol error
    from the same host is logged too (before: hidden behind the refusals' own
    "protocol error" lines, which said each refusal twice)."""
    await _rebuilt_group_one_refused(proc_bus)
    answer = await _answer(proc_bus.address(2), EARLIER_HELLO)
    assert isinstance(answer, wire.Fatal) and SAID_NONE in answer.message, answer
    said_none = await _logged(proc_bus, 2, f"refused link: {SAID_NONE}")
    assert "127.0.0.1:" in said_none  # who dialed, for the operator to find it

    host, port = proc_bus.address(2).rsplit(":", 1)
    async with await trio.open_tcp_stream(host, int(port)) as stream:
        own = stream.socket.getsockname()[1]
        await stream.send_all(b"\x00\x00\x00\x00")  # no frame MRS takes
        with trio.fail_after(WAIT_S):
            while await stream.receive_some(65536):
                pass
    await _logged(proc_bus, 2, rf"protocol error: .*127\.0\.0\.1:{own}\)")
    assert not _lines(proc_bus, 2, r"protocol error: group 1('s journals| said no)")
    assert len(_lines(proc_bus, 2, OTHER_JOURNALS)) == 1  # its redials: counted, not logged


async def test_a_link_hello_from_the_wrong_principal_is_logged_once_per_window(
    tmp_path: Path,
) -> None:
    """Under [auth], an application's connection sends group 1's link Hello three
    times: each is refused NOTAUTHORIZED, one line says so (before: one line per
    Hello, and a misconfigured peer redials every 2 s forever), and when the window
    ends the count of those not shown is logged."""
    bus = SecureBus(tmp_path / "secure")
    await trio.to_thread.run_sync(bus.start)
    try:
        await wait_link_up(bus)
        for _ in range(3):
            await _hello_as_producer(bus)
        pattern = "refused link Hello claiming group 1 from 'producer'"
        [line] = [line for line in bus.log(2).splitlines() if pattern in line]
        assert "must authenticate as 'group:1'" in line, line
        with trio.fail_after(WAIT_S):
            while "(2 more since the last such line)" not in bus.log(2):
                await trio.sleep(0.2)  # the server's flush, every 10 s: no event to await
    finally:
        bus.stop()


async def _hello_as_producer(bus: SecureBus) -> None:
    stream = await raw_stream(bus.address(2))
    async with stream:
        await authenticate(stream, creds("producer"))
        connection = wire.Connection("client")
        hello = wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1)
        await stream.send_all(connection.send(hello))
        event = await first_event(stream, connection)
    assert isinstance(event, wire.Fatal) and event.status == Status.NOTAUTHORIZED, event


async def _put_and_confirm(bus: LinkedBus, body: bytes) -> int:
    """Group 1 sends `body` to 2.10 (WF_SAF); group 2's reader confirms it: its seq."""
    async with bus.connect(1, "OUT") as sender:
        psb = await sender.put(body, target="2.10", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC)
    assert psb.delivery_status == Status.STORED, psb
    async with bus.connect(2, "IN") as receiver:
        message = await receiver.get(timeout=WAIT_S)
        assert message.body == body
        await receiver.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)
    return psb.seq


def _pcj_bodies(bus: LinkedBus, group: int) -> list[bytes]:
    store = JournalStore(bus.data_dir(group) / "journals", readonly=True)
    try:
        records = [record for _, record in store.scan(Journal.PCJ, Selection())]
        return [record.body for record in records if isinstance(record, Record)]
    finally:
        store.close()


async def test_a_rebuilt_peers_confirmed_message_keeps_the_old_ones_pcj_record(proc_bus) -> None:
    """Group 1's message is confirmed in group 2 (a PCJ record there); group 1 is
    rebuilt from nothing and the link reset; its first message is confirmed. Both
    confirmations stay in group 2's PCJ, the audit trail. Before, the rebuilt group's
    counter started again from 1, its first message came under the old one's seq, and
    the new PCJ record was written over the old (the PCJ is keyed by seq alone); a
    fresh group now counts from its wall clock (mrs.core.seqspace.fresh_start)."""
    old_seq = await _put_and_confirm(proc_bus, b"old journals")
    await _rebuilt_group_one_refused(proc_bus)
    config = str(proc_bus.config_path)
    reset = run_mrs("admin", "reset-link", "1", "--config", config, "--group", "2")
    assert reset.returncode == 0, reset.stderr
    await wait_for_link(proc_bus, 2, 1, "up")
    new_seq = await _put_and_confirm(proc_bus, b"new journals")
    assert new_seq > old_seq  # the rebuilt group's counter starts above the old one's
    assert sorted(_pcj_bodies(proc_bus, 2)) == [b"new journals", b"old journals"]
