"""The rules-table parser and printer: runmqdlq's grammar, errors with line and column,
and property tests (print -> parse round trip; random text only ever a RulesError)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrs.dlq.codes import MQFB, MQMT, MQPER, MQRC
from mrs.dlq.parser import RulesError, parse_table
from mrs.dlq.table import (
    COLUMNS_SIGNIFICANT,
    PATTERN_KEYWORDS,
    RETRY_MAX,
    Action,
    Control,
    PutAuthority,
    Rule,
    RulesTable,
    print_table,
)

REFERENCE_TABLE = """\
* Control data: the DLQ of this group, re-scan every 5 s, stop when idle.
INPUTQ(' ') RETRYINT(5) WAIT(NO)
* Queue full: put it back once the queue has drained.
REASON(MQRC_Q_FULL) ACTION(RETRY) RETRY(3)
* Replies to a queue that is gone go to the requester's reply queue.
DESTQ(ORD*) MSGTYPE(MQMT_REPLY) ACTION(FWD) +
   FWDQ(&REPLYQ) FWDQM(&REPLYQM) HEADER(NO)
PERSIST(MQPER_PERSISTENT) FORMAT(' '), ACTION(DISCARD)
ACTION (FWD) FWDQ (REALLY.DEAD.QUEUE) HEADER (YES)
"""


def only_problem(text: str) -> tuple[int, int, str]:
    with pytest.raises(RulesError) as caught:
        parse_table(text)
    assert len(caught.value.problems) == 1, caught.value.problems
    problem = caught.value.problems[0]
    return problem.line, problem.column, problem.message


def test_reference_table() -> None:
    table = parse_table(REFERENCE_TABLE)
    assert table.control == Control(" ", None, 5, 0, ("INPUTQ", "RETRYINT", "WAIT"))
    retry, reply, discard, catch_all = table.rules
    assert (retry.action, retry.retry, retry.pattern("REASON")) == (Action.RETRY, 3, "MQRC_Q_FULL")
    assert reply.patterns == (("DESTQ", "ORD*"), ("MSGTYPE", "MQMT_REPLY"))
    assert (reply.fwd_q, reply.fwd_qm, reply.header) == ("&REPLYQ", "&REPLYQM", False)
    assert discard.pattern("FORMAT") == " " and discard.action is Action.DISCARD
    assert (catch_all.patterns, catch_all.fwd_q, catch_all.header) == (
        (),
        "REALLY.DEAD.QUEUE",
        True,
    )
    assert [rule.line for rule in table.rules] == [4, 6, 8, 9]
    assert catch_all.pattern("DESTQ") == "*"  # every pattern keyword defaults to '*'


def test_keywords_any_order_any_case_commas_or_blanks() -> None:
    one = parse_table("action(fwd),fwdq(Q.A)  , destq(X)   header(no)")
    two = parse_table("DESTQ(X) HEADER(NO) FWDQ(Q.A) ACTION(FWD)")
    assert one == two
    assert one.rules[0].fwd_q == "Q.A"  # values keep their case


def test_plus_continues_at_first_nonblank_minus_from_column_one() -> None:
    plus = parse_table("DESTQ(AB+\n      CD) ACTION(IGNORE)")
    minus = parse_table("DESTQ(AB-\nCD) ACTION(IGNORE)")
    assert plus.rules[0].pattern("DESTQ") == "ABCD" == minus.rules[0].pattern("DESTQ")
    blank_kept = parse_table("FORMAT('A-\n  B') ACTION(IGNORE)")
    assert blank_kept.rules[0].pattern("FORMAT") == "A  B"
    rule = parse_table("ACTION(FWD) +\n  FWDQ(X) +\n\n").rules[0]
    assert rule.fwd_q == "X"


def test_seventy_two_columns() -> None:
    exactly = "ACTION(FWD) FWDQ(" + "Q" * (COLUMNS_SIGNIFICANT - 18) + ")"
    assert len(exactly) == COLUMNS_SIGNIFICANT
    assert parse_table(exactly + "      ").rules[0].fwd_q == "Q" * 54  # trailing blanks ok
    with pytest.raises(RulesError) as caught:
        parse_table("* c\n" + exactly + "Z", strict=True)
    assert [(p.line, p.column) for p in caught.value.problems] == [(2, 73)]


def test_comments_and_blank_lines() -> None:
    table = parse_table("\n* ACTION(BAD)\n   * indented comment\n\nACTION(IGNORE)\n")
    assert len(table.rules) == 1 and table.rules[0].line == 5


def test_a_comment_line_inside_a_continued_rule_is_a_comment() -> None:
    """IBM: comment lines "can occur anywhere in the rules table"; read as rule text,
    the comment's words became keywords (or an error on a table that is right)."""
    table = parse_table(
        "DESTQ(ORDERS) +\n* forward orders to the repair queue\n  ACTION(FWD) +\n"
        "   * with their header\n  FWDQ(REPAIR)\n"
    )
    assert len(table.rules) == 1
    assert table.rules[0].fwd_q == "REPAIR" and table.rules[0].pattern("DESTQ") == "ORDERS"


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ("ACTION(IGNORE)\nFORMAT('') ACTION(IGNORE)", 2, 8, "at least one"),
        ("FORMAT() ACTION(IGNORE)", 1, 8, "at least one"),
        ("FORMAT ACTION(IGNORE)", 1, 1, "needs a value"),
        ("ACTION(IGNORE)\n\n  DESTQ(A) DESTQ(B) ACTION(IGNORE)", 3, 12, "twice"),
        ("ACTION(FWD)", 1, 1, "needs FWDQ"),
        ("ACTION(FWD) FWDQ(' ')", 1, 13, "queue name is required"),
        ("ACTION(FWD) FWDQ(&DESTQM)", 1, 13, "&DESTQ and &REPLYQ"),
        ("ACTION(FWD) FWDQ(A*)", 1, 13, "no wildcards"),
        ("ACTION(RETRY) RETRY(0)", 1, 15, "1..999999999"),
        (f"ACTION(RETRY) RETRY({RETRY_MAX + 1})", 1, 15, "1..999999999"),
        ("ACTION(RETRY) RETRY(x)", 1, 15, "whole number"),
        ("ACTION(SHOUT)", 1, 1, "DISCARD, IGNORE, RETRY or FWD"),
        ("DESTQ(A)", 1, 1, "no ACTION"),
        ("ACTION(IGNORE) HEADER(NO)", 1, 16, "only valid with ACTION(FWD)"),
        ("ACTION(FWD) FWDQ(A) HEADER(MAYBE)", 1, 21, "YES or NO"),
        ("ACTION(FWD) FWDQ(A) PUTAUT(ME)", 1, 21, "DEF or CTX"),
        ("REASON(MQRC_NOPE) ACTION(IGNORE)", 1, 1, "known REASON name"),
        ("COLOUR(RED) ACTION(IGNORE)", 1, 1, "unknown keyword COLOUR"),
        ("ACTION(IGNORE) WAIT(NO)", 1, 16, "control data"),
        ("WAIT(SOMETIMES)", 1, 1, "must be YES, NO or a whole number"),
        ("WAIT(NO) DESTQ(A) ACTION(IGNORE)", 1, 10, "cannot be in the control data"),
        ("DESTQ('abc ACTION(IGNORE)", 1, 7, "not closed"),
        ("DESTQ(a b) ACTION(IGNORE)", 1, 9, "expected ')'"),
        ("ACTION(IGNORE) +", 1, 1, "ends inside a continued rule"),
        ("* only a comment", 1, 1, "no rule"),
        ("ACTION(IGNORE) )", 1, 16, "expected a keyword"),
    ],
)
def test_errors_name_line_and_column(text: str, line: int, column: int, words: str) -> None:
    found = only_problem(text)
    assert found[:2] == (line, column), found
    assert words in found[2]


