"""The docs pages changed in session 23, held to a real server: the log lines and the
behaviour they quote, where no other test held them yet.

- operations.md: the slow-commit WARNING (`SLOW_COMMIT_S`), word for word, at most one
  line while commits keep being slow;
- timeouts-and-duplicates.md: with the default inline writer a put whose commit the
  disk makes late is answered STORED when the commit ends, though its timeout passed;
  one unanswered past its grace raises ReplyTimeout, and its keyed re-send dedupes;
- operations.md, "Changing the bus file while the journals hold messages": a queue
  made nonrecoverable and limits lowered below what the DQF holds.

The slow disk is the fault file's `SLOW <seconds>` (mrs.storage.fault_file)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from clients import Client, DeliveryMode, MessageTooBig, Psb, ReplyTimeout, Status, Uma
from clients.saf_drain import IDEMPOTENCY_HEADER
from mrs.limits import REPLY_GRACE_S
from tests.conftest import STANDARD_QUEUES, Bus

MakeBus = Callable[..., Bus]
DOCS = Path(__file__).resolve().parents[2] / "docs"
WAIT_S = 20.0
SLOW_S = 1.6
"""Each commit's delay while the fault is on: over SLOW_COMMIT_S (1 s)."""


def quoted_slow_commit_line() -> re.Pattern[str]:
    """operations.md's quoted slow-commit line, its seconds (18.2) made any one-decimal
    number: the rest must be in the log as the page prints it."""
    text = (DOCS / "operations.md").read_text()
    lines = [line for line in text.splitlines() if "a journal commit took" in line]
    assert len(lines) == 1, lines
    line = lines[0].strip()
    assert line.startswith("WARNING mrs.ops: group 1: a journal commit took 18.2 s: "), line
    return re.compile(re.escape(line).replace(re.escape("18.2"), r"(\d+\.\d)"))


async def wait_for_log(bus: Bus, pattern: re.Pattern[str]) -> list[str]:
    """Another process's log: there is no event to await, so poll it briefly."""
    with trio.fail_after(WAIT_S):
        while not (found := pattern.findall(bus.log_text())):
            await trio.sleep(0.05)
    return found


def slow_bus(make_bus: MakeBus, tmp_path: Path) -> tuple[Bus, Path]:
    """A group with the standard queues and the default (inline) writer, whose commits
    the fault file holds back."""
    fault = tmp_path / "fault"
    fault.write_text("")
    return make_bus(env={"MRS_FAULT_FILE": str(fault), "MRS_WRITER": "inline"}), fault


async def test_a_slow_commit_is_the_warning_operations_md_quotes(
    make_bus: MakeBus, tmp_path: Path
) -> None:
    """Two slow commits in a row: the log has the page's line, with the seconds the
    commit took, once (at most one every 10 s)."""
    pattern = quoted_slow_commit_line()
    bus, fault = slow_bus(make_bus, tmp_path)
    async with bus.connect(queue="SENDER") as sender:
        fault.write_text(f"SLOW {SLOW_S}")
        for body in (b"first", b"second"):
            psb = await sender.put(body, target="ANYORDER", delivery=DeliveryMode.WF_DQF)
            assert psb.delivery_status == Status.STORED
        fault.write_text("")
        seconds = await wait_for_log(bus, pattern)
        await sender.put(b"fast", target="ANYORDER", delivery=DeliveryMode.WF_DQF)
    assert len(seconds) == 1, seconds
    assert SLOW_S <= float(seconds[0]) < SLOW_S + 2.0


async def test_a_put_the_inline_writer_makes_late_is_answered_stored(
    make_bus: MakeBus, tmp_path: Path
) -> None:
    """timeouts-and-duplicates.md: "A put is then answered when the commit ends
    (STORED, though its timeout has passed)"; the message is delivered once."""
    bus, fault = slow_bus(make_bus, tmp_path)
    async with bus.connect(queue="SENDER") as sender, bus.connect(queue="ANYORDER") as receiver:
        fault.write_text(f"SLOW {SLOW_S}")
        started_s = trio.current_time()
        psb = await sender.put(
            b"late", target="ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ, timeout=0.3
        )
        fault.write_text("")
        assert trio.current_time() - started_s >= SLOW_S
        assert psb.delivery_status == Status.STORED, psb
        message = await receiver.get(timeout=WAIT_S)
        await receiver.confirm(message.seq)
        assert (message.seq, message.body) == (psb.seq, b"late")


