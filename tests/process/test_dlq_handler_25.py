"""`mrs dlq-handler` and the DLQ put path, as an operator meets them: a forward the
group refuses as it arrives (KEY_REUSED, an unknown sender) leaves its letter as it
was, not POSSDUPL; and with INPUTQ(DLJ), a record whose removal from the journal
failed (a device error: the handler's fault file) is removed exactly once, a second
act of it marked a possible duplicate, across the failure and a restart."""

from __future__ import annotations

import argparse
import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import trio

from clients import DeliveryMode, MrsError, Status, Uma
from journals import Journal, JournalStore, Record
from mrs.config.bus import load_config
from mrs.dlq import sources
from mrs.dlq.command import _names
from mrs.dlq.engine import Engine
from mrs.dlq.handler import Handler, HandlerOptions
from mrs.dlq.parser import parse_table
from mrs.dlq.report import Reporter
from mrs.group.dlq_leases import CONTEXT_HEADER, HANDLER_PROGRAM
from mrs.model import POSSIBLE_DUPLICATE_HEADER
from mrs.offline.journal_files import locate
from mrs.offline.redrive_traces import handler_attempt_key
from tests.client_helpers import take_all

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0


def _command(bus, rules: Path, *extra: str) -> list[str]:
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--config", str(bus.config_path)]
    return [*command, "--group", "1", "--address", bus.address, "--json", *extra, str(rules)]


