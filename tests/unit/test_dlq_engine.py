"""The rule engine without I/O: first match wins, per-rule attempt counts, RETRYINT
spacing, IGNORE when all fail or none match, no-header messages, the bounded record."""

from __future__ import annotations

import io
import time

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from mrs.config.bus import load_config
from mrs.dlq.engine import Engine, StepKind
from mrs.dlq.handler import Handler, HandlerOptions
from mrs.dlq.match import Letter, letter_values, value_matches
from mrs.dlq.parser import parse_table
from mrs.dlq.report import Reporter
from mrs.limits import DLQ_MATCH_CHARS_MAX, DLQ_RETRY_INTERVAL_S_MIN
from mrs.model import Address, DeliveryMode, Message, Psb, Status

HEADER = {"reason": 2053, "dest_q_name": "10", "dest_q_mgr_name": "1", "format": "MRS"}


def letter(seq: int = 1, header: dict | None = HEADER, **fields) -> Letter:
    return Letter(seq=seq, header=header, source=(1, 13), **fields)


def test_retry_spacing_then_next_matching_rule_then_ignore() -> None:
    engine = Engine(
        parse_table("""\
RETRYINT(30)
REASON(MQRC_Q_FULL) ACTION(RETRY) RETRY(3)
DESTQ(99) ACTION(DISCARD)
ACTION(FWD) FWDQ(X) RETRY(2)
""")
    )
    assert engine.admit(letter(), now_s=0)
    steps = []
    now = 0.0
    for _ in range(20):
        step = engine.step(1, now)
        steps.append((step.kind, step.rule.line if step.rule else None, step.attempt, now))
        if step.kind is StepKind.IGNORE:
            break
        if step.kind is StepKind.WAIT:
            now += step.wait_s
            continue
        engine.failed(1, now)
    acts = [(line, attempt, at) for kind, line, attempt, at in steps if kind is StepKind.ACT]
    # rule 3 (DESTQ(99)) never matches; retries 30 s apart; FWD right after RETRY gave up.
    assert acts == [(2, 1, 0), (2, 2, 30), (2, 3, 60), (4, 1, 60), (4, 2, 90)]
    assert steps[-1][0] is StepKind.IGNORE
    assert engine.step(1, 1000).reason == "every matching rule failed"


def test_first_match_wins_and_success_forgets() -> None:
    engine = Engine(parse_table("DESTQ(1*) ACTION(DISCARD)\nACTION(IGNORE)\n"))
    engine.admit(letter(1), 0)
    engine.admit(letter(2, {**HEADER, "dest_q_name": "20"}), 0)
    assert engine.step(1, 0).rule.line == 1
    assert engine.step(2, 0).kind is StepKind.IGNORE and engine.step(2, 0).rule.line == 2
    engine.forget(1)
    assert engine.seen == 1


def test_no_rule_and_no_header() -> None:
    engine = Engine(parse_table("DESTQ(77) ACTION(DISCARD)\n"))
    engine.admit(letter(1), 0)
    engine.admit(letter(2, None), 0)
    assert engine.step(1, 0).reason == "no rule matches"
    assert engine.step(2, 0).kind is StepKind.NO_HEADER


def test_record_of_seen_messages_is_bounded() -> None:
    engine = Engine(parse_table("ACTION(IGNORE)\n"), seen_max=2)
    assert engine.admit(letter(1), 0) and engine.admit(letter(2), 0)
    assert engine.full() and not engine.admit(letter(3), 0)
    assert engine.admit(letter(2), 0)  # one already seen is still known
    engine.forget(1)
    assert engine.admit(letter(3), 0)


# ---------------------------------------------------------------------- the handler loop
class FakeClient:
    """Puts refused as EXCEEDQUOTA until `room_at_s` (test time), then ENQUEUED."""

    def __init__(self, room_at_s: float) -> None:
        self.room_at_s = room_at_s
        self.puts: list[tuple[float, str]] = []

    async def put(self, body, target, **options):
        now = trio.current_time()
        self.puts.append((now, target))
        if now < self.room_at_s:
            return Psb(Status.SUCCESS, Status.EXCEEDQUOTA, 1, Status.DISC_SUCCESS)
        return Psb(Status.SUCCESS, Status.ENQUEUED, 1, Status.NO_UMA)


class FakeSource:
    def __init__(self, messages) -> None:
        self.messages = list(messages)
        self.removed: list[int] = []

    async def take(self, timeout_s):
        if self.messages:
            return self.messages.pop(0)
        await trio.sleep(timeout_s)
        return None

    async def before_put(self, message) -> None:
        pass

    async def remove(self, message, discarded: bool = False) -> None:
        self.removed.append(message.seq)


def dead_letter(seq: int, body: bytes = b"m", **header_fields: str) -> Message:
    """A DLQ message for destination 1.14 (`header_fields` added to its MQDLH)."""
    header = {**HEADER, "dest_q_name": "14", "put_date": "20261123", "put_time": "12000000"}
    header.update(header_fields)
    return Message(
        body=body,
        seq=seq,
        source=Address(1, 13),
        target=Address(1, 96),
        delivery=DeliveryMode.WF_MEM,
        delivery_status=Status.CONFIRMREQ,
        dead_letter_header=header,
    )