async def test_a_put_unanswered_past_its_grace_raises_reply_timeout_and_its_resend_dedupes(
    make_bus: MakeBus, tmp_path: Path
) -> None:
    """timeouts-and-duplicates.md: with the inline writer a commit longer than the
    put's timeout + REPLY_GRACE_S leaves the call unanswered: it raises ReplyTimeout
    at that grace, not at the disk's pace; a re-send under the same idempotency key is
    answered with the first copy's seq, and the message is delivered once."""
    bus, fault = slow_bus(make_bus, tmp_path)
    key = {IDEMPOTENCY_HEADER: "docs-23"}
    stall_s = REPLY_GRACE_S + 2.5
    async with bus.connect(queue="SENDER") as sender, bus.connect(queue="ANYORDER") as receiver:
        fault.write_text(f"SLOW {stall_s}")
        started_s = trio.current_time()
        with pytest.raises(ReplyTimeout):
            await sender.put(b"once", target="ANYORDER", uma=Uma.DLJ, timeout=0.3, headers=key)
        assert trio.current_time() - started_s < stall_s
        fault.write_text("")
        resent = await sender.put(b"once", target="ANYORDER", uma=Uma.DLJ, headers=key)
        message = await receiver.get(timeout=WAIT_S)
        await receiver.confirm(message.seq)
        assert (message.seq, message.body) == (resent.seq, b"once")
        assert await sender.pending(["ANYORDER"]) == [0]


HELD_QUEUE = '[[group.queue]]\nid = 20\nname = "HELD"\n'
HELD_BODIES = [bytes([65 + index]) * 100 for index in range(3)]
LOWER = "dqf_messages_max = 2\nmessage_bytes_max = 50\n"
"""Below the 3 messages of 100 bytes the DQF holds."""


async def test_limits_lowered_below_what_the_journals_hold_deliver_it_all(
    make_bus: MakeBus,
) -> None:
    """operations.md, "Changing the bus file while the journals hold messages": a
    queue made `recoverable = false`, `dqf_messages_max` and `message_bytes_max`
    lowered below what the DQF holds, then a restart. Everything held is delivered
    whole; new recoverable puts answer NO_DQF on that queue, DQF_FULL on another
    (the count is the whole DQF's) until the DQF is below the cap, and larger ones
    MSGTOOBIG."""
    bus = make_bus(queues=STANDARD_QUEUES + HELD_QUEUE)
    async with bus.connect(queue="SENDER") as sender:
        for body in HELD_BODIES:
            psb = await sender.put(body, target="HELD", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
            assert psb.delivery_status == Status.STORED
    assert bus.process.terminate() == 0
    text = bus.config_path.read_text()
    assert HELD_QUEUE in text and "[group.limits]\n" in text
    text = text.replace(HELD_QUEUE, HELD_QUEUE + "recoverable = false\n")
    bus.config_path.write_text(text.replace("[group.limits]\n", "[group.limits]\n" + LOWER))
    bus.start()
    async with bus.connect(queue="SENDER") as sender, bus.connect(queue="HELD") as held:
        assert (await _put_dqf(sender, "HELD", b"new")).delivery_status == Status.NO_DQF
        assert (await _put_dqf(sender, "ANYORDER", b"new")).delivery_status == Status.DQF_FULL
        with pytest.raises(MessageTooBig):
            await _put_dqf(sender, "ANYORDER", b"x" * 60)
        for body in HELD_BODIES:
            message = await held.get(timeout=WAIT_S)
            await held.confirm(message.seq)
            assert message.body == body
        assert (await _put_dqf(sender, "ANYORDER", b"new")).delivery_status == Status.STORED


async def _put_dqf(sender: Client, target: str, body: bytes) -> Psb:
    return await sender.put(body, target=target, delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
