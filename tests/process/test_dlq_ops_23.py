"""The dead-letter handler run as an operator runs it for hours: the group's server
restarted under it, a forward to another group's queue over a link with the handler
SIGKILLed in the middle, and the notes it prints about its record of held letters.
Each test says what a user saw before its fix (or what it guards)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, Status, Uma
from mrs.config.bus import load_config
from mrs.dlq.command import _names
from mrs.dlq.engine import Engine
from mrs.dlq.handler import Handler, HandlerOptions
from mrs.dlq.parser import parse_table
from mrs.dlq.report import Reporter
from sim.bus import LinkedBus
from tests.client_helpers import take_all
from tests.conftest import STANDARD_QUEUES

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
WAIT_S = 60.0
"""Deadline for what another process must do, on a loaded 2-core machine."""


def _handler_command(config: Path, address: str, rules: Path, *extra: str) -> list[str]:
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--config", str(config)]
    return [*command, "--group", "1", "--address", address, "--json", *extra, str(rules)]


async def _dead_letters(connect, bodies: list[bytes], delivery: DeliveryMode) -> None:
    """Each body put to 1.50 (no such queue) with UMA DLQ: a dead letter with its
    header, in this order on group 1's DLQ."""
    async with connect(1, "SENDER") as sender:
        for body in bodies:
            psb = await sender.put(body, target="1.50", delivery=delivery, uma=Uma.DLQ)
            assert psb.uma_status == Status.DLQ_SUCCESS, psb


@pytest.fixture
def one_group(tmp_path: Path) -> Iterator[LinkedBus]:
    """Group 1 alone on a fixed port (a restarted server listens where it did, as an
    operator's does), with a recoverable DLQ: its letters survive the restart."""
    bus = LinkedBus(
        tmp_path / "bus",
        group_ids=(1,),
        queues=STANDARD_QUEUES,
        group_extra="dead_letter_queue_recoverable = true",
    )
    bus.start()
    yield bus
    bus.stop()


@pytest.fixture
def two_groups(tmp_path: Path) -> Iterator[LinkedBus]:
    """Groups 1 and 2 with the standard queues, linked directly."""
    bus = LinkedBus(
        tmp_path / "bus", queues=STANDARD_QUEUES, direct=True, limits="dqf_messages_max = 1000"
    )
    bus.start()
    yield bus
    bus.stop()


async def _lines_until(process: trio.Process, out: bytearray, wanted: str) -> list[dict]:
    """The handler's JSON lines, read as they come, up to the first holding `wanted`."""
    lines: list[dict] = []
    assert process.stdout is not None
    while not any(wanted in json.dumps(line) for line in lines):
        while b"\n" not in out:
            chunk = await process.stdout.receive_some()
            assert chunk, f"the handler ended before {wanted!r}: {lines}"
            out.extend(chunk)
        line, _, rest = bytes(out).partition(b"\n")
        out[:] = rest
        lines.append(json.loads(line))
    return lines


async def test_a_server_restarted_under_a_waiting_handler_ends_it_with_exit_3(
    one_group, tmp_path
) -> None:
    """A handler (WAIT(YES)) whose record is full of letters it leaves (IGNORE) sends
    no request while it waits for room. Its client reconnected by itself when the
    server restarted: the handler went on, believing it held letters the server had
    given back to the DLQ, took nothing new for ever and said nothing (exit 3 "the
    connection was lost" never came). Now a lost connection ends it: exit 3, a note,
    the summary, and every letter is on the DLQ for the next run."""
    bus = one_group
    await _dead_letters(bus.connect, [b"a", b"b", b"c"], DeliveryMode.WF_DQF)
    rules = tmp_path / "ignore.rules"
    rules.write_text("ACTION(IGNORE)\n")
    command = _handler_command(bus.config_path, bus.address(1), rules, "--seen-max", "2")
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, cwd=ROOT, env=ENV)
    out = bytearray()
    try:
        with trio.fail_after(WAIT_S):
            for _ in range(2):  # both held, left: no take is out now
                await _lines_until(process, out, '"outcome": "left"')
            bus.processes[1].restart()  # SIGKILL, then the same data and port
            lines = await _lines_until(process, out, "summary")
            status = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
    assert status == 3
    assert "lost" in lines[-2]["note"]
    assert lines[-1]["summary"]["ignored"] == 2
    async with bus.connect(1, "DLQ") as dlq:
        left = await take_all(dlq)
    assert sorted(message.body for message in left) == [b"a", b"b", b"c"]


