"""`mrs dlq-handler` as an operator works dead letters: the mark a letter comes back
with after a handler held it (a graceful end, SIGTERM, SIGKILL, a server restart),
against real group processes and real handler processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, Status
from mrs.model import POSSIBLE_DUPLICATE_HEADER
from sim.ports import free_port
from sim.processes import write_single_group_config
from tests.client_helpers import take_all

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0


def _header(dest_q_name: str = "10") -> dict:
    """An MQDLH-like dead-letter header for a letter bound for 1.<dest_q_name>."""
    return {
        "struc_id": "DLH ",
        "version": 1,
        "reason": 2053,
        "dest_q_name": dest_q_name,
        "dest_q_mgr_name": "1",
        "format": "MRS",
        "put_appl_type": "MRS",
        "put_appl_name": "billing",
        "put_date": "20261123",
        "put_time": "12000000",
    }


async def _letters(bus, count: int, dest_q_name: str = "10", **options) -> list[int]:
    """`count` dead letters put straight on the DLQ, in order; their seqs."""
    seqs = []
    async with bus.connect(queue="SENDER") as sender:
        for index in range(count):
            psb = await sender.put(
                b"letter-%02d" % index,
                target="DLQ",
                delivery=options.get("delivery", DeliveryMode.WF_MEM),
                headers={"dead_letter_header": _header(dest_q_name)},
            )
            assert psb.delivery_status.ok, psb
            seqs.append(psb.seq)
    return seqs


def _command(bus, rules: Path, *extra: str) -> list[str]:
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--config", str(bus.config_path)]
    return [*command, "--group", "1", "--address", bus.address, "--json", *extra, str(rules)]


async def _marks_on_the_dlq(bus) -> dict[int, Status]:
    """seq -> the status a reader of the DLQ gets each letter with (each confirmed)."""
    async with bus.connect(queue="DLQ") as dlq:
        return {message.seq: message.delivery_status for message in await take_all(dlq)}


async def _held_by_a_reader(bus, count: int) -> dict:
    """The reader of the DLQ (`mrs status`) once it holds `count` letters."""
    async with bus.connect(queue=None) as client:
        with trio.fail_after(WAIT_S):
            while True:
                for reader in (await client.status())["dlq_readers"]:
                    if reader["held"] == count:
                        return reader
                await trio.sleep(0.05)


async def _no_reader_left(bus) -> None:
    """Return once no reader of the DLQ is attached (their leases are back)."""
    async with bus.connect(queue=None) as client:
        with trio.fail_after(WAIT_S):
            while (await client.status())["dlq_readers"]:
                await trio.sleep(0.05)


async def _read_line(stream: trio.abc.ReceiveStream, buffer: bytearray) -> bytes:
    """The next line of a child's output (b"" at its end), read as it comes."""
    while b"\n" not in buffer:
        chunk = await stream.receive_some()
        if not chunk:
            line, buffer[:] = bytes(buffer), b""
            return line
        buffer.extend(chunk)
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


# ---------------------------------------------------------------------- the marks
async def test_letters_a_handler_only_held_come_back_as_they_were(make_bus, tmp_path) -> None:
    """A `--once` run whose rules leave every letter (IGNORE) held them all, and every
    one came back POSSDUPL: the next run's FWD then marked each forwarded copy a
    possible duplicate, though the receiver had the only copy."""
    bus = make_bus()
    seqs = await _letters(bus, 3)
    ignore = tmp_path / "ignore.rules"
    ignore.write_text("ACTION(IGNORE)\n")
    first = subprocess.run(_command(bus, ignore, "--once"), capture_output=True, timeout=WAIT_S)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.splitlines()[-1])["summary"]["ignored"] == 3
    forward = tmp_path / "forward.rules"
    forward.write_text("ACTION(FWD) FWDQ(ANYORDER) HEADER(NO)\n")
    second = subprocess.run(_command(bus, forward, "--once"), capture_output=True, timeout=WAIT_S)
    assert second.returncode == 0, second.stderr
    events = [json.loads(line) for line in second.stdout.splitlines()]
    assert [(e["seq"], e["possdupl"]) for e in events if "seq" in e] == [
        (seq, False) for seq in seqs
    ]
    async with bus.connect(queue="ANYORDER") as target:
        arrived = await take_all(target)
    assert [m.body for m in arrived] == [b"letter-00", b"letter-01", b"letter-02"]
    assert {m.delivery_status for m in arrived} == {Status.SUCCESS}  # memory: no confirm
    assert not any((m.headers or {}).get(POSSIBLE_DUPLICATE_HEADER) for m in arrived)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "term"])
