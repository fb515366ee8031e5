"""Probes of the dead-letter handler at its edges: a rules table that is not a table
(too large, not UTF-8, on standard input as in a file), a put whose outcome is unknown
(a stalled server), the handler's own DLQ as a RETRY destination, and the server lost
while the handler runs. Each was a defect once; each test says what a user sees."""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

import clients.requests
from clients import DeliveryMode, Status, Uma
from mrs.config.bus import load_config
from mrs.dlq.command import _names
from mrs.dlq.engine import Engine
from mrs.dlq.handler import Handler, HandlerOptions
from mrs.dlq.parser import parse_table
from mrs.dlq.report import Reporter
from mrs.dlq.sources import SCAN_CHUNK
from mrs.limits import DLQ_TABLE_BYTES_MAX
from mrs.offline.journal_files import locate
from sim.processes import write_single_group_config
from tests.client_helpers import take_all
from tests.conftest import STANDARD_QUEUES
from tests.process.test_dlq_handler import dlq_bodies, letter_header, put_letter, run_handler

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _check(config: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """`mrs dlq-handler --check` against a one-group bus file, as an operator runs it."""
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--check", "--config", str(config)]
    return subprocess.run(
        [*command, "--group", "1", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        env=ENV,
        timeout=60,
    )


def test_a_table_too_large_is_refused_with_one_line_before_it_is_read(tmp_path) -> None:
    """A wrong file (a log, a disk image) named as the table: refused at once with one
    line, not read whole into memory (10 MB of table cost the checker 1.2 GB)."""
    config = write_single_group_config(tmp_path / "bus", queues=STANDARD_QUEUES)
    rules = tmp_path / "huge.rules"
    line = b"REASON(MQRC_Q_FULL) ACTION(IGNORE)\n"
    rules.write_bytes(line * (DLQ_TABLE_BYTES_MAX // len(line) + 1))
    for result in (_check(config, str(rules)), _check(config, stdin=rules.read_bytes())):
        assert result.returncode == 2
        first, last = result.stderr.decode().splitlines()
        assert f"the table is larger than {DLQ_TABLE_BYTES_MAX} bytes" in first
        assert last == "mrs dlq-handler: 1 error(s) in the rules table; not started"


def test_a_table_not_utf8_is_refused_at_its_line_and_column_from_stdin_too(tmp_path) -> None:
    """runmqdlq reads its table from standard input: a byte that is not UTF-8 there
    was taken as part of a value (the table called valid, the rule matching nothing),
    while the same file named on the command line was refused."""
    config = write_single_group_config(tmp_path / "bus", queues=STANDARD_QUEUES)
    table = b"* latin-1 by mistake\nACTION(IGNORE) APPLNAME(caf\xe9)\n"
    rules = tmp_path / "latin1.rules"
    rules.write_bytes(table)
    for source, result in (
        (str(rules), _check(config, str(rules))),
        ("stdin", _check(config, stdin=table)),
    ):
        assert result.returncode == 2, result.stdout
        first = result.stderr.decode().splitlines()[0]
        assert first == (
            f"mrs dlq-handler: {source}: line 2, column 28: byte e9 is not UTF-8; "
            "save the table as UTF-8"
        )
    with_mark = _check(config, stdin=b"\xef\xbb\xbfACTION(IGNORE)\r\n")  # Notepad's UTF-8
    assert with_mark.returncode == 0, with_mark.stderr


def test_reason_naming_a_status_mrs_reports_as_an_mqrc_code_is_refused(tmp_path) -> None:
    """REASON(EXCEEDQUOTA) was called valid, yet a letter refused EXCEEDQUOTA carries
    reason 2053 (MQRC_Q_FULL): the rule took nothing, silently. Now the table is
    refused, saying what to write."""
    config = write_single_group_config(tmp_path / "bus", queues=STANDARD_QUEUES)
    result = _check(config, stdin=b"REASON(EXCEEDQUOTA) ACTION(RETRY) RETRY(60)\n")
    assert result.returncode == 2
    assert result.stderr.decode().splitlines()[0] == (
        "mrs dlq-handler: stdin: line 1, column 1: REASON(EXCEEDQUOTA): a dead letter "
        "refused EXCEEDQUOTA carries reason MQRC_Q_FULL (2053), never EXCEEDQUOTA: write "
        "REASON(MQRC_Q_FULL), or FEEDBACK(EXCEEDQUOTA) for this status alone"
    )
    for table in (
        b"REASON(MQRC_Q_FULL) ACTION(IGNORE)\n",
        b"FEEDBACK(EXCEEDQUOTA) ACTION(IGNORE)\n",
    ):
        assert _check(config, stdin=table).returncode == 0


def test_a_persistence_no_dead_letter_has_is_refused(tmp_path) -> None:
    """PERSIST(2) (MQPER_PERSISTENCE_AS_Q_DEF) was called valid, yet every dead letter
    is 0 or 1 (recoverable or not): the rule silently took nothing."""
    config = write_single_group_config(tmp_path / "bus", queues=STANDARD_QUEUES)
    for value in ("2", "MQPER_PERSISTENCE_AS_Q_DEF", "7"):
        result = _check(config, stdin=f"PERSIST({value}) ACTION(DISCARD)\n".encode())
        assert result.returncode == 2, value
        assert result.stderr.decode().splitlines()[0].startswith(
            f"mrs dlq-handler: stdin: line 1, column 1: PERSIST({value}): a dead letter is 0 "
            "(MQPER_NOT_PERSISTENT) or 1 (MQPER_PERSISTENT), so this matches nothing"
        ), result.stderr
    for value in ("1", "MQPER_NOT_PERSISTENT", "?"):
        table = f"PERSIST({value}) ACTION(DISCARD)\n".encode()
        assert _check(config, stdin=table).returncode == 0, value


def test_a_wildcard_name_on_a_number_keyword_is_a_warning_it_matches_nothing(
    tmp_path,
) -> None:
    """REASON is a number in every dead letter: REASON(MQRC_Q_*) was called valid and
    silently took nothing (FEEDBACK(DQF_*) too: the status is a number). The table
    still runs (as runmqdlq's would) and says so."""
    config = write_single_group_config(tmp_path / "bus", queues=STANDARD_QUEUES)
    table = (
        b"REASON(20?5) ACTION(IGNORE)\nREASON(MQRC_Q_*) ACTION(DISCARD)\n"
        b"FEEDBACK(DQF_*) ACTION(DISCARD)\n"
    )
    result = _check(config, stdin=table)
    assert result.returncode == 0
    assert result.stderr.decode().splitlines() == [
        f"mrs dlq-handler: stdin: line {line}, column 1: warning: {pattern} matches "
        "nothing: a wildcard is matched against the number (as in REASON(20?5)), and a "
        "name cannot take one"
        for line, pattern in ((2, "REASON(MQRC_Q_*)"), (3, "FEEDBACK(DQF_*)"))
    ]


class _OnReport(io.StringIO):
    """The handler's JSON report stream, calling `react(event)` on each line: the test
    acts when the handler reports, not after a guessed sleep."""

    def __init__(self, react) -> None:
        super().__init__()
        self.react = react

    def write(self, text: str) -> int:
        self.react(json.loads(text))
        return super().write(text)


async def test_a_put_that_timed_out_is_repeated_marked_as_a_possible_duplicate(
    bus, monkeypatch
) -> None:
    """The server stalls (SIGSTOP) while the handler puts a memory letter back: the put
    times out, yet the server stores it when it resumes. The handler's next attempt
    stores a second copy; that copy must say it may be a duplicate."""
    monkeypatch.setattr(clients.requests, "REPLY_GRACE_S", 0.5)  # the put's wait: 1.5 s, not 6
    async with bus.connect(queue="SENDER") as sender:
        for body in (b"a", b"b", b"late"):  # SMALL holds 2: "late" is dead-lettered
            await sender.put(body, target="SMALL", delivery=DeliveryMode.WF_MEM, uma=Uma.DLQ)
    pid = bus.process.process.pid

    async def drain_small_then_stall_the_server() -> None:
        async with bus.connect(queue="SMALL") as small:
            assert [m.body for m in await take_all(small)] == [b"a", b"b"]
        os.kill(pid, signal.SIGSTOP)

    config = load_config(bus.config_path)
    table = parse_table("RETRYINT(1) WAIT(NO)\nACTION(RETRY) RETRY(3)\n")
    try:
        async with trio.open_nursery() as nursery:
            failures = []

            def react(event: dict) -> None:
                if event.get("outcome") != "failed":
                    return
                failures.append(event)
                if len(failures) == 1:  # refused while SMALL was full: make room, stall
                    nursery.start_soon(drain_small_then_stall_the_server)
                elif len(failures) == 2:  # the put timed out: let the server go on
                    os.kill(pid, signal.SIGCONT)

            options = HandlerOptions(bus.address, 1, config, 0, 1, put_timeout_s=1.0)
            reporter = Reporter(json_lines=True, out=_OnReport(react))
            handler = Handler(Engine(table, names=_names(config)), options, reporter)
            with trio.fail_after(60):
                await handler.run()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert handler.summary()["retried"] == 1 and handler.summary()["attempts_failed"] == 2
    async with bus.connect(queue="SMALL") as small:
        first, second = await take_all(small)
    assert first.body == second.body == b"late"
    assert "possible_duplicate" not in first.headers
    assert second.headers["possible_duplicate"] is True


async def test_a_retry_to_the_dlq_it_reads_keeps_the_letter_and_its_header(mem_bus) -> None:
    """A letter whose original destination is this DLQ: RETRY would put it back there
    without its header, where it would sit for ever as a message without a header, its
    reason lost. The attempt fails with one line; the letter stays as it was."""
    async with mem_bus.connect(queue="SENDER") as sender:
        await put_letter(sender, b"to the dlq", letter_header(dest_q_name="96"))
    handler, events = await run_handler(mem_bus, "ACTION(RETRY)\n")
    assert [event["outcome"] for event in events] == ["failed", "left"]
    assert "1.96 is the dead-letter queue this handler reads" in events[0]["detail"]
    assert handler.summary()["no_header"] == 0
    async with mem_bus.connect(queue="DLQ") as dlq:
        [letter] = await take_all(dlq)
    assert letter.dead_letter_header["dest_q_name"] == "96"
    assert await dlq_bodies(mem_bus) == []


def test_the_server_lost_mid_run_is_exit_3_with_the_summary(bus, tmp_path) -> None:
    """The group's server dies while the handler waits to retry: exit 3, a note and the
    summary, as documented, not "unexpected error: ExceptionGroup" and exit 1."""

    async def dead_letter_one() -> None:
        async with bus.connect(queue="SENDER") as sender:
            for body in (b"a", b"b", b"late"):
                await sender.put(body, target="SMALL", delivery=DeliveryMode.WF_MEM, uma=Uma.DLQ)

    trio.run(dead_letter_one)
    rules = tmp_path / "retry.rules"
    rules.write_text("RETRYINT(1)\nACTION(RETRY) RETRY(100)\n")
    command = [sys.executable, "-m", "mrs", "dlq-handler", "--config", str(bus.config_path)]
    command += ["--group", "1", "--address", bus.address, "--json", str(rules)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=ENV
    )
    first = json.loads(process.stdout.readline())
    assert first["outcome"] == "failed"  # it runs, SMALL is full: it will retry
    bus.kill()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 3, err
    assert err == b""
    lines = [json.loads(line) for line in out.splitlines()]
    assert "lost" in lines[-2]["note"]
    assert lines[-1]["summary"]["held_not_removed"] == 1


async def test_once_with_the_record_full_of_left_letters_ends_and_says_so(mem_bus) -> None:
    """--once (WAIT(NO)) and --seen-max 2, three letters no rule takes: the two held
    stay held, no room ever comes, and the handler waited for ever (a cron job that
    never returns). It ends now, saying what it left unexamined."""
    async with mem_bus.connect(queue="SENDER") as sender:
        for body in (b"one", b"two", b"three"):
            await put_letter(sender, body, letter_header(dest_q_name="77"))
    config = load_config(mem_bus.config_path)
    table = parse_table("DESTQ(10) ACTION(DISCARD)\nACTION(IGNORE)\n")
    out = io.StringIO()
    options = HandlerOptions(
        mem_bus.address, 1, config, 0, 8, seen_max=2, open_stream=mem_bus.open_stream
    )
    engine = Engine(table, names=_names(config), seen_max=2)
    handler = Handler(engine, options, Reporter(json_lines=True, out=out))
    with trio.fail_after(600):
        await handler.run()
    notes = [json.loads(line).get("note", "") for line in out.getvalue().splitlines()]
    assert any(note.startswith("ending with the record full: 2 messages held") for note in notes)
    assert handler.summary()["ignored"] == 2 and handler.summary()["held_not_removed"] == 2
    assert await dlq_bodies(mem_bus) == [b"one", b"three", b"two"]  # nothing lost


async def test_a_dlj_handler_holding_a_chunk_of_records_still_sees_new_ones(bus) -> None:
    """INPUTQ(DLJ), WAIT(YES): with 1000 records held (IGNORE), each re-scan read the
    same first chunk of held records, took it for the end of the journal, and a new
    dead letter behind them was never handled."""
    async with bus.connect(queue="SENDER") as sender:

        async def journal(first: int) -> None:
            for index in range(first, SCAN_CHUNK, 50):
                psb = await sender.put(
                    b"old %d" % index, target="1.50", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ
                )
                assert psb.uma_status == Status.DLJ_SUCCESS

        async with trio.open_nursery() as nursery:
            for first in range(50):
                nursery.start_soon(journal, first)
    config = load_config(bus.config_path)
    where = locate(argparse.Namespace(config=bus.config_path, group=1, data_dir=None))
    table = parse_table("INPUTQ(DLJ)\nDESTQ(51) ACTION(DISCARD)\nACTION(IGNORE)\n")
    left: list[int] = []
    discarded: list[int] = []

    async def journal_a_new_one() -> None:
        async with bus.connect(queue="SENDER") as sender:
            psb = await sender.put(b"new", target="1.51", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
            assert psb.uma_status == Status.DLJ_SUCCESS

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:

            def react(event: dict) -> None:
                if event.get("outcome") == "left":
                    left.append(event["seq"])
                    if len(left) == SCAN_CHUNK:  # every old one held: now a new one
                        nursery.start_soon(journal_a_new_one)
                elif event.get("outcome") == "discarded":
                    discarded.append(event["seq"])
                    nursery.cancel_scope.cancel()  # WAIT(YES): the test ends it

            options = HandlerOptions(bus.address, 1, config, None, 4, dlj=where)
            reporter = Reporter(json_lines=True, out=_OnReport(react))
            handler = Handler(Engine(table, names=_names(config)), options, reporter)
            nursery.start_soon(handler.run)
    assert len(discarded) == 1 and len(left) == SCAN_CHUNK


async def test_once_on_an_empty_dlq_ends_every_time(bus) -> None:
    """`--once` on an empty DLQ (a cron job's usual case) hung in most runs: a taker
    whose empty get came back before an earlier taker's waited for a message's work
    to finish, and none ever started. Ten runs, each must end."""
    config = load_config(bus.config_path)
    table = parse_table("ACTION(IGNORE)\n")
    for _ in range(10):
        options = HandlerOptions(bus.address, 1, config, 0, 32)
        handler = Handler(
            Engine(table, names=_names(config)), options, Reporter(True, io.StringIO())
        )
        with trio.fail_after(10):
            await handler.run()
        assert handler.summary()["held_not_removed"] == 0