async def test_handler_retries_every_retryint_under_a_mock_clock(autojump_clock, tmp_path) -> None:
    """RETRY(5) RETRYINT(60): attempts at 0, 60, 120 s fail while the queue is full;
    the one at 180 s is stored and only then is the message removed."""
    table = parse_table("RETRYINT(60) WAIT(NO)\nREASON(MQRC_Q_FULL) ACTION(RETRY) RETRY(5)\n")
    client = FakeClient(room_at_s=trio.current_time() + 150)
    source = FakeSource([dead_letter(7)])
    start = trio.current_time()
    out = io.StringIO()
    config = tmp_path / "bus.toml"
    config.write_text('[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n')
    options = HandlerOptions("unused:0", 1, load_config(config), wait_s=0)
    handler = Handler(Engine(table), options, Reporter(True, out))
    await handler.serve(client, source)
    assert [(round(at - start), target) for at, target in client.puts] == [
        (0, "1.14"),
        (60, "1.14"),
        (120, "1.14"),
        (180, "1.14"),
    ]
    assert source.removed == [7]
    assert handler.summary()["retried"] == 1 and handler.summary()["attempts_failed"] == 3


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


# ---------------------------------------------------------------------- properties
def _reference_match(pattern: str, text: str) -> bool:
    """`*` any run, `?` one character, everything else literal (a plain recursion)."""
    if not pattern:
        return not text
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        return any(_reference_match(rest, text[i:]) for i in range(len(text) + 1))
    return bool(text) and (head == "?" or head == text[0]) and _reference_match(rest, text[1:])


@settings(max_examples=400, deadline=None)
@given(st.text("ab*?.[]\\\\", max_size=8), st.text("ab.[]\\\\", max_size=8))
def test_wildcards_match_like_the_reference(pattern: str, text: str) -> None:
    expected = _reference_match(pattern.rstrip(), text.rstrip())
    assert value_matches("APPLNAME", pattern, (text,)) is expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5), st.integers(0, 100))
def test_every_matching_rule_gets_exactly_its_retry_attempts(retries, interval_s) -> None:
    """All attempts fail: each rule in order, RETRY(n) attempts each, RETRYINT apart,
    then IGNORE. (The property behind runmqdlq's processing rules.)"""
    text = f"RETRYINT({interval_s})\n" + "".join(
        f"ACTION(FWD) FWDQ(Q{index}) RETRY({count})\n" for index, count in enumerate(retries)
    )
    engine = Engine(parse_table(text))
    engine.admit(letter(), 0)
    now, acts = 0.0, []
    while (step := engine.step(1, now)).kind is not StepKind.IGNORE:
        if step.kind is StepKind.WAIT:
            now += step.wait_s
            continue
        acts.append((step.rule.fwd_q, step.attempt, now))
        engine.failed(1, now)
    expected, at = [], 0.0
    for index, count in enumerate(retries):
        for attempt in range(1, count + 1):
            expected.append((f"Q{index}", attempt, at))
            at += max(interval_s, DLQ_RETRY_INTERVAL_S_MIN) if attempt < count else 0
    assert acts == expected


def test_retryint_zero_does_not_repeat_a_failing_put_without_a_pause() -> None:
    """RETRYINT(0) RETRY(1000) against a destination that refuses at once: a loop of puts
    as fast as the server answers, unless the attempts keep a floor between them."""
    engine = Engine(parse_table("RETRYINT(0)\nACTION(FWD) FWDQ(X) RETRY(1000)\n"))
    engine.admit(letter(), 0)
    assert engine.step(1, 0.0).kind is StepKind.ACT
    engine.failed(1, 0.0)
    step = engine.step(1, 0.0)
    assert step.kind is StepKind.WAIT
    assert step.wait_s == DLQ_RETRY_INTERVAL_S_MIN > 0


# ---------------------------------------------------------------------- hostile values
def test_a_pattern_on_a_huge_user_id_costs_milliseconds_not_a_backtracking_search() -> None:
    """`*a*b*` against 300 KB with no `b`: a backtracking regex needed ~27 s here; the
    glob matcher finds the pieces leftmost, and the handler cuts a user id to MQ's 12."""
    huge = "a" * 300_000
    started = time.perf_counter()
    assert not value_matches("USERID", "*a*b*", (huge,))
    assert not value_matches("USERID", "*a?*b*", (huge,))
    assert value_matches("USERID", "*a*a", (huge,))
    assert time.perf_counter() - started < 1.0
    values = letter_values(letter(headers={"user_id": "alice" + "x" * 300_000}))
    assert values["USERID"] == ("alicexxxxxxx",)  # MQ's UserIdentifier holds 12


def test_every_matched_value_is_cut_to_its_mq_field_length() -> None:
    long_header = {**HEADER, "put_appl_name": "n" * 5000, "format": "f" * 5000}
    values = letter_values(letter(header=long_header, correlation_id=b"c" * 5000))
    assert values["APPLNAME"] == ("n" * 28,)
    assert values["FORMAT"] == ("f" * 8,)
    assert values["APPLIDAT"] == ("c" * 32,)
    assert all(len(text) <= DLQ_MATCH_CHARS_MAX[k] for k, texts in values.items() for text in texts)
