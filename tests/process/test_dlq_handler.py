"""The dead-letter handler against a real server: each keyword and action, wildcards and
variables, retries, leases (two handlers side by side, a SIGKILLed handler), the CLI."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from clients import BadSequence, DeliveryMode, NoMoreMessages, Status, Uma
from mrs.config.bus import load_config
from mrs.dlq.command import _names
from mrs.dlq.engine import Engine
from mrs.dlq.handler import Handler, HandlerOptions
from mrs.dlq.parser import parse_table
from mrs.dlq.report import Reporter
from sim.ports import free_port
from sim.processes import write_single_group_config
from tests.client_helpers import take_all
from tests.conftest import STANDARD_QUEUES

MODE = DeliveryMode
ROOT = Path(__file__).resolve().parents[2]


def letter_header(**fields) -> dict:
    """An application's own dead-letter header (MQDLH-like) with the given fields."""
    header = {
        "struc_id": "DLH ",
        "version": 1,
        "reason": 2053,
        "dest_q_name": "10",
        "dest_q_mgr_name": "1",
        "format": "MRS",
        "put_appl_type": "MRS",
        "put_appl_name": "billing",
        "put_date": "20261123",
        "put_time": "12000000",
    }
    header.update(fields)
    return header


async def put_letter(client, body: bytes, header: dict | None = None, **options) -> None:
    headers = dict(options.pop("headers", None) or {})
    if header is not None:
        headers["dead_letter_header"] = header
    psb = await client.put(
        body,
        target="DLQ",
        delivery=options.pop("delivery", MODE.WF_MEM),
        headers=headers,
        **options,
    )
    assert psb.delivery_status.ok, psb


async def run_handler(bus, text: str, wait_s: float | None = 0, window: int = 8):
    config = load_config(bus.config_path)
    table = parse_table(text)
    out = io.StringIO()
    options = HandlerOptions(
        bus.address, 1, config, wait_s, window, open_stream=getattr(bus, "open_stream", None)
    )
    handler = Handler(Engine(table, names=_names(config)), options, Reporter(True, out))
    await handler.run()
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    return handler, [event for event in events if "seq" in event]


async def dlq_bodies(bus) -> list[bytes]:
    async with bus.connect(queue="DLQ") as dlq:
        return sorted(message.body for message in await take_all(dlq))


# ---------------------------------------------------------------------- actions
async def test_each_action(mem_bus) -> None:
    table = """\
DESTQ(91) ACTION(DISCARD)
DESTQ(92) ACTION(FWD) FWDQ(ANYORDER)
DESTQ(10) ACTION(RETRY)
DESTQ(94) ACTION(IGNORE)
"""
    async with mem_bus.connect(queue="SENDER") as sender:
        await put_letter(sender, b"discard me", letter_header(dest_q_name="91"))
        await put_letter(
            sender,
            b"\x00\xffforward me",
            letter_header(dest_q_name="92"),
            msg_class=7,
            msg_type=8,
            priority=9,
            correlation_id=b"corr-1",
            headers={"app": "x"},
        )
        await put_letter(sender, b"retry me", letter_header(dest_q_name="10"))
        await put_letter(sender, b"ignore me", letter_header(dest_q_name="94"))
    handler, events = await run_handler(mem_bus, table)
    outcomes = {event["rule_line"]: event["outcome"] for event in events}
    assert outcomes == {1: "discarded", 2: "forwarded", 3: "retried", 4: "left"}
    assert handler.summary()["held_not_removed"] == 1
    async with (
        mem_bus.connect(queue="ANYORDER") as forwarded_to,
        mem_bus.connect(queue="ORDERS") as retried_to,
    ):
        [forwarded] = await take_all(forwarded_to)
        [retried] = await take_all(retried_to)
    # FWD keeps all of the original context and, with HEADER(YES), the header.
    assert forwarded.body == b"\x00\xffforward me"
    assert (forwarded.msg_class, forwarded.msg_type, forwarded.priority) == (7, 8, 9)
    assert forwarded.correlation_id == b"corr-1"
    assert str(forwarded.source) == "1.13"  # the original sender, not the handler
    assert forwarded.dead_letter_header["dest_q_name"] == "92"
    assert forwarded.headers["app"] == "x" and "pass_context" not in forwarded.headers
    # RETRY puts it back to its original destination, without the header.
    assert retried.body == b"retry me" and retried.dead_letter_header is None
    assert str(retried.source) == "1.13"
    assert await dlq_bodies(mem_bus) == [b"ignore me"]  # IGNORE leaves it on the DLQ


