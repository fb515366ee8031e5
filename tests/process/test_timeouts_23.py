"""Time as a user meets it (session 23): puts that a slow disk makes late, copies
re-sent under their idempotency key while the first copy is still being stored, and
the dedupe window on a wall clock that steps. The slow disk is a real `mrs serve`
whose commits a fault file (`SLOW <seconds>`, mrs.storage.fault_file) holds back,
with the writer thread (`MRS_WRITER=thread`), so the event loop keeps answering
while the commit waits."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, MrsTimeout, Status, Uma
from clients.saf_drain import IDEMPOTENCY_HEADER
from mrs.storage.fault_file import file_fault_hook
from tests.client_helpers import take_all
from tests.conftest import Bus

SLOW_DISK_S = 3.0
"""How long each commit takes while the fault is on: far longer than what the test
does meanwhile (a few puts, answered in milliseconds)."""
ANSWER_WAIT_S = 20.0


def slow_bus(make_bus, tmp_path: Path) -> tuple[Bus, Path]:
    """A group with the standard queues whose commits the fault file holds back."""
    fault = tmp_path / "fault"
    fault.write_text("")
    env = {"MRS_FAULT_FILE": str(fault), "MRS_WRITER": "thread"}
    return make_bus(group_extra="pcj_default = true", env=env), fault


async def test_an_ak_copy_sent_while_its_first_copy_is_stored_gets_the_first_seq(
    make_bus, tmp_path: Path
) -> None:
    """An AK_DQF put and its copy under the same key, the copy sent while the first
    copy's commit still runs (a slow disk). One message is stored and one MRS_ACK
    comes, naming the first copy's seq: the copy's put must return that seq too.
    Before, it returned a seq of its own that no message took and no MRS_ACK named,
    so a sender matching MRS_ACKs to its puts waited for it for ever."""
    bus, fault = slow_bus(make_bus, tmp_path)
    key = {IDEMPOTENCY_HEADER: "invoice-7"}
    async with bus.connect(queue="SENDER") as sender, bus.connect(queue="ANYORDER") as receiver:
        fault.write_text(f"SLOW {SLOW_DISK_S}")
        first = await sender.put(
            b"pay 10", target="ANYORDER", delivery=DeliveryMode.AK_DQF, uma=Uma.DLJ, headers=key
        )
        copy = await sender.put(
            b"pay 10", target="ANYORDER", delivery=DeliveryMode.AK_DQF, uma=Uma.DLJ, headers=key
        )
        fault.write_text("")
        assert copy.seq == first.seq
        ack = await sender.get(timeout=ANSWER_WAIT_S)
        assert ack.is_mrs_ack and ack.ack_psb().seq == first.seq
        assert ack.ack_psb().delivery_status == Status.STORED
        with pytest.raises(MrsTimeout):  # one MRS_ACK for the message, none for the copy
            await sender.get(timeout=0.5)
        message = await receiver.get(timeout=ANSWER_WAIT_S)
        await receiver.confirm(message.seq)
        assert (message.seq, message.body) == (first.seq, b"pay 10")
        assert await take_all(receiver) == []


async def test_a_wf_put_the_disk_makes_late_times_out_and_its_resend_dedupes(
    make_bus, tmp_path: Path
) -> None:
    """A WF_DQF put whose commit outlasts its timeout is answered TIMEOUT at its
    timeout, not at the disk's pace; the server keeps storing it. The sender re-sends
    under the same key while that commit still runs: the copy waits for it and is
    answered with the first copy's seq, and the receiver gets the message once."""
    bus, fault = slow_bus(make_bus, tmp_path)
    key = {IDEMPOTENCY_HEADER: "order-1"}
    async with bus.connect(queue="SENDER") as sender, bus.connect(queue="ANYORDER") as receiver:
        fault.write_text(f"SLOW {SLOW_DISK_S}")
        started_s = trio.current_time()
        with pytest.raises(MrsTimeout) as timed_out:
            await sender.put(b"ship 1", target="ANYORDER", uma=Uma.DLJ, timeout=0.3, headers=key)
        assert trio.current_time() - started_s < SLOW_DISK_S
        assert "may or may not have been stored" in timed_out.value.message
        resent = await sender.put(b"ship 1", target="ANYORDER", uma=Uma.DLJ, headers=key)
        fault.write_text("")
        assert resent.delivery_status == Status.STORED
        message = await receiver.get(timeout=ANSWER_WAIT_S)
        await receiver.confirm(message.seq)
        assert (message.seq, message.delivery_status) == (resent.seq, Status.CONFIRMREQ)
        assert await take_all(receiver) == []


def test_a_slow_fault_holds_a_commit_back_and_a_bad_one_is_no_fault(tmp_path: Path) -> None:
    """The fault file's SLOW word waits at the flush phase only; a malformed or absurd
    delay is no delay (the file is a tester's, read at every commit)."""
    fault = tmp_path / "fault"
    hook = file_fault_hook(fault)
    fault.write_text("SLOW 0.2")
    started_s = time.monotonic()
    hook("commit")
    hook("flush")
    assert 0.2 <= time.monotonic() - started_s < 2.0
    for word in ("SLOW x", "SLOW -1", "SLOW 1e9", "SLOW nan"):
        fault.write_text(word)
        started_s = time.monotonic()
        hook("flush")
        assert time.monotonic() - started_s < 0.1


async def _keyed_put(client, body: bytes, key: str) -> int:
    psb = await client.put(
        body,
        target="ORDERS",
        delivery=DeliveryMode.WF_DQF,
        uma=Uma.DLJ,
        headers={IDEMPOTENCY_HEADER: key},
    )
    assert psb.delivery_status == Status.STORED
    return psb.seq


async def test_the_dedupe_window_edges_on_a_wall_clock_that_steps(make_mem_bus) -> None:
    """The window is measured on the group's wall clock (it must outlive a restart):
    a re-send just inside `dedupe_window_s` dedupes, one just after stores a new
    message; a clock stepped back keeps a key longer, one stepped forward past the
    window ends it (docs/timeouts-and-duplicates.md says so). The group's clock is
    injected: the MockClock's time plus the step."""
    bus = await make_mem_bus(limits="dedupe_window_s = 60")
    step_ns = [0]
    wall_ns = bus.memory.clock_ns
    bus.memory.groups[1].clock_ns = lambda: wall_ns() + step_ns[0]
    await bus.restart()
    async with bus.connect(queue="SENDER") as sender:
        first = await _keyed_put(sender, b"report", "daily")
        await trio.sleep(59.9)
        assert await _keyed_put(sender, b"report", "daily") == first
        await trio.sleep(0.2)
        second = await _keyed_put(sender, b"report", "daily")
        assert second != first  # the window ended: a new message
        step_ns[0] = -3600 * 10**9  # the clock steps back an hour
        await trio.sleep(61)
        assert await _keyed_put(sender, b"report", "daily") == second
        step_ns[0] = 0  # and forward again: 61 s since `second`, past its window
        third = await _keyed_put(sender, b"report", "daily")
        assert third not in (first, second)
    bodies = [message.body for message in await _taken(bus, "ORDERS")]
    assert bodies == [b"report"] * 3


async def _taken(bus, queue: str) -> list:
    async with bus.connect(queue=queue) as receiver:
        return await take_all(receiver)
