"""The operator's shell tools at 3 a.m., on real groups (`mrs serve`): `mrs dlq-handler`
given a mistyped `--address`, or a config whose port is chosen at start; a rules table
whose FWDQM (or FWDQ) without a variable names nothing on the bus; `mrs dump --json`
times fed back to `--since`/`--until` by a script; and `mrs jplay --to` the DLQ."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import trio

from clients import DeliveryMode, Uma
from journals import Journal
from tests.journal_helpers import T0_NS, journal_seqs, json_lines, mrs, record

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0


def _handler(bus, rules: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "mrs", "dlq-handler", "--config", str(bus.config_path),
        "--group", "1", "--once", "--json", *extra, str(rules),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=WAIT_S)


async def _dead_letter(bus) -> None:
    """One dead letter on the group's DLQ: a put to a queue the group does not have."""
    async with bus.connect(queue="SENDER") as sender:
        await sender.put(b"lost order", "1.77", delivery=DeliveryMode.WF_MEM, uma=Uma.DLQ)


async def _letters_on_the_dlq(bus) -> int:
    """How many letters wait on the DLQ (the group's status: none is taken)."""
    async with bus.connect() as client:
        return (await client.status())["queues"]["1.96"]["pending"]


# ------------------------------------------------------------ dlq-handler --address
async def test_a_mistyped_address_is_bad_usage_and_takes_no_letter(make_bus, tmp_path) -> None:
    """Why: the client refused `--address nohost` only when the handler connected, and
    the handler ended with exit 3 and "group 1 refused: BADPARAM": the code of a group
    that could not be reached, for a typo the operator fixes."""
    bus = make_bus()
    await _dead_letter(bus)
    rules = tmp_path / "catch.rules"
    rules.write_text("ACTION(FWD) FWDQ(ANYORDER)\n")
    for address in ("nohost", "127.0.0.1:0", f"{bus.address}0000"):
        done = _handler(bus, rules, "--address", address)
        assert done.returncode == 2, (address, done.stdout, done.stderr)
        assert done.stderr.startswith("mrs dlq-handler: --address"), done.stderr
        assert len(done.stderr.splitlines()) == 1 and done.stdout == ""
    check = [sys.executable, "-m", "mrs", "dlq-handler", "--check", "--address", "x", str(rules)]
    checked = subprocess.run(check, capture_output=True, text=True, cwd=ROOT, timeout=WAIT_S)
    assert checked.returncode == 2 and "--address 'x'" in checked.stderr
    assert await _letters_on_the_dlq(bus) == 1


def test_a_port_chosen_at_start_asks_for_the_address(tmp_path) -> None:
    """A config that says port 0 (the server prints its port as READY HOST:PORT): the
    handler dialled 127.0.0.1:0 and ended with exit 3, "connection lost"."""
    from sim.processes import write_single_group_config

    config = write_single_group_config(tmp_path / "bus")
    rules = tmp_path / "catch.rules"
    rules.write_text("ACTION(DISCARD)\n")
    done = mrs("dlq-handler", "--config", str(config), "--group", "1", "--once", str(rules))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "give --address HOST:PORT" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1