def test_every_bad_rule_is_reported_once() -> None:
    text = "ACTION(FWD)\nACTION(IGNORE)\nDESTQ(A) DESTQ(B) ACTION(X)\n" + "A" * 80
    with pytest.raises(RulesError) as caught:
        parse_table(text, strict=True)
    assert [(p.line, p.column) for p in caught.value.problems] == [(1, 1), (3, 10), (4, 73)]
    assert str(caught.value).splitlines()[0] == "line 1, column 1: ACTION(FWD) needs FWDQ"


def test_a_line_beyond_column_72_is_read_whole_with_a_warning_and_refused_when_strict() -> None:
    """IBM keeps 72 columns "for portability"; real tables run longer."""
    long_line = (
        "REASON(MQRC_Q_FULL) DESTQ(ORDERS) DESTQM(NYC) ACTION(FWD) FWDQ(ORDERS_OVERFLOW) "
        "FWDQM(NYC) HEADER(YES)"
    )
    assert len(long_line) > COLUMNS_SIGNIFICANT
    table = parse_table(f"RETRYINT(5)\n{long_line}\n")
    [rule] = table.rules
    assert (rule.fwd_q, rule.fwd_qm, rule.header) == ("ORDERS_OVERFLOW", "NYC", True)
    assert table.warnings == (
        "line 2, column 73: warning: text beyond column 72 read as part of the rule "
        "(runmqdlq keeps 72 columns for portability; --strict refuses such a line)",
    )
    with pytest.raises(RulesError) as caught:
        parse_table(f"RETRYINT(5)\n{long_line}\n", strict=True)
    assert [(p.line, p.column) for p in caught.value.problems] == [(2, 73)]
    assert parse_table("ACTION(IGNORE)\n").warnings == ()


