"""`mrs dlq-handler` against a real group whose journal fails the DLQ confirm after
the letter's put was stored (a transient JOURNAL_FAIL: the harness's fault file),
and `mrs status`'s count of a letter whose put failed before a DISCARD rule took it.

The lease state machine's own defects (a stale lease taking back another reader's
letter) are driven in process: tests/unit/test_dlq_leases_24b.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import trio

from clients import DeliveryMode, Status, Uma
from mrs.model import POSSIBLE_DUPLICATE_HEADER
from tests.client_helpers import take_all

WAIT_S = 60.0
RETRY_RULES = "RETRYINT(1) WAIT(3)\nACTION(RETRY) RETRY(100)\n"


def _faulty_bus(make_bus, tmp_path: Path):
    """A group with a recoverable DLQ whose commits fail while its fault file says EIO."""
    fault = tmp_path / "fault"
    fault.write_text("")
    bus = make_bus(
        group_extra="dead_letter_queue_recoverable = true", env={"MRS_FAULT_FILE": str(fault)}
    )
    return bus, fault


async def _a_letter_for_a_full_queue(bus) -> int:
    """SMALL (2 places) filled, then one memory put to it dead-lettered (UMA DLQ): a
    letter journaled on the recoverable DLQ whose RETRY is a memory put (no commit)."""
    async with bus.connect(queue="SENDER") as sender:
        for body in (b"fill-1", b"fill-2"):
            assert (await sender.put(body, target="SMALL", delivery=DeliveryMode.WF_MEM)).seq
        psb = await sender.put(b"letter", target="SMALL", delivery=DeliveryMode.WF_MEM, uma=Uma.DLQ)
        assert psb.uma_status == Status.DLQ_SUCCESS, psb
    async with bus.connect(queue=None) as client:
        assert (await client.status())["queues"]["1.96"]["dqf_depth"] == 1  # journaled
    return psb.seq


def _command(bus, rules: Path, *extra: str) -> list[str]:
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--config", str(bus.config_path)]
    return [*command, "--group", "1", "--address", bus.address, "--json", *extra, str(rules)]


async def _read_event(stream: trio.abc.ReceiveStream, buffer: bytearray) -> dict:
    """The handler's next JSON line."""
    while b"\n" not in buffer:
        chunk = await stream.receive_some()
        assert chunk, f"the handler ended: {bytes(buffer)!r}"
        buffer.extend(chunk)
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return json.loads(line)


async def _failed_commits(bus, at_least: int) -> None:
    """Return once the group's writer has failed `at_least` batches."""
    async with bus.connect(queue=None) as client:
        with trio.fail_after(WAIT_S):
            while (await client.status())["writer"]["failed_batches"] < at_least:
                await trio.sleep(0.02)


async def _no_reader_left(bus) -> None:
    """Return once no reader of the DLQ is attached (their leases are back)."""
    async with bus.connect(queue=None) as client:
        with trio.fail_after(WAIT_S):
            while (await client.status())["dlq_readers"]:
                await trio.sleep(0.02)