# ------------------------------------------------------- FWDQ/FWDQM, one half fixed
async def test_a_fixed_fwdqm_or_fwdq_beside_a_variable_is_checked_against_the_bus(
    make_bus, tmp_path
) -> None:
    """Why: only a FWD with FWDQ and FWDQM both fixed was checked, so `--check` called
    MQ's sample `FWDQ(&DESTQ) FWDQM(BBBB)` valid on a bus without that group, and the
    handler then failed every letter the rule took and left them all on the DLQ."""
    bus = make_bus()
    await _dead_letter(bus)
    bad = tmp_path / "bad.rules"
    bad.write_text(
        "WAIT(NO)\n"
        "DESTQ(77) ACTION(FWD) FWDQ(&DESTQ) FWDQM(BBBB)\n"
        "DESTQ(78) ACTION(FWD) FWDQ(&DESTQ) FWDQM(2)\n"
        "DESTQ(79) ACTION(FWD) FWDQ(DEADQ) FWDQM(&REPLYQM)\n"
        "ACTION(FWD) FWDQ(ANYORDER)\n"
    )
    for extra in (("--check",), ()):
        done = _handler(bus, bad, *extra)
        assert done.returncode == 2, (extra, done.stdout, done.stderr)
        lines = done.stderr.splitlines()
        assert [line.split(": ")[2] for line in lines[:3]] == [
            "line 2, column 23", "line 3, column 23", "line 4, column 23",
        ], lines  # fmt: skip
        assert "FWDQM(BBBB) names no group of the bus" in lines[0]
        assert "FWDQM(2) names no group of the bus" in lines[1]
        assert "FWDQ(DEADQ) FWDQM(&REPLYQM) names no queue of any group" in lines[2]
        assert lines[3] == "mrs dlq-handler: 3 error(s) in the rules table; not started"
    assert await _letters_on_the_dlq(bus) == 1  # nothing was taken
    good = tmp_path / "good.rules"
    good.write_text(
        "WAIT(NO)\n"
        "DESTQ(76) ACTION(FWD) FWDQ(&DESTQ) FWDQM(NYC)\n"
        "DESTQ(75) ACTION(FWD) FWDQ(ANYORDER) FWDQM(&REPLYQM)\n"
        "ACTION(FWD) FWDQ(&REPLYQ) FWDQM(&REPLYQM) HEADER(YES)\n"
    )
    done = _handler(bus, good, "--address", bus.address)
    assert done.returncode == 0, done.stderr
    assert json_lines(done.stdout)[-1]["summary"]["forwarded"] == 1


# ---------------------------------------------------- dump --json times, fed back
def test_a_records_json_time_given_back_selects_that_record(replay_bus) -> None:
    """Why: `time` was cut to microseconds, before the record's own instant, so a
    script passing a record's time back as `--until` (or `--since` and `--until`)
    selected every record but that one: "replay up to the one I looked at" left it out."""
    times = [T0_NS + 123_456_789, T0_NS + 2_000_000_001, T0_NS + 3_000_000_000]
    records = [
        record(index, written_time_ns=moment, confirm_time_ns=moment)
        for index, moment in enumerate(times)
    ]
    bus = replay_bus({Journal.PCJ: records})
    where = ("--config", str(bus.config_path), "--group", "1")
    dumped = mrs("dump", *where, "pcj", "--json")
    assert dumped.returncode == 0, dumped.stderr
    rows = json_lines(dumped.stdout)
    assert [row["time"] for row in rows] == [
        "2023-11-14T22:13:20.123456789Z",
        "2023-11-14T22:13:22.000000001Z",
        "2023-11-14T22:13:23.000000Z",
    ]
    for row in rows:
        one = mrs("dump", *where, "pcj", "--since", row["time"], "--until", row["time"], "--json")
        assert [item["seq"] for item in json_lines(one.stdout)] == [row["seq"]], one.stderr
        upto = mrs("jplay", *where, "pcj", "--until", row["time"], "--dry-run", "--json")
        assert json.loads(upto.stdout)["selected"] == rows.index(row) + 1, upto.stderr


# ------------------------------------------------------------------ jplay --to DLQ
async def test_a_replay_to_the_dlq_is_refused_and_the_dead_letter_kept(replay_bus) -> None:
    """Why: `mrs jplay dlj --to DLQ --remove` put each dead letter on the DLQ without a
    dead-letter header, which mrs dlq-handler never matches ("no dead-letter header",
    left there for good), and deleted its DLJ record, the one place that said why."""
    bus = replay_bus({Journal.DLJ: [record(1, reason=-1004, target_queue=77)]})
    where = ("--config", str(bus.config_path), "--group", "1", "--address", bus.address)
    for to in ("DLQ", "96", "1.96", "NYC.DLQ", "PAMS_DEAD_LETTER_QUEUE"):
        done = await trio.run_process(
            [sys.executable, "-m", "mrs", "jplay", *where, "dlj", "--to", to, "--remove"],
            capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
        err = done.stderr.decode()
        assert done.returncode == 2 and "INPUTQ(DLJ)" in err, (to, err)
        assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert journal_seqs(bus.data_dir / "journals", Journal.DLJ) == [record(1).seq]
    assert await _letters_on_the_dlq(bus) == 0