async def test_sigkill_mid_forward_to_another_groups_queue_loses_nothing(
    two_groups, tmp_path
) -> None:
    """FWD to a queue of group 2 over the link; the handler SIGKILLed in the middle,
    run again: every letter arrives, recoverable ones once (the repeat carries the
    same idempotency key), and none is left on the DLQ."""
    bus = two_groups
    count = 60
    await _dead_letters(bus.connect, [b"%02d" % i for i in range(count)], DeliveryMode.WF_DQF)
    rules = tmp_path / "link.rules"
    rules.write_text("ACTION(FWD) FWDQ(ANYORDER) FWDQM(G2)\n")
    command = _handler_command(bus.config_path, bus.address(1), rules, "--once", "--window", "2")
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, cwd=ROOT, env=ENV)
    with trio.fail_after(WAIT_S):
        await _lines_until(process, bytearray(), '"forwarded"')
        process.send_signal(signal.SIGKILL)
        await process.wait()
    command = _handler_command(bus.config_path, bus.address(1), rules, "--once")
    again = await trio.run_process(command, capture_stdout=True, cwd=ROOT, env=ENV)
    summary = json.loads(again.stdout.splitlines()[-1])["summary"]
    assert 0 < summary["forwarded"] < count
    arrived: list[bytes] = []
    async with bus.connect(2, "ANYORDER") as target:
        with trio.fail_after(WAIT_S):
            while len(arrived) < count:
                message = await target.get(timeout=WAIT_S)
                await target.confirm(message.seq)
                arrived.append(message.body)
        assert await take_all(target) == []  # nothing twice
    assert sorted(arrived) == [b"%02d" % i for i in range(count)]
    async with bus.connect(1, "DLQ") as dlq:
        assert await take_all(dlq) == []


async def test_takes_on_their_way_are_not_told_as_a_full_record(mem_bus) -> None:
    """With --seen-max under --window, the takers waiting for their turn printed "the
    record of messages held is full ... taking no more until some leave" at start, on
    an empty DLQ: an operator looked for letters that were not there. Told now only
    when held letters fill the record."""
    config = load_config(mem_bus.config_path)
    out = io.StringIO()
    options = HandlerOptions(
        mem_bus.address, 1, config, 0, window=8, seen_max=2, open_stream=mem_bus.open_stream
    )
    table = parse_table("ACTION(FWD) FWDQ(ANYORDER)\n")
    engine = Engine(table, names=_names(config), seen_max=2)
    handler = Handler(engine, options, Reporter(True, out))
    await handler.run()
    assert "record of messages held is full" not in out.getvalue()


class _NotedOut(io.StringIO):
    """The handler's report, with an event set when a note holding `wanted` is written."""

    def __init__(self, wanted: str) -> None:
        super().__init__()
        self.wanted = wanted
        self.noted = trio.Event()

    def write(self, text: str) -> int:
        if self.wanted in text:
            self.noted.set()
        return super().write(text)


async def test_the_letters_worked_at_once_are_bounded_in_bytes(mem_bus) -> None:
    """Letters behind one waiting for its retry were all taken, bodies and all: only
    their count was bounded (--seen-max, 10,000), so a DLQ of 1 MiB letters made a
    handler of gigabytes. Now what it works at once is bounded in bytes of bodies
    (--held-bytes-max), with one note, and every letter still goes where it should."""
    bodies = [b"%d" % index + b"x" * 999 for index in range(6)]
    async with mem_bus.connect(queue="SENDER") as sender:
        for body in [b"full", b"full", *bodies]:  # SMALL holds 2: the rest dead-lettered
            await sender.put(body, target="SMALL", delivery=DeliveryMode.WF_MEM, uma=Uma.DLQ)
    config = load_config(mem_bus.config_path)
    table = parse_table(
        "RETRYINT(5) WAIT(NO)\nACTION(RETRY) RETRY(2)\nACTION(FWD) FWDQ(ANYORDER)\n"
    )
    out = _NotedOut("bytes of bodies")
    # window 1: one take at a time (with more, the takes already on their way when
    # the bound is reached arrive too: at most --window letters beyond it)
    options = HandlerOptions(mem_bus.address, 1, config, 0, 1, open_stream=mem_bus.open_stream)
    options.held_bytes_max = 2500
    handler = Handler(Engine(table, names=_names(config)), options, Reporter(True, out))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handler.run)
        with trio.move_on_after(20):  # virtual time: the first letter still retries
            await out.noted.wait()
        assert out.noted.is_set(), out.getvalue()
        async with mem_bus.connect(queue=None) as client:
            [reader] = (await client.status())["dlq_readers"]
        assert reader["held"] == 3  # 3 x 1000 bytes reach 2500: no fourth is taken
    assert handler.summary()["forwarded"] == 6
    async with mem_bus.connect(queue="ANYORDER") as target:
        assert [message.body for message in await take_all(target)] == bodies


def test_a_held_bytes_bound_under_one_is_refused_in_one_line(tmp_path) -> None:
    """--held-bytes-max 0 would take nothing at all: refused as --window 0 is."""
    rules = tmp_path / "rules.txt"
    rules.write_text("ACTION(DISCARD)\n")
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--check", "--held-bytes-max", "0"]
    result = subprocess.run([*command, str(rules)], capture_output=True, cwd=ROOT, env=ENV)
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        "mrs dlq-handler: --held-bytes-max must be at least 1"
    ]