async def test_header_no_strips_and_failed_forward_falls_through(mem_bus) -> None:
    table = """\
ACTION(FWD) FWDQ(NOSUCHNAME) RETRY(2)
ACTION(FWD) FWDQ(ANYORDER) HEADER(NO)
"""
    async with mem_bus.connect(queue="SENDER") as sender:
        await put_letter(sender, b"m", letter_header())
    text = "RETRYINT(0)\n" + table
    handler, events = await run_handler(mem_bus, text)
    assert [(e["rule_line"], e["attempt"], e["outcome"]) for e in events] == [
        (2, 1, "failed"),
        (2, 2, "failed"),
        (3, 1, "forwarded"),
    ]
    async with mem_bus.connect(queue="ANYORDER") as target:
        [message] = await take_all(target)
    assert message.dead_letter_header is None and message.body == b"m"


async def test_retry_waits_retryint_until_the_queue_drains(mem_bus) -> None:
    """The worked example: "queue full" dead letters go back once the queue drains."""
    table = "RETRYINT(1)\nREASON(MQRC_Q_FULL) ACTION(RETRY) RETRY(30)\n"
    async with mem_bus.connect(queue="SENDER") as sender:
        for index in range(2):  # SMALL holds 2 (messages_max)
            await sender.put(b"fill%d" % index, target="SMALL", delivery=MODE.WF_MEM)
        psb = await sender.put(b"late", target="SMALL", delivery=MODE.WF_MEM, uma=Uma.DLQ)
        assert (psb.delivery_status, psb.uma_status) == (Status.EXCEEDQUOTA, Status.DLQ_SUCCESS)
    async with trio.open_nursery() as nursery:
        results = []

        async def handle() -> None:
            results.append(await run_handler(mem_bus, table))

        nursery.start_soon(handle)
        await trio.sleep(1.5)  # at least one attempt fails while SMALL is full
        async with mem_bus.connect(queue="SMALL") as small:
            assert sorted(m.body for m in await take_all(small)) == [b"fill0", b"fill1"]
    [(handler, events)] = results
    assert events[0]["outcome"] == "failed" and events[-1]["outcome"] == "retried"
    assert all(e["attempt"] == i + 1 for i, e in enumerate(events))
    async with mem_bus.connect(queue="SMALL") as small:
        assert [m.body for m in await take_all(small)] == [b"late"]


async def test_no_match_and_no_header_stay(mem_bus) -> None:
    async with mem_bus.connect(queue="SENDER") as sender:
        await put_letter(sender, b"no header", None)
        await put_letter(sender, b"no match", letter_header(dest_q_name="99"))
    handler, events = await run_handler(mem_bus, "DESTQ(10) ACTION(DISCARD)\n")
    assert sorted(e["outcome"] for e in events) == ["left", "left"]
    assert handler.summary()["no_header"] == 1 and handler.summary()["ignored"] == 1
    assert await dlq_bodies(mem_bus) == [b"no header", b"no match"]