def _run(bus, rules: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        _command(bus, rules, "--once"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=WAIT_S,
        env={**os.environ, **(env or {})},
    )


def _events(result: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


async def _marks_on_the_dlq(bus) -> dict[int, Status]:
    """seq -> the status a reader of the DLQ gets each letter with (each confirmed)."""
    async with bus.connect(queue="DLQ") as dlq:
        return {message.seq: message.delivery_status for message in await take_all(dlq)}


async def _no_reader_left(bus) -> None:
    async with bus.connect(queue=None) as client:
        with trio.fail_after(WAIT_S):
            while (await client.status())["dlq_readers"]:
                await trio.sleep(0.02)


async def _a_dead_letter(bus) -> int:
    """A recoverable put to 1.50 (no DQF) dead-lettered by the DLQ UMA; its seq."""
    async with bus.connect(queue="SENDER") as sender:
        psb = await sender.put(b"letter", target="1.50", delivery=DeliveryMode.WF_DQF, uma=Uma.DLQ)
        assert psb.uma_status == Status.DLQ_SUCCESS, psb
    return psb.seq


# ------------------------------------------------- a refused put is not a put made
async def test_a_forward_refused_key_reused_leaves_the_letter_as_it_was(bus, tmp_path) -> None:
    """The handler's forward of a letter was refused KEY_REUSED (another body already
    stored under its key): no copy left, yet the group counted the put, and the
    letter came back POSSDUPL, its next forward marked a possible duplicate at a
    receiver that got the only copy."""
    await _a_dead_letter(bus)
    async with bus.connect(queue="DLQ", program=HANDLER_PROGRAM) as peek:  # gives it back
        letter = await peek.get(timeout=5)
        assert letter.delivery_status == Status.CONFIRMREQ
    await _no_reader_left(bus)
    header = letter.dead_letter_header
    key = f"dlq:1:{letter.seq}:{header['put_date']}{header['put_time']}:1.11"
    async with bus.connect(queue="SENDER") as sender:  # the letter's sender: its scope
        psb = await sender.put(
            b"another body",
            target="ANYORDER",
            delivery=DeliveryMode.WF_DQF,
            headers={"idempotency_key": key},
        )
        assert psb.delivery_status == Status.STORED, psb
    rules = tmp_path / "fwd.rules"
    rules.write_text("ACTION(FWD) FWDQ(ANYORDER)\n")
    result = _run(bus, rules)
    assert result.returncode == 0, result.stderr
    [attempt, left] = [event for event in _events(result) if "seq" in event]
    assert attempt["outcome"] == "failed" and "KEY_REUSED" in attempt["detail"], attempt
    assert left["outcome"] == "left", left
    await _no_reader_left(bus)
    assert await _marks_on_the_dlq(bus) == {letter.seq: Status.CONFIRMREQ}


async def test_a_put_refused_for_its_passed_sender_is_not_counted(bus) -> None:
    """A DLQ reader's put passing a sender the bus does not know is refused
    NOSUCHQUEUE: it is not a put of the letter (`mrs status` counts none), and the
    letter comes back as it was."""
    seq = await _a_dead_letter(bus)
    async with bus.connect(queue="DLQ", program=HANDLER_PROGRAM) as reader:
        letter = await reader.get(timeout=5)
        context = {"source": "1.9999", "put_time_ns": letter.put_time_ns, "dlq_seq": seq}
        try:
            await reader.put(
                b"letter",
                target="ANYORDER",
                delivery=DeliveryMode.WF_MEM,
                headers={CONTEXT_HEADER: context},
            )
        except MrsError as error:
            assert error.status == Status.NOSUCHQUEUE, error
        else:
            raise AssertionError("a put passing an unknown sender was taken in")
        async with bus.connect(queue=None) as client:
            [counts] = (await client.status())["dlq_readers"]
        assert (counts["put"], counts["held"]) == (0, 1), counts
    await _no_reader_left(bus)
    assert await _marks_on_the_dlq(bus) == {seq: Status.CONFIRMREQ}


# ------------------------------------------------- INPUTQ(DLJ): removed exactly once
FORWARD_DLJ = "INPUTQ(DLJ) WAIT(NO)\nACTION(FWD) FWDQ(ANYORDER)\n"


async def _journaled(bus) -> int:
    """A put to 1.50 (no such queue) journaled in the DLJ by its UMA; its seq."""
    async with bus.connect(queue="SENDER") as sender:
        psb = await sender.put(
            b"journaled", target="1.50", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ
        )
        assert psb.uma_status == Status.DLJ_SUCCESS, psb
    return psb.seq


def _dlj(bus) -> dict[int, bool]:
    """seq -> whether the handler's attempt mark is on it, for each DLJ record."""
    store = JournalStore(bus.data_dir / "journals", readonly=True)
    try:
        return {
            record.seq: store.get_raw(Journal.META, handler_attempt_key(record.seq)) is not None
            for _key, record in store.scan(Journal.DLJ)
            if isinstance(record, Record)
        }
    finally:
        store.close()


class _Script:
    """A fault hook for the handler's own DLJ commits, numbered from 1 (the attempt
    mark, then each try of the removal): the commits named fail at their flush (EIO),
    where a device error comes (mrs.storage.fault_file)."""

    def __init__(self, *failing: int) -> None:
        self.failing = set(failing)
        self.commits = 0

    def __call__(self, phase: str) -> None:
        if phase == "commit":
            self.commits += 1
        elif self.commits in self.failing:
            raise OSError(errno.EIO, f"injected EIO on commit {self.commits}")


async def _handle_in_process(bus, rules: str, script: _Script, monkeypatch) -> list[dict]:
    """Run the handler in this process against the group's process and its real
    journals, its DLJ commits failing as `script` says; its report lines, the last
    its summary."""
    monkeypatch.setattr(sources, "file_fault_hook", lambda _path: script)
    config = load_config(bus.config_path)
    where = locate(argparse.Namespace(config=bus.config_path, group=1, data_dir=None))
    options = HandlerOptions(
        bus.address, 1, config, wait_s=0, window=4, dlj=where, fault_file=Path("scripted")
    )
    out = io.StringIO()
    engine = Engine(parse_table(rules), names=_names(config))
    handler = Handler(engine, options, Reporter(True, out))
    with trio.fail_after(WAIT_S):
        await handler.run()
    return [*map(json.loads, out.getvalue().splitlines()), {"summary": handler.summary()}]


async def test_a_dlj_removal_that_failed_for_a_moment_is_made_again(bus, monkeypatch) -> None:
    """The forward was stored, then the deletion of the DLJ record failed once (EIO):
    the handler ended with a traceback, every put on its way cut off, and the record
    stayed to be forwarded again. Now the deletion is made again: one copy, no
    record, the run ends normally."""
    seq = await _journaled(bus)
    script = _Script(2)  # the mark passes; the removal's first try fails
    events = await _handle_in_process(bus, FORWARD_DLJ, script, monkeypatch)
    [event] = [event for event in events if "seq" in event]
    assert (event["seq"], event["outcome"], event["detail"]) == (seq, "forwarded", "STORED")
    assert events[-1]["summary"]["held_not_removed"] == 0
    assert script.commits == 3 and _dlj(bus) == {}
    async with bus.connect(queue="ANYORDER") as target:
        assert [m.body for m in await take_all(target)] == [b"journaled"]


async def test_a_dlj_attempt_mark_that_failed_means_no_put(bus, monkeypatch) -> None:
    """The attempt mark could not be committed: the put is not made (killed after
    it, the next run would have repeated it unmarked). The attempt fails, the record
    stays as it was, and the next run forwards it unmarked, once."""
    seq = await _journaled(bus)
    events = await _handle_in_process(bus, FORWARD_DLJ, _Script(1), monkeypatch)
    failed, left = [event for event in events if "seq" in event]
    assert failed["outcome"] == "failed" and "attempt mark" in failed["detail"], failed
    assert left["outcome"] == "left" and _dlj(bus) == {seq: False}
    async with bus.connect(queue="ANYORDER") as target:
        assert await take_all(target) == []
    events = await _handle_in_process(bus, FORWARD_DLJ, _Script(), monkeypatch)
    [event] = [event for event in events if "seq" in event]
    assert (event["outcome"], event["possdupl"]) == ("forwarded", False)
    assert _dlj(bus) == {}


async def test_a_dlj_discard_whose_removal_failed_once_is_discarded(bus, monkeypatch) -> None:
    seq = await _journaled(bus)
    rules = "INPUTQ(DLJ) WAIT(NO)\nACTION(DISCARD)\n"
    events = await _handle_in_process(bus, rules, _Script(1), monkeypatch)
    [event] = [event for event in events if "seq" in event]
    assert (event["seq"], event["outcome"]) == (seq, "discarded")
    assert _dlj(bus) == {}


async def _forward_while_the_dlj_fails(bus, rules: Path, seq: int, server_fault: Path) -> dict:
    """`mrs dlq-handler` forwards the record; once its attempt mark is committed (the
    put goes out, slowed by the group's SLOW commit), its own fault file turns EIO:
    every try of the removal fails. Its exit code and report lines."""
    handler_fault = server_fault.with_name("handler-fault")
    handler_fault.write_text("")
    server_fault.write_text("SLOW 2")
    done: dict = {}

    async def handler() -> None:
        env = {**os.environ, "MRS_FAULT_FILE": str(handler_fault)}
        done["result"] = await trio.run_process(
            _command(bus, rules), capture_stdout=True, capture_stderr=True, check=False, env=env
        )

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(handler)
            while not _dlj(bus).get(seq):  # the mark is on disk: the put is on its way
                await trio.sleep(0.02)
            handler_fault.write_text("EIO")
    server_fault.write_text("")
    result = done["result"]
    lines = result.stdout.decode().splitlines()
    return {"code": result.returncode, "stderr": result.stderr, "events": [*map(json.loads, lines)]}


async def test_a_dlj_record_whose_removal_keeps_failing_is_repeated_marked(
    make_bus, tmp_path
) -> None:
    """The forward was stored and the DLJ kept failing the record's deletion: the
    handler reported it forwarded but not removed, went on and ended normally (exit
    0), the record left with its attempt mark. The next run repeats it marked
    POSSDUPL, under the same idempotency key: the group keeps the one copy it has,
    and the record is gone. (A DLJ record is recoverable: UMA DLJ is refused for the
    memory modes.)"""
    server_fault = tmp_path / "server-fault"
    server_fault.write_text("")
    bus = make_bus(env={"MRS_FAULT_FILE": str(server_fault)})
    seq = await _journaled(bus)
    rules = tmp_path / "dlj.rules"
    rules.write_text(FORWARD_DLJ)
    first = await _forward_while_the_dlj_fails(bus, rules, seq, server_fault)
    assert first["code"] == 0, first["stderr"]
    [event] = [event for event in first["events"] if "seq" in event]
    assert event["outcome"] == "forwarded", event
    assert "not removed from the DLJ: the DLJ deletion failed 5 times" in event["detail"]
    assert first["events"][-1]["summary"]["held_not_removed"] == 1
    assert _dlj(bus) == {seq: True}
    again = _run(bus, rules)
    assert again.returncode == 0, again.stderr
    [event] = [event for event in _events(again) if "seq" in event]
    assert (event["seq"], event["outcome"], event["possdupl"]) == (seq, "forwarded", True)
    assert _dlj(bus) == {}
    async with bus.connect(queue="ANYORDER") as target:
        copies = await take_all(target)
    assert [m.body for m in copies] == [b"journaled"]
    assert not (copies[0].headers or {}).get(POSSIBLE_DUPLICATE_HEADER)  # the first put's
