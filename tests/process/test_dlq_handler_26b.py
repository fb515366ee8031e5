"""`mrs dlq-handler` as an operator meets it, against real group processes: a group
it never reached (nothing listens at the address) is told as such, not as a
connection lost; and with INPUTQ(DLJ), a put the group refused outright (nothing
stored) leaves no attempt mark, so the next run's put of that record is not flagged
a possible duplicate, while a put whose outcome is unknown keeps it."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import trio

from clients import DeliveryMode, Status, Uma
from journals import Journal, JournalStore, Record
from mrs.config.bus import load_config
from mrs.dlq.command import _names
from mrs.dlq.engine import Engine
from mrs.dlq.handler import Handler, HandlerOptions
from mrs.dlq.parser import parse_table
from mrs.dlq.report import Reporter
from mrs.limits import REPLY_GRACE_S
from mrs.model import POSSIBLE_DUPLICATE_HEADER
from mrs.offline.journal_files import locate
from mrs.offline.redrive_traces import handler_attempt_key
from sim.ports import free_port
from sim.processes import write_single_group_config
from tests.client_helpers import take_all
from tests.journal_helpers import record

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0


def _command(config: Path, address: str, rules: Path, *extra: str) -> list[str]:
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--config", str(config)]
    return [*command, "--group", "1", "--address", address, "--json", *extra, str(rules)]


def _notes(stdout: str) -> list[str]:
    lines = [json.loads(line) for line in stdout.splitlines()]
    return [line["note"] for line in lines if "note" in line]


# ------------------------------------------------- never connected vs. connection lost
def test_a_group_never_reached_is_told_as_not_reached(tmp_path) -> None:
    """Why: nothing listening at the address (a wrong port, the group not started)
    was told "connection to group 1 at ... lost", as if the handler had been working
    the DLQ when it went: the operator looks for a crash that never happened."""
    config = write_single_group_config(tmp_path)
    rules = tmp_path / "catch.rules"
    rules.write_text("ACTION(DISCARD)\n")
    address = f"127.0.0.1:{free_port()}"
    done = subprocess.run(
        _command(config, address, rules, "--once"),
        capture_output=True, text=True, cwd=ROOT, timeout=WAIT_S,
    )  # fmt: skip
    assert done.returncode == 3, (done.stdout, done.stderr)
    [note] = _notes(done.stdout)
    assert note.startswith(f"could not connect to group 1 (NYC) at {address}: "), note
    assert "connection refused" in note and "lost" not in note, note
    assert json.loads(done.stdout.splitlines()[-1])["summary"]["held_not_removed"] == 0


async def test_a_connection_lost_mid_run_is_still_told_lost(make_bus, tmp_path) -> None:
    """The other side of the same exit code: a handler that was working the DLQ when
    its group went says the connection was lost."""
    bus = make_bus()
    async with bus.connect(queue="SENDER") as sender:
        await sender.put(b"lost order", "1.77", delivery=DeliveryMode.WF_MEM, uma=Uma.DLQ)
    rules = tmp_path / "ignore.rules"
    rules.write_text("ACTION(IGNORE)\n")
    process = await trio.lowlevel.open_process(
        _command(bus.config_path, bus.address, rules), stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    with trio.fail_after(WAIT_S):
        async with bus.connect(queue=None) as client:
            while not any(r["held"] for r in (await client.status())["dlq_readers"]):
                await trio.sleep(0.05)
        bus.kill()
        out = b""
        while chunk := await process.stdout.receive_some():
            out += chunk
        assert await process.wait() == 3
    [note] = _notes(out.decode())
    assert note.startswith(f"connection to group 1 (NYC) at {bus.address} lost: "), note


# ------------------------------------- INPUTQ(DLJ): a put refused outright leaves no mark
async def _journaled(bus, body: bytes = b"journaled") -> int:
    """A put to 1.50 (no such queue) journaled in the DLJ by its UMA; its seq."""
    async with bus.connect(queue="SENDER") as sender:
        psb = await sender.put(body, target="1.50", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
        assert psb.uma_status == Status.DLJ_SUCCESS, psb
    return psb.seq


def _marks(journals: Path) -> dict[int, bool]:
    """seq -> whether the handler's attempt mark is on it, for each DLJ record."""
    store = JournalStore(journals, readonly=True)
    try:
        return {
            item.seq: store.get_raw(Journal.META, handler_attempt_key(item.seq)) is not None
            for _key, item in store.scan(Journal.DLJ)
            if isinstance(item, Record)
        }
    finally:
        store.close()