# ---------------------------------------------------------------------- keywords
KEYWORD_CASES = [
    ("APPLIDAT", "ord*", {"correlation_id": b"order-1"}, {"correlation_id": b"x"}),
    ("APPLNAME", "bill?ng", {}, {"header": {"put_appl_name": "payroll"}}),
    ("APPLTYPE", "MRS", {}, {"header": {"put_appl_type": "APP"}}),
    ("DESTQ", "ORDERS", {}, {"header": {"dest_q_name": "11"}}),  # by name
    ("DESTQ", "1?", {}, {"header": {"dest_q_name": "2"}}),  # by number, wildcard
    ("DESTQM", "NYC", {}, {"header": {"dest_q_mgr_name": "2"}}),
    ("FEEDBACK", "EXCEEDQUOTA", {"header": {"mrs_status": -56}}, {"header": {"mrs_status": -202}}),
    ("FORMAT", "' '", {"header": {"format": " "}}, {}),
    ("MSGTYPE", "MQMT_REPLY", {"msg_type": 2}, {"msg_type": 8}),
    ("PERSIST", "MQPER_NOT_PERSISTENT", {}, {"headers": {}, "persistent": True}),
    ("REASON", "MQRC_Q_FULL", {}, {"header": {"reason": 2085}}),
    ("REASON", "20?5", {"header": {"reason": 2085}}, {"header": {"reason": 2053}}),
    ("REPLYQ", "SENDER", {}, {"queue": "SENDER2"}),
    ("REPLYQM", "N?C", {}, {}),  # every sender is in group 1 (NYC): both match
    ("USERID", "alice", {"headers": {"user_id": "alice"}}, {"headers": {"user_id": "bob"}}),
]


async def _put_case(bus, body: bytes, case: dict) -> None:
    header = letter_header(**case.get("header", {}))
    options = {}
    if "correlation_id" in case:
        options["correlation_id"] = case["correlation_id"]
    if "msg_type" in case:
        options["msg_type"] = case["msg_type"]
    if case.get("headers"):
        options["headers"] = case["headers"]
    queue = case.get("queue", "SENDER")
    async with bus.connect(queue=queue) as sender:
        if case.get("persistent"):
            # A recoverable message the DLQ UMA moved (reason 2085: no DQF for 1.50).
            psb = await sender.put(body, target="1.50", delivery=MODE.WF_DQF, uma=Uma.DLQ)
            assert psb.uma_status == Status.DLQ_SUCCESS
        else:
            await put_letter(sender, body, header, **options)


@pytest.mark.parametrize(
    ("keyword", "pattern", "matching", "other"),
    KEYWORD_CASES,
    ids=[f"{case[0]}({case[1]})" for case in KEYWORD_CASES],
)
async def test_each_pattern_keyword(mem_bus, keyword, pattern, matching, other) -> None:
    await _put_case(mem_bus, b"matches", matching)
    await _put_case(mem_bus, b"other", other)
    expected = [] if keyword == "REPLYQM" else [b"other"]
    await run_handler(mem_bus, f"{keyword}({pattern}) ACTION(DISCARD)\n")
    assert await dlq_bodies(mem_bus) == expected


async def test_variables_forward_to_destination_and_reply_queue(mem_bus) -> None:
    table = """\
APPLNAME(to-dest) ACTION(FWD) FWDQ(&DESTQ) FWDQM(&DESTQM)
APPLNAME(to-reply) ACTION(FWD) FWDQ(&REPLYQ) FWDQM(&REPLYQM) HEADER(NO)
"""
    async with mem_bus.connect(queue="SENDER2") as sender:
        await put_letter(sender, b"a", letter_header(put_appl_name="to-dest", dest_q_name="11"))
        await put_letter(sender, b"b", letter_header(put_appl_name="to-reply"))
    _, events = await run_handler(mem_bus, table)
    assert sorted(e["target"] for e in events) == ["1.11", "1.16"]
    async with (
        mem_bus.connect(queue="ANYORDER") as destination,
        mem_bus.connect(queue="SENDER2") as reply,
    ):
        assert [m.body for m in await take_all(destination)] == [b"a"]
        assert [m.body for m in await take_all(reply)] == [b"b"]


# ---------------------------------------------------------------------- leases
async def test_two_handlers_side_by_side_never_act_twice(mem_bus) -> None:
    count = 120
    async with mem_bus.connect(queue="SENDER") as sender:
        for index in range(count):
            await put_letter(sender, b"%d" % index, letter_header(), correlation_id=b"%d" % index)
    table = "WAIT(1)\nACTION(FWD) FWDQ(ANYORDER)\n"
    results = []
    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(_collect, results, run_handler(mem_bus, table, wait_s=1))
    seqs = [e["seq"] for _, events in results for e in events if e["outcome"] == "forwarded"]
    assert len(seqs) == len(set(seqs)) == count  # each message forwarded by one handler
    assert all(events for _, events in results), "both handlers worked"
    async with mem_bus.connect(queue="ANYORDER") as target:
        bodies = sorted(int(m.body) for m in await take_all(target))
    assert bodies == list(range(count))


