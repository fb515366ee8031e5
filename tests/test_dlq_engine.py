"""The rule engine without I/O: first match wins, per-rule attempt counts, RETRYINT
spacing, IGNORE when all fail or none match, no-header messages, the bounded record."""

from __future__ import annotations

from mrs.dlq.engine import Engine, StepKind
from mrs.dlq.match import Letter
from mrs.dlq.parser import parse_table

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