@pytest.mark.parametrize(
    "forward",
    ["FWDQ(DLQ)", "FWDQ(96)", "FWDQ(pams_dead_letter_queue)", "FWDQ(SYSTEM.DEAD.LETTER.QUEUE)"],
)
def test_a_rule_forwarding_to_the_dlq_it_reads_is_refused_at_its_fwdq(forward: str) -> None:
    line, column, message = only_problem(f"ACTION(IGNORE)\nREASON(2053) ACTION(FWD) {forward}\n")
    assert (line, column) == (2, 26)
    assert "is the dead-letter queue this handler reads" in message and "loop" in message
    # Another group's DLQ, or this DLQ from a handler of the DLJ, is no loop.
    parse_table(f"ACTION(FWD) {forward} FWDQM(2)\n")
    parse_table(f"INPUTQ(DLJ)\nACTION(FWD) {forward}\n")


def test_continued_rule_error_points_into_the_right_line() -> None:
    assert only_problem("ACTION(FWD) +\n    FWDQ(A) HEADER(X)")[:2] == (2, 13)


def test_printer_splits_long_rules_within_72_columns() -> None:
    rule = Rule(
        patterns=tuple((keyword, "V" * 30) for keyword in ("APPLNAME", "DESTQ", "USERID")),
        action=Action.FWD,
        fwd_q="F" * 100,
        given=("FWDQ",),
    )
    text = print_table(RulesTable(Control(), (rule,)))
    assert all(len(line) <= COLUMNS_SIGNIFICANT for line in text.splitlines())
    assert len(text.splitlines()) > 2
    assert parse_table(text).rules == (rule,)


# ---------------------------------------------------------------------- properties
_VALUE_CHARS = st.characters(min_codepoint=32, max_codepoint=126)
_NAME = st.from_regex(r"[A-Za-z0-9_.%/$#@:][A-Za-z0-9_.%/$#@:-]{0,60}", fullmatch=True)
_TEXT_VALUE = st.text(_VALUE_CHARS, min_size=1, max_size=80)
_WILD = st.from_regex(r"[A-Za-z0-9_.]*[*?][A-Za-z0-9_.*?]*", fullmatch=True)


def _numeric(names: dict[str, int]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(sorted(names)),
        st.integers(-(10**9), 10**9).map(str),
        _WILD,
    )


