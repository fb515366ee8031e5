"""Probes of what an operator works dead letters with (thirty-first session): the DLQ
handler's per-destination order when a letter joins a destination's lane in front of
a put on its way. Driven through the handler's `serve` seam (a group and a DLQ of
its own under the autojump clock), since the order of two puts on their way cannot
be forced on a real server. Each test says what was wrong before its fix."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import trio
import trio.testing

from mrs.config.bus import load_config
from mrs.dlq.engine import Engine
from mrs.dlq.handler import Handler, HandlerOptions
from mrs.dlq.parser import parse_table
from mrs.dlq.report import Reporter
from mrs.model import Message, Psb, Status
from tests.unit.test_dlq_engine import dead_letter

FULL_UNTIL_S = 100.0
"""The slow destination refuses every put (EXCEEDQUOTA) until this much test time."""


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


class _Group:
    """Puts to 1.11 are refused at once; puts to 1.14 take a second each and are
    refused until FULL_UNTIL_S, then stored."""

    def __init__(self) -> None:
        self.start_s = trio.current_time()
        self.stored: list[bytes] = []

    async def put(self, body: bytes, target: str, **_options) -> Psb:
        if target == "1.11":
            await trio.sleep(0.1)
            return Psb(Status.SUCCESS, Status.EXCEEDQUOTA, 1, Status.DISC_SUCCESS)
        await trio.sleep(1.0)
        if trio.current_time() - self.start_s < FULL_UNTIL_S:
            return Psb(Status.SUCCESS, Status.EXCEEDQUOTA, 1, Status.DISC_SUCCESS)
        self.stored.append(body)
        return Psb(Status.SUCCESS, Status.ENQUEUED, 1, Status.NO_UMA)


class _Dlq:
    def __init__(self, letters: list[Message]) -> None:
        self.letters = letters
        self.removed: list[int] = []

    async def take(self, timeout_s: float) -> Message | None:
        if self.letters:
            return self.letters.pop(0)
        await trio.sleep(timeout_s)
        return None

    async def before_put(self, message: Message) -> None:
        pass

    async def remove(self, message: Message, discarded: bool = False) -> None:
        self.removed.append(message.seq)


async def test_a_letter_joining_a_destination_ahead_of_a_put_on_its_way_is_not_stuck(
    autojump_clock, tmp_path: Path
) -> None:
    """Letter 1 (first on the DLQ) tries its own destination A, refused; letter 2's put
    to T is on its way. Letter 1's next rule is T: it joins T's lane in front of letter
    2 (DLQ order) and waits for that put to end. The put failed (T full), and letter 2
    stayed in the lane for its next RETRYINT, then waited behind letter 1, which nobody
    woke (only a letter leaving a lane woke its first): both were held for ever, T
    never got either after it drained, and `--once` never ended. Now the end of a put
    wakes the lane's first letter: both are forwarded, in DLQ order."""
    config = tmp_path / "bus.toml"
    config.write_text(
        '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n'
        '[[group.queue]]\nid = 11\nname = "A"\n[[group.queue]]\nid = 14\nname = "T"\n'
    )
    table = parse_table(
        "RETRYINT(10) WAIT(NO)\n"
        "APPLNAME(first) ACTION(FWD) FWDQ(A)\n"
        "ACTION(FWD) FWDQ(T) RETRY(20)\n"
    )
    group = _Group()
    letters = [
        dead_letter(seq, b"%d" % seq, put_appl_name=name)
        for seq, name in ((1, "first"), (2, "second"))
    ]
    dlq = _Dlq(letters)
    options = HandlerOptions("unused:0", 1, load_config(config), wait_s=0)
    handler = Handler(Engine(table), options, Reporter(True, io.StringIO()))
    with trio.move_on_after(10 * FULL_UNTIL_S) as deadline:
        await handler.serve(group, dlq)
    assert not deadline.cancelled_caught, "the handler held both letters for ever"
    assert dlq.removed == [1, 2]
    assert group.stored == [b"1", b"2"]  # the destination's letters in DLQ order
    assert handler.summary()["forwarded"] == 2