async def _handler_tried_once_then_drain(bus, rules: Path, fault: Path):
    """Start the handler; after its first (refused) RETRY, fail the group's commits
    and make room in SMALL, so the next RETRY put is stored and its confirm fails."""
    process = await trio.lowlevel.open_process(
        _command(bus, rules), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    buffer = bytearray()
    first = await _read_event(process.stdout, buffer)
    assert first["outcome"] == "failed" and "EXCEEDQUOTA" in first["detail"], first
    fault.write_text("EIO")
    async with bus.connect(queue="SMALL") as small:
        assert [m.body for m in await take_all(small)] == [b"fill-1", b"fill-2"]
    return process, buffer


async def _summary(process, buffer: bytearray) -> dict:
    assert process.stdout is not None
    while True:
        line = await _read_event(process.stdout, buffer)
        if "summary" in line:
            return line["summary"]


async def test_a_confirm_that_failed_for_a_moment_is_sent_again(make_bus, tmp_path) -> None:
    """The RETRY put was stored, then the DLQ confirm failed JOURNAL_FAIL: the handler
    ended with exit 3 and the letter, already delivered, came back to be put again.
    Now the confirm is sent again: the letter leaves the DLQ, exit 0, one copy."""
    bus, fault = _faulty_bus(make_bus, tmp_path)
    await _a_letter_for_a_full_queue(bus)
    rules = tmp_path / "retry.rules"
    rules.write_text(RETRY_RULES)
    with trio.fail_after(WAIT_S):
        process, buffer = await _handler_tried_once_then_drain(bus, rules, fault)
        await _failed_commits(bus, 1)  # the confirm's
        fault.write_text("")
        event = await _read_event(process.stdout, buffer)  # type: ignore[arg-type]
        assert event["outcome"] == "retried" and "not removed" not in event["detail"], event
        summary = await _summary(process, buffer)
        assert await process.wait() == 0
    assert (summary["retried"], summary["held_not_removed"]) == (1, 0), summary
    async with bus.connect(queue="SMALL") as small:
        assert [m.body for m in await take_all(small)] == [b"letter"]
    async with bus.connect(queue="DLQ") as dlq:
        assert await take_all(dlq) == []


async def test_a_confirm_that_keeps_failing_leaves_the_letter_held_not_put_again(
    make_bus, tmp_path
) -> None:
    """Every send of the confirm fails: the letter stays held (one report line, the
    handler goes on), comes back POSSDUPL when the handler ends, and the next run's
    put of it is marked a possible duplicate: never a second copy unmarked."""
    bus, fault = _faulty_bus(make_bus, tmp_path)
    seq = await _a_letter_for_a_full_queue(bus)
    rules = tmp_path / "retry.rules"
    rules.write_text(RETRY_RULES)
    with trio.fail_after(WAIT_S):
        process, buffer = await _handler_tried_once_then_drain(bus, rules, fault)
        event = await _read_event(process.stdout, buffer)  # type: ignore[arg-type]
        assert event["outcome"] == "retried" and "not removed from the DLQ" in event["detail"]
        assert "JOURNAL_FAIL" in event["detail"], event
        fault.write_text("")
        summary = await _summary(process, buffer)
        assert await process.wait() == 0
    assert (summary["retried"], summary["held_not_removed"]) == (1, 1), summary
    async with bus.connect(queue="DLQ") as dlq:  # looked at, given back unconfirmed
        again = await dlq.get(timeout=0)
        assert (again.seq, again.delivery_status) == (seq, Status.POSSDUPL)
    await _no_reader_left(bus)
    done = subprocess.run(_command(bus, rules, "--once"), capture_output=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    async with bus.connect(queue="SMALL") as small:
        copies = await take_all(small)
    marks = [bool((m.headers or {}).get(POSSIBLE_DUPLICATE_HEADER)) for m in copies]
    assert [m.body for m in copies] == [b"letter", b"letter"] and marks == [False, True]


async def test_status_counts_a_letter_discarded_after_a_failed_put_as_discarded(
    make_bus, tmp_path
) -> None:
    """A FWD to a full queue failed (its put reached the group), then the DISCARD rule
    took the letter: `mrs status` showed it moved, as every letter a put had named."""
    bus = make_bus()
    async with bus.connect(queue="SENDER") as sender:
        for body in (b"fill-1", b"fill-2"):
            assert (await sender.put(body, target="SMALL", delivery=DeliveryMode.WF_MEM)).seq
        header = {"reason": 2053, "dest_q_name": "10", "dest_q_mgr_name": "1", "format": "MRS"}
        psb = await sender.put(
            b"letter",
            target="DLQ",
            delivery=DeliveryMode.WF_MEM,
            headers={"dead_letter_header": {"struc_id": "DLH ", "version": 1, **header}},
        )
        assert psb.delivery_status.ok, psb
    rules = tmp_path / "fwd.rules"
    rules.write_text("RETRYINT(1) WAIT(YES)\nACTION(FWD) FWDQ(SMALL) RETRY(1)\nACTION(DISCARD)\n")
    process = await trio.lowlevel.open_process(
        _command(bus, rules), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdout is not None
    buffer = bytearray()
    try:
        with trio.fail_after(WAIT_S):
            tried = await _read_event(process.stdout, buffer)
            assert (tried["action"], tried["outcome"]) == ("FWD", "failed"), tried
            discarded = await _read_event(process.stdout, buffer)
            assert (discarded["seq"], discarded["outcome"]) == (psb.seq, "discarded")
            async with bus.connect(queue=None) as client:
                [reader] = (await client.status())["dlq_readers"]
        counts = {key: reader[key] for key in ("got", "put", "moved", "discarded", "held")}
        assert counts == {"got": 1, "put": 1, "moved": 0, "discarded": 1, "held": 0}
    finally:
        process.terminate()
        await process.wait()