_PATTERN_VALUES = {
    "REASON": _numeric({**MQRC, **MQFB}),
    "FEEDBACK": _numeric(MQFB),
    "MSGTYPE": _numeric(MQMT),
    # a dead letter is 0 or 1: any other PERSIST is refused (it would match nothing)
    "PERSIST": st.one_of(
        st.sampled_from(sorted(name for name, value in MQPER.items() if value in (0, 1))),
        st.sampled_from(["0", "1"]),
        _WILD,
    ),
}


@st.composite
def rules(draw) -> Rule:
    keywords = draw(st.lists(st.sampled_from(PATTERN_KEYWORDS), unique=True, max_size=5))
    patterns = tuple(
        (keyword, draw(_PATTERN_VALUES.get(keyword, _TEXT_VALUE)))
        for keyword in PATTERN_KEYWORDS
        if keyword in keywords
    )
    action = draw(st.sampled_from(list(Action)))
    given = []
    fields: dict = {}
    if action is Action.FWD:
        fields["fwd_q"] = draw(st.one_of(_NAME, st.sampled_from(["&DESTQ", "&REPLYQ"])))
        given.append("FWDQ")
        if draw(st.booleans()):
            fields["fwd_qm"] = draw(st.one_of(_NAME, st.sampled_from(["&DESTQM", "&REPLYQM", " "])))
            given.append("FWDQM")
        if draw(st.booleans()):
            fields["header"] = draw(st.booleans())
            given.append("HEADER")
        if draw(st.booleans()):
            fields["put_authority"] = draw(st.sampled_from(list(PutAuthority)))
            given.append("PUTAUT")
    if draw(st.booleans()):
        fields["retry"] = draw(st.integers(1, RETRY_MAX))
        given.append("RETRY")
    order = ("FWDQ", "FWDQM", "HEADER", "PUTAUT", "RETRY")
    return Rule(patterns, action, given=tuple(k for k in order if k in given), **fields)


@st.composite
def controls(draw) -> Control:
    given = draw(st.lists(st.sampled_from(["INPUTQ", "INPUTQM", "RETRYINT", "WAIT"]), unique=True))
    return Control(
        input_q=draw(st.one_of(_NAME, st.just(" "))) if "INPUTQ" in given else None,
        input_qm=draw(st.one_of(_NAME, st.just(" "))) if "INPUTQM" in given else None,
        retry_interval_s=draw(st.integers(0, RETRY_MAX)) if "RETRYINT" in given else 60,
        wait_s=draw(st.one_of(st.none(), st.integers(0, 10**6))) if "WAIT" in given else None,
        given=tuple(k for k in ("INPUTQ", "INPUTQM", "RETRYINT", "WAIT") if k in given),
    )


tables = st.builds(RulesTable, controls(), st.lists(rules(), min_size=1, max_size=6).map(tuple))


@settings(max_examples=300, deadline=None)
@given(tables)
def test_print_then_parse_is_the_same_table(table: RulesTable) -> None:
    text = print_table(table)
    assert all(len(line.rstrip()) <= COLUMNS_SIGNIFICANT for line in text.splitlines())
    assert parse_table(text) == table


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=300))
def test_random_text_is_a_table_or_a_rules_error(text: str) -> None:
    try:
        parse_table(text)
    except RulesError as error:
        assert error.problems
        assert all(problem.line >= 1 and problem.column >= 1 for problem in error.problems)


@settings(max_examples=300, deadline=None)
@given(tables, st.data())
def test_damaged_tables_are_a_table_or_a_rules_error(table: RulesTable, data) -> None:
    text = print_table(table)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 5))
        insert = data.draw(st.text(alphabet="()'+-*,& \nAZ?", max_size=4))
        text = text[:at] + insert + text[at + cut :]
    try:
        parse_table(text)
    except RulesError as error:
        assert error.problems


def test_a_number_too_long_to_read_is_a_rules_error() -> None:
    digits = "7" * 5000
    lines = [digits[i : i + 60] + "+" for i in range(0, len(digits), 60)]
    text = "DESTQ(*) ACTION(RETRY) RETRY(+\n" + "\n".join(lines)[:-1] + ")\n"
    found = only_problem(text)
    assert found[:2] == (1, 24) and "RETRY(5000 digits): must be a whole number in 1.." in found[2]