async def _collect(results: list, awaitable) -> None:
    results.append(await awaitable)


async def test_a_lease_returns_when_its_holder_leaves(mem_bus) -> None:
    async with mem_bus.connect(queue="SENDER") as sender:
        await put_letter(sender, b"m", letter_header())
    async with (
        mem_bus.connect(queue="DLQ") as first,
        mem_bus.connect(queue="DLQ") as second,
    ):
        message = await first.get(timeout=5)
        assert message.delivery_status == Status.CONFIRMREQ
        with pytest.raises(NoMoreMessages):  # held by `first`: not visible to `second`
            await second.get(timeout=0)
        status = await second.status()
        assert [reader["held"] for reader in status["dlq_readers"]] == [1, 0]
        with pytest.raises(BadSequence, match="not held"):
            await second.confirm(message.seq)
    async with mem_bus.connect(queue="DLQ") as third:
        again = await third.get(timeout=5)
        assert again.seq == message.seq and again.delivery_status == Status.POSSDUPL


def _handler_command(bus, rules: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mrs",
        "dlq-handler",
        "--config",
        str(bus.config_path),
        "--group",
        "1",
        "--address",
        bus.address,
        "--json",
        str(rules),
        *extra,
    ]


async def test_sigkill_mid_forward_loses_nothing_and_marks_repeats(make_bus, tmp_path) -> None:
    bus = make_bus(limits="dqf_messages_max = 1000")
    count = 150
    async with bus.connect(queue="SENDER") as sender:
        for index in range(count):
            # recoverable originals dead-lettered by the DLQ UMA (no DQF on 1.50)
            psb = await sender.put(b"%d" % index, target="1.50", delivery=MODE.WF_DQF, uma=Uma.DLQ)
            assert psb.uma_status == Status.DLQ_SUCCESS
    rules = tmp_path / "rules.txt"
    rules.write_text("ACTION(FWD) FWDQ(ANYORDER)\n")
    process = subprocess.Popen(
        _handler_command(bus, rules, "--once", "--window", "2"),
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    seen = 0
    with trio.fail_after(60):
        while seen < 10:  # kill it in the middle of the work
            line = await trio.to_thread.run_sync(process.stdout.readline)
            assert line, "handler ended early"
            seen += b'"forwarded"' in line
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stdout.close()
    finished = subprocess.run(
        _handler_command(bus, rules, "--once"),
        capture_output=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert finished.returncode == 0, finished.stderr
    events = [json.loads(line) for line in finished.stdout.splitlines()]
    summary = events[-1]["summary"]
    assert 0 < summary["forwarded"] < count  # the killed handler did part of the work
    # its leases came back marked only where its put was on its way (--window 2 of
    # them at most); those it only held came back as they were
    assert sum(bool(event.get("possdupl")) for event in events) <= 2
    assert await dlq_bodies(bus) == []
    async with bus.connect(queue="ANYORDER") as target:
        arrived = await take_all(target)
    bodies = [int(m.body) for m in arrived]
    assert sorted(set(bodies)) == list(range(count))  # nothing lost
    seen_once = set()
    for message, body in zip(arrived, bodies, strict=True):
        if body in seen_once:  # a repeat must be marked
            assert message.delivery_status == Status.POSSDUPL
        seen_once.add(body)
    assert len(bodies) == count  # recoverable: the idempotency key stops repeats entirely


async def test_a_message_that_keeps_coming_back_is_stopped_with_one_line(bus, tmp_path) -> None:
    """A sender names the DLQ as its reply queue; a rule forwards to &REPLYQ: each
    forward lands on the DLQ again. The handler stops it after the bound, and ends."""
    async with bus.connect(queue="SENDER") as sender:
        await put_letter(sender, b"boomerang", letter_header(), headers={"reply_q": "1.96"})
    rules = tmp_path / "rules.txt"
    rules.write_text("ACTION(FWD) FWDQ(&REPLYQ) FWDQM(&REPLYQM) HEADER(YES)\n")
    finished = subprocess.run(
        _handler_command(bus, rules, "--once"),
        capture_output=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert finished.returncode == 0, finished.stderr
    events = [json.loads(line) for line in finished.stdout.splitlines()]
    actions = [event for event in events if "seq" in event]
    assert [event["outcome"] for event in actions] == ["forwarded"] * 5 + ["left"]
    assert "came back to a DLQ after 5 puts out of one" in actions[-1]["detail"]
    assert events[-1]["summary"]["looped"] == 1
    async with bus.connect(queue="DLQ") as dlq:
        [left] = await take_all(dlq)
    assert left.body == b"boomerang" and left.headers["dlq_returns"] == 5


async def test_retry_puts_a_destinations_letters_back_in_dlq_order(bus) -> None:
    """20 letters refused Q_FULL by SMALL (holds 2) come back in their DLQ order while
    a consumer drains it, even with many actions in flight: a later letter never
    overtakes an earlier one that waits for its retry."""
    async with bus.connect(queue="SENDER") as sender:
        for index in range(22):
            psb = await sender.put(
                b"%02d" % index, target="SMALL", delivery=MODE.WF_MEM, uma=Uma.DLQ
            )
            assert (psb.uma_status == Status.DLQ_SUCCESS) is (index >= 2), psb
    table = "RETRYINT(1) WAIT(NO)\nREASON(MQRC_Q_FULL) ACTION(RETRY) RETRY(100)\n"
    received: list[bytes] = []

    async def consume() -> None:
        async with bus.connect(queue="SMALL") as small:
            while len(received) < 22:
                message = await small.get(timeout=30)
                received.append(message.body)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            handler, _events = await run_handler(bus, table, wait_s=0, window=8)
    assert handler.summary()["retried"] == 20
    assert received == [b"%02d" % index for index in range(22)]


# ---------------------------------------------------------------------- command line
@dataclass
class Configured:
    """A group's config and an address for the command line, no server: --check and
    an unreachable server need no process."""

    config_path: Path
    address: str = "127.0.0.1:9"


@pytest.fixture
def configured(tmp_path) -> Configured:
    return Configured(write_single_group_config(tmp_path / "bus", queues=STANDARD_QUEUES))


def test_check_reports_line_and_column(configured, tmp_path) -> None:
    bus = configured
    rules = tmp_path / "bad.txt"
    rules.write_text("* ok\nACTION(FWD) +\n   FWDQ(X) HEADER(PERHAPS)\n" + "A" * 73 + "\n")
    result = subprocess.run(
        _handler_command(bus, rules, "--check", "--strict"),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert "line 3, column 12: HEADER(PERHAPS): must be YES or NO" in lines[0]
    assert "line 4, column 73" in lines[1]
    assert "not started" in lines[-1] and "Traceback" not in result.stderr


def test_a_long_line_is_a_warning_and_strict_refuses_it(configured, tmp_path) -> None:
    rules = tmp_path / "long.txt"
    long_rule = "REASON(MQRC_Q_FULL) DESTQ(ORDERS) ACTION(FWD) FWDQ(ANYORDER) HEADER(YES) RETRY(3)"
    rules.write_text(f"* a real table\n{long_rule}\n")
    command = _handler_command(configured, rules, "--check")
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"mrs dlq-handler: {rules}: line 2, column 73: warning: text beyond column 72 read as "
        "part of the rule (runmqdlq keeps 72 columns for portability; --strict refuses such "
        "a line)"
    ]
    strict = subprocess.run([*command, "--strict"], capture_output=True, text=True, cwd=ROOT)
    assert strict.returncode == 2
    assert "line 2, column 73: text beyond column 72" in strict.stderr
    assert "not started" in strict.stderr and "Traceback" not in strict.stderr


@pytest.mark.parametrize(
    "forward, words",
    [
        ("FWDQ(96) FWDQM(1)", "FWDQ(96) FWDQM(1) is the dead-letter queue this handler reads"),
        ("FWDQ(DLQ)", "FWDQ(DLQ) is the dead-letter queue this handler reads"),
        ("FWDQ(PAMS_DEAD_LETTER_QUEUE) FWDQM(1)", "a loop"),
        ("FWDQ(NOSUCH)", "FWDQ(NOSUCH) names no queue of the bus: group 1"),
        ("FWDQ(10) FWDQM(9)", "names group 9, which the bus does not have"),
        ("FWDQ(ORDERS) FWDQM(9)", "no group 9"),
    ],
)
def test_a_table_is_checked_against_the_bus_with_line_and_column(
    configured, tmp_path, forward, words
) -> None:
    rules = tmp_path / "loop.txt"
    rules.write_text(f"REASON(MQRC_Q_FULL) ACTION(RETRY)\nACTION(FWD) {forward}\n")
    for mode in ("--check", "--once"):
        result = subprocess.run(
            _handler_command(configured, rules, mode),
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert result.returncode == 2, result.stderr
        first, last = result.stderr.splitlines()
        assert f"{rules}: line 2, column 13: " in first and words in first
        assert last == "mrs dlq-handler: 1 error(s) in the rules table; not started"


def test_check_reads_stdin_and_72_columns(configured, tmp_path) -> None:
    bus = configured
    table = "ACTION(FWD) FWDQ(" + "Q" * 54 + ")\nDESTQ(A-\nB) ACTION(IGNORE)\n"
    command = [
        c for c in _handler_command(bus, tmp_path / "x", "--check") if c != str(tmp_path / "x")
    ]
    del command[command.index("--config") : command.index("--config") + 4]  # no bus: no FWDQ check
    result = subprocess.run(command, input=table, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "2 rules" in result.stdout


def test_unreachable_server_is_exit_3(configured, tmp_path) -> None:
    bus = configured
    rules = tmp_path / "rules.txt"
    rules.write_text("ACTION(IGNORE)\n")
    command = _handler_command(bus, rules, "--once")
    command[command.index("--address") + 1] = f"127.0.0.1:{free_port()}"  # nobody listens
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["summary"]["forwarded"] == 0


async def test_status_shows_a_running_handlers_counts(bus) -> None:
    async with bus.connect(queue="SENDER") as sender:
        await put_letter(sender, b"a", letter_header(dest_q_name="91"))
        await put_letter(sender, b"b", letter_header(dest_q_name="92"))
        await put_letter(sender, b"c", letter_header(dest_q_name="93"))
    table = "DESTQ(91) ACTION(DISCARD)\nDESTQ(92) ACTION(FWD) FWDQ(ANYORDER)\nACTION(IGNORE)\n"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_handler, bus, table, None)  # WAIT(YES): keeps running
        async with bus.connect(queue=None) as client:
            with trio.fail_after(20):
                while True:
                    readers = (await client.status())["dlq_readers"]
                    if readers and readers[0]["got"] == 3 and readers[0]["held"] == 1:
                        break
                    await trio.sleep(0.05)
        table = await trio.run_process(
            [sys.executable, "-m", "mrs", "status", "--address", bus.address],
            capture_stdout=True,
            cwd=ROOT,
        )
        nursery.cancel_scope.cancel()
    assert "DLQ readers" in table.stdout.decode()
    [reader] = readers
    assert (reader["moved"], reader["discarded"], reader["put"]) == (1, 1, 1)


# ---------------------------------------------------------------------- INPUTQ(DLJ)
def dlj_seqs(bus) -> list[int]:
    from journals import Journal, JournalStore

    store = JournalStore(bus.data_dir / "journals", readonly=True)
    try:
        return [record.seq for _key, record in store.scan(Journal.DLJ)]
    finally:
        store.close()


async def test_inputq_dlj_works_the_dead_letter_journal(bus, tmp_path) -> None:
    async with bus.connect(queue="SENDER") as sender:
        seqs = []
        for body, queue in ((b"fwd", "1.50"), (b"drop", "1.51"), (b"keep", "1.52")):
            psb = await sender.put(
                body, target=queue, delivery=MODE.WF_DQF, uma=Uma.DLJ, correlation_id=body
            )
            assert psb.uma_status == Status.DLJ_SUCCESS
            seqs.append(psb.seq)
    assert dlj_seqs(bus) == seqs
    rules = tmp_path / "rules.txt"
    rules.write_text(
        "INPUTQ(DLJ) WAIT(NO)\n"
        "REASON(MQRC_UNKNOWN_OBJECT_NAME) DESTQ(50) ACTION(FWD) FWDQ(ANYORDER)\n"
        "DESTQ(51) ACTION(DISCARD)\n"
        "ACTION(IGNORE)\n"
    )
    result = subprocess.run(
        _handler_command(bus, rules), capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0, result.stderr
    outcomes = {
        event["seq"]: event["outcome"]
        for event in map(json.loads, result.stdout.splitlines())
        if "seq" in event
    }
    assert outcomes == dict(zip(seqs, ["forwarded", "discarded", "left"], strict=True))
    assert dlj_seqs(bus) == [seqs[2]]  # removed once the forward was stored / discarded
    async with bus.connect(queue="ANYORDER") as target:
        [message] = await take_all(target)
    assert (message.body, message.correlation_id, str(message.source)) == (b"fwd", b"fwd", "1.13")
    assert message.dead_letter_header["reason"] == 2085
    assert message.dead_letter_header["put_appl_name"] == "NYC"


async def test_dlj_attempt_before_put_marks_a_repeat(bus) -> None:
    from mrs.dlq.sources import DljSource
    from mrs.offline.journal_files import locate

    async with bus.connect(queue="SENDER") as sender:
        psb = await sender.put(b"x", target="1.50", delivery=MODE.WF_DQF, uma=Uma.DLJ)
    where = locate(argparse_namespace(bus))
    first = DljSource(where, "NYC")
    await first.open(print)
    message = await first.take(0)
    assert (message.seq, message.delivery_status) == (psb.seq, Status.CONFIRMREQ)
    await first.before_put(message)  # ... and the handler is killed before the removal
    first.close()
    second = DljSource(where, "NYC")
    await second.open(print)
    again = await second.take(0)
    assert (again.seq, again.delivery_status) == (psb.seq, Status.POSSDUPL)
    await second.remove(again)
    second.close()
    assert dlj_seqs(bus) == []


def argparse_namespace(bus):
    import argparse

    return argparse.Namespace(config=bus.config_path, group=1, data_dir=None)


async def test_continued_and_full_width_rules_against_the_server(bus, tmp_path) -> None:
    """A rule continued with '+' and '-' and one exactly 72 columns wide do what they say."""
    wide = "DESTQ(92) APPLNAME(bill*)    ACTION(FWD)   FWDQ(ANYORDER)     HEADER(NO)"
    assert len(wide) == 72
    rules = tmp_path / "rules.txt"
    rules.write_text("* continued rules\nDESTQ(9+\n      1) ACTION(DIS-\nCARD)\n" + wide + "\n")
    async with bus.connect(queue="SENDER") as sender:
        await put_letter(sender, b"gone", letter_header(dest_q_name="91"))
        await put_letter(sender, b"moved", letter_header(dest_q_name="92"))
    result = subprocess.run(
        _handler_command(bus, rules, "--once"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted((e["rule_line"], e["outcome"]) for e in events if "seq" in e) == [
        (2, "discarded"),
        (5, "forwarded"),
    ]
    async with bus.connect(queue="ANYORDER") as target:
        [message] = await take_all(target)
    assert message.body == b"moved" and message.dead_letter_header is None
    assert await dlq_bodies(bus) == []


def test_a_replicated_groups_dlj_is_not_worked_in_place(tmp_path) -> None:
    """INPUTQ(DLJ) marks and deletes DLJ records in the journals it opens: on a
    replicated group that would be one instance's copy only (the others keep theirs,
    and they come back after a failover). Refused in one line; its DLQ is fine."""
    from sim.etcd import write_replicated_config

    config = write_replicated_config(tmp_path, "http://127.0.0.1:1", STANDARD_QUEUES)
    rules = tmp_path / "dlj.txt"
    rules.write_text("INPUTQ(DLJ) WAIT(NO)\nACTION(DISCARD)\n")
    result = subprocess.run(
        _handler_command(Configured(config), rules), capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "mrs dlq-handler: INPUTQ(DLJ): group 1 (NYC) is replicated: a handler would delete "
        "from one instance's DLJ, and the others would keep their copies; work its DLQ "
        "(INPUTQ(DLQ)), or replay the DLJ with mrs jplay"
    ]