async def test_a_stopped_handler_marks_only_the_letter_it_put(
    make_bus, tmp_path, signum: signal.Signals
) -> None:
    """Five letters for a full queue, RETRY each: the first is tried (its put reached
    the group, which answered it EXCEEDQUOTA with its UMA DISC: no copy kept), the four
    behind it wait their turn. Stopped there, all five come back as they were: the one
    tried too, since its put's answer said no copy was kept (it came back POSSDUPL, and
    the next run, after the operator made room, flagged its only copy)."""
    bus = make_bus()
    async with bus.connect(queue="SENDER") as sender:
        for body in (b"fill-1", b"fill-2"):  # SMALL holds 2: every put to it is refused
            assert (await sender.put(body, target="SMALL", delivery=DeliveryMode.WF_MEM)).seq
    seqs = await _letters(bus, 5, dest_q_name="14")
    rules = tmp_path / "retry.rules"
    rules.write_text("RETRYINT(600) WAIT(YES)\nACTION(RETRY) RETRY(5)\n")
    process = await trio.lowlevel.open_process(
        _command(bus, rules), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdout is not None
    with trio.fail_after(WAIT_S):
        first = json.loads(await _read_line(process.stdout, bytearray()))
        assert (first["seq"], first["outcome"]) == (seqs[0], "failed")
        reader = await _held_by_a_reader(bus, 5)
        # `mrs status`'s Program column: the handler, where it showed the peer's address
        assert reader["program"] == "mrs dlq-handler" and reader["peer"].startswith("127.0.0.1")
        process.send_signal(signum)
        await process.wait()
        await _no_reader_left(bus)
    marks = await _marks_on_the_dlq(bus)
    assert marks == {seq: Status.CONFIRMREQ for seq in seqs}


async def test_a_journaled_dlq_keeps_the_letters_marks_exact_across_a_restart(
    make_bus, tmp_path
) -> None:
    """A recoverable DLQ writes each lease's delivery mark to disk before the letter
    goes out; a letter the handler only held kept that mark, and came back POSSDUPL
    from every restart of the group after the handler's run."""
    bus = make_bus(group_extra="dead_letter_queue_recoverable = true")
    seqs = await _letters(bus, 3, delivery=DeliveryMode.WF_DQF)
    rules = tmp_path / "ignore.rules"
    rules.write_text("ACTION(IGNORE)\n")
    done = subprocess.run(_command(bus, rules, "--once"), capture_output=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    await _no_reader_left(bus)
    async with bus.connect(queue="SENDER") as sender:  # committed after the marks' rewrite
        psb = await sender.put(b"after", target="ANYORDER", delivery=DeliveryMode.WF_DQF)
        assert psb.delivery_status == Status.STORED
    bus.restart()  # SIGKILL, then start on the same journals
    assert await _marks_on_the_dlq(bus) == {seq: Status.CONFIRMREQ for seq in seqs}


# ---------------------------------------------------------------------- the DLQ's cap
async def test_the_dlqs_unconfirmed_cap_ends_a_once_run_normally(make_bus, tmp_path) -> None:
    """The DLQ hands out at most 10,000 letters unconfirmed, to all its readers
    together. A handler that reached that cap (another reader held one, so its own
    record of 10,000 was not full) asked again, was refused EXCMAXUNCONF, and ended
    with exit 3, "group 1 refused": what the docs call a lost connection. Now the
    cap is a record full of the DLQ's: one note, and WAIT(NO) ends as usual."""
    bus = make_bus()
    from clients.batch import PutItem

    letter = {"dead_letter_header": _header()}
    item = PutItem(b"l", "DLQ", DeliveryMode.WF_MEM, headers=letter)
    async with bus.connect(queue="SENDER") as sender:
        for _ in range(10):
            results = await sender.put_many([item] * 1000)
            assert all(not isinstance(result, Exception) for result in results)
    rules = tmp_path / "ignore.rules"
    rules.write_text("ACTION(IGNORE)\n")
    async with bus.connect(queue="DLQ") as other_reader:
        held = await other_reader.get(timeout=5)  # held, not confirmed
        with trio.fail_after(WAIT_S):
            done = await trio.run_process(
                _command(bus, rules, "--once"),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        assert lines[-1]["summary"]["ignored"] == 9999
        notes = [line["note"] for line in lines if "note" in line]
        assert len(notes) == 1 and "unconfirmed_max=10000" in notes[0], notes
        await other_reader.confirm(held.seq)


async def test_once_ends_at_once_with_one_place_left_in_the_record(make_bus, tmp_path) -> None:
    """`--seen-max 50` and 49 letters left on the DLQ: with one place left the other
    31 takers each waited a 1 s poll for it, one after another, and `--once` ended
    half a minute after its last letter."""
    bus = make_bus()
    await _letters(bus, 49)
    rules = tmp_path / "ignore.rules"
    rules.write_text("ACTION(IGNORE)\n")
    command = _command(bus, rules, "--once", "--seen-max", "50")
    with trio.fail_after(15):  # a few seconds; over 31 before
        done = await trio.run_process(command, capture_stdout=True, capture_stderr=True)
    assert json.loads(done.stdout.splitlines()[-1])["summary"]["ignored"] == 49


async def test_a_group_stopped_under_a_handler_keeps_the_held_letters_unmarked(
    make_bus, tmp_path
) -> None:
    """The handler's connection lost because its group was stopped (SIGTERM) and
    started again, with a recoverable DLQ: the group gave the handler's leases back
    as it stopped, and the letters the handler only held are not POSSDUPL after."""
    bus = make_bus(group_extra="dead_letter_queue_recoverable = true")
    seqs = await _letters(bus, 3, delivery=DeliveryMode.WF_DQF)
    rules = tmp_path / "ignore.rules"
    rules.write_text("ACTION(IGNORE)\n")
    process = await trio.lowlevel.open_process(
        _command(bus, rules), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    with trio.fail_after(WAIT_S):
        await _held_by_a_reader(bus, 3)
        bus.restart(graceful=True)
        assert await process.wait() == 3  # the connection was lost: exit 3
    assert await _marks_on_the_dlq(bus) == {seq: Status.CONFIRMREQ for seq in seqs}


# ---------------------------------------------------------------------- the command
def test_a_group_without_a_dlq_is_refused_before_anything_runs(tmp_path) -> None:
    """`--check` called the table valid against a group with `dead_letter_queue =
    false`, and the run then ended with exit 3, "group 1 refused: NOSUCHQUEUE", the
    code the docs give a lost connection. It is a mistake in the configuration the
    operator can fix: exit 2, one line, from --check and from a run alike."""
    config = write_single_group_config(tmp_path, group_extra="dead_letter_queue = false")
    rules = tmp_path / "ignore.rules"
    rules.write_text("ACTION(IGNORE)\n")
    base = [sys.executable, "-m", "mrs", "dlq-handler", "--config", str(config), "--group", "1"]
    for extra in (["--check"], ["--once", "--address", f"127.0.0.1:{free_port()}"]):
        done = subprocess.run([*base, *extra, str(rules)], capture_output=True, timeout=WAIT_S)
        assert done.returncode == 2, done
        [line] = done.stderr.decode().splitlines()
        assert "has no dead letter queue (dead_letter_queue = false" in line, line