def _mark(journals: Path, seq: int) -> None:
    """The attempt mark an earlier run left on record `seq` (killed mid-put)."""
    from journals import WriteBatch

    store = JournalStore(journals, beside_owner=True)
    try:
        store.commit_now(WriteBatch.empty().put_raw(Journal.META, handler_attempt_key(seq), b"1"))
    finally:
        store.close()


async def _handle(bus, rules: str, put_timeout_s: float = 30.0) -> list[dict]:
    """The handler run in this process against the group's process and its real DLJ:
    its report lines (the seq events)."""
    config = load_config(bus.config_path)
    where = locate(argparse.Namespace(config=bus.config_path, group=1, data_dir=None))
    options = HandlerOptions(bus.address, 1, config, wait_s=0, window=4, dlj=where)
    options.put_timeout_s = put_timeout_s
    out = io.StringIO()
    handler = Handler(
        Engine(parse_table(rules), names=_names(config)), options, Reporter(True, out)
    )
    with trio.fail_after(WAIT_S):
        await handler.run()
    return [event for event in map(json.loads, out.getvalue().splitlines()) if "seq" in event]


RETRY_DLJ = "INPUTQ(DLJ) WAIT(NO)\nACTION(RETRY)\n"
FORWARD_DLJ = "INPUTQ(DLJ) WAIT(NO)\nACTION(FWD) FWDQ(ANYORDER)\n"


async def test_a_dlj_put_refused_outright_leaves_no_attempt_mark(make_bus) -> None:
    """Why: the attempt mark committed before a put stayed when the group answered
    that nothing was stored (NO_DQF, discarded by the handler's UMA DISC), so the next
    run, after the operator fixed the rule, flagged the record's only copy POSSDUPL.
    A record that came with a mark (an earlier run's put may have been stored) keeps
    it whatever this run's put is answered."""
    bus = make_bus()
    journals = bus.data_dir / "journals"
    fresh, marked = await _journaled(bus, b"fresh"), await _journaled(bus, b"marked")
    _mark(journals, marked)
    events = await _handle(bus, RETRY_DLJ)
    failed = {e["seq"]: e["detail"] for e in events if e["outcome"] == "failed"}
    assert set(failed) == {fresh, marked}, events
    assert all("not stored: NO_DQF/DISC_SUCCESS" in detail for detail in failed.values())
    assert _marks(journals) == {fresh: False, marked: True}
    events = await _handle(bus, FORWARD_DLJ)
    assert {e["seq"]: (e["outcome"], e["possdupl"]) for e in events} == {
        fresh: ("forwarded", False), marked: ("forwarded", True),
    }  # fmt: skip
    async with bus.connect(queue="ANYORDER") as target:
        copies = {m.body: (m.headers or {}) for m in await take_all(target)}
    assert not copies[b"fresh"].get(POSSIBLE_DUPLICATE_HEADER), copies
    assert copies[b"marked"].get(POSSIBLE_DUPLICATE_HEADER), copies
    assert _marks(journals) == {}


async def test_a_dlj_put_the_group_refused_as_it_arrived_leaves_no_mark(replay_bus) -> None:
    """A put refused as it arrives (here NOSUCHQUEUE: the record's sender is a queue
    the bus does not have) stored nothing either: no mark is left."""
    bus = replay_bus({Journal.DLJ: [record(1, source_queue=9999, reason=-1004)]})
    events = await _handle(bus, FORWARD_DLJ)
    [failed] = [e for e in events if e["outcome"] == "failed"]
    assert failed["detail"].startswith("NOSUCHQUEUE"), failed
    assert _marks(bus.data_dir / "journals") == {record(1).seq: False}


async def test_a_dlj_put_whose_outcome_is_unknown_keeps_its_mark(make_bus, tmp_path) -> None:
    """A put that timed out (no answer: the group's commit slowed past the put's
    timeout and the client's grace) may have been stored: its mark stays."""
    fault = tmp_path / "fault"
    fault.write_text("")
    bus = make_bus(env={"MRS_FAULT_FILE": str(fault)})
    seq = await _journaled(bus)
    fault.write_text(f"SLOW {0.5 + REPLY_GRACE_S + 1}")
    try:
        events = await _handle(bus, FORWARD_DLJ, put_timeout_s=0.5)
    finally:
        fault.write_text("")
    [failed] = [e for e in events if e["outcome"] == "failed"]
    assert "timed out" in failed["detail"], events
    assert _marks(bus.data_dir / "journals") == {seq: True}
