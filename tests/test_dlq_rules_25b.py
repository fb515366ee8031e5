"""The dead-letter handler's rules table as an IBM MQ administrator writes it: the
printer and the parser agree on every table (a pattern with a `*` was cut where the
next line became a comment), a table cut short after a trailing '+' is refused
whether or not its file ends with a newline, an error quotes a huge value in a line,
not in megabytes, and control data spread over lines says how to write it. Property
tests: tables written by hand (any case, blanks, commas, quotes, continuations,
comments) parse to the table they spell, and `*`/`?` match as a regular expression
does. `mrs dlq-handler --check` is run as a real process where the CLI matters."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrs.dlq.engine import Engine, StepKind
from mrs.dlq.match import Letter, glob_matches
from mrs.dlq.parser import SHOWN_CHARS_MAX, parse_table
from mrs.dlq.table import (
    COLUMNS_SIGNIFICANT,
    DEAD_LETTER_QUEUE_NAMES,
    PATTERN_KEYWORDS,
    Action,
    Control,
    PutAuthority,
    Rule,
    RulesTable,
    print_table,
)
from sim.processes import write_single_group_config
from tests.cli_helpers import run_mrs
from tests.conftest import STANDARD_QUEUES
from tests.unit.test_dlq_rules import only_problem


# ------------------------------------------------------------- the printer's '-' splits
def test_a_star_at_a_split_is_not_read_as_a_comment() -> None:
    """print_table split a long pattern with '-' after exactly 71 characters; when the
    next character was '*' the continuation line began with '*', a comment to the
    parser: the rest of the rule was lost and the printed table did not parse."""
    value = "A" * 62 + "*B" + "C" * 10
    table = RulesTable(Control(), (Rule((("APPLIDAT", value),), Action.IGNORE),))
    text = print_table(table)
    assert not any(line.lstrip().startswith("*") for line in text.splitlines())
    assert all(len(line) <= COLUMNS_SIGNIFICANT for line in text.splitlines())
    assert parse_table(text) == table


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from("*A ?'-+,()"), min_size=60, max_size=220))
def test_any_pattern_prints_to_text_that_parses_back(value: str) -> None:
    table = RulesTable(Control(), (Rule((("APPLNAME", value), ("USERID", "x*")), Action.DISCARD),))
    assert parse_table(print_table(table)) == table


def test_a_run_of_stars_longer_than_a_line_is_printed_whole() -> None:
    """No continuation line may start with '*', so such a run cannot be split: the
    line runs past column 72 (read whole, with the usual warning) rather than lost."""
    table = RulesTable(Control(), (Rule((("FORMAT", "*" * 100),), Action.IGNORE),))
    back = parse_table(print_table(table))
    assert back == table and len(back.warnings) == 1


# ------------------------------------------------- a table that ends inside a rule
@pytest.mark.parametrize(
    "text",
    [
        "REASON(MQRC_Q_FULL) ACTION(RETRY) +\n",
        "REASON(MQRC_Q_FULL) ACTION(RETRY) +",
        "REASON(MQRC_Q_FULL) ACTION(RETRY) -\r\n",
        "REASON(MQRC_Q_FULL) ACTION(RETRY) +\n* the rest of the rule was here\n",
    ],
)
def test_a_table_cut_short_after_a_continuation_is_refused(text: str) -> None:
    """The newline that ends a file was read as one more, blank, line, which ends a
    continued rule: `... +` as the last line was accepted when the file ended with a
    newline (as nearly every file does) and refused when it did not."""
    assert only_problem(text) == (1, 1, "the table ends inside a continued rule")


def test_a_blank_line_after_a_continuation_still_ends_the_rule() -> None:
    """What docs/dlq-handler.md says stays true: a blank line ends a continued rule."""
    table = parse_table("ACTION(FWD) +\n  FWDQ(X) +\n\nACTION(IGNORE)\n")
    assert [rule.action for rule in table.rules] == [Action.FWD, Action.IGNORE]


# ------------------------------------------------------------- errors an operator reads
_HUGE = "Q" * 100_000


@pytest.mark.parametrize(
    ("text", "column"),
    [
        (f"{_HUGE}(X) ACTION(IGNORE)", 1),
        (f"ACTION({_HUGE})", 1),
        (f"ACTION(FWD) FWDQ(&{_HUGE})", 13),
        (f"ACTION(FWD) FWDQ({_HUGE}*)", 13),
        (f"REASON({_HUGE}) ACTION(IGNORE)", 1),
        (f"MSGTYPE({_HUGE}) ACTION(IGNORE)", 1),
        (f"ACTION(FWD) FWDQ(X) HEADER({_HUGE})", 21),
        (f"ACTION(FWD) FWDQ(X) PUTAUT({_HUGE})", 21),
    ],
)
def test_an_error_quotes_a_huge_value_in_a_line(text: str, column: int) -> None:
    """Each of these errors quoted the whole value: a 100,000-character token (a
    base64 blob, a minified file named by mistake) made a 100 KB error line."""
    line, found_column, message = only_problem(text)
    assert (line, found_column) == (1, column)
    assert len(message) < 200, message[:300]
    assert re.search(rf"Q{{{SHOWN_CHARS_MAX - 4},}}\.\.\.", message), message


def test_control_data_over_two_lines_says_how_to_write_it() -> None:
    """An MQ administrator who puts RETRYINT and WAIT on lines of their own read
    "WAIT belongs in the control data, the first entry" about a WAIT that is, to them,
    in the control data."""
    line, column, message = only_problem("RETRYINT(5)\nWAIT(NO)\nACTION(IGNORE)\n")
    assert (line, column) == (2, 1)
    assert "control data" in message and "'+'" in message
    joined = parse_table("RETRYINT(5) +\n  WAIT(NO)\nACTION(IGNORE)\n")
    assert (joined.control.retry_interval_s, joined.control.wait_s) == (5, 0)


# ------------------------------------------------- tables written by hand, property tests
_BARE = re.compile(r"[A-Za-z0-9_.*?%/$#@:&-]+")
_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=30)
_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True).filter(
    lambda name: name.upper() not in DEAD_LETTER_QUEUE_NAMES
)
_NUMERIC = {
    "REASON": st.sampled_from(["MQRC_Q_FULL", "mqrc_put_inhibited", "2085", "20?5", "MQFB_COA"]),
    "FEEDBACK": st.sampled_from(["MQFB_EXPIRATION", "DQF_FULL", "pams__exceedquota", "-1*"]),
    "MSGTYPE": st.sampled_from(["MQMT_REPLY", "mqmt_datagram", "8", "?"]),
    "PERSIST": st.sampled_from(["MQPER_PERSISTENT", "0", "1", "*"]),
}
_TEXT_KEYWORDS = ("APPLIDAT", "APPLNAME", "APPLTYPE", "DESTQ", "DESTQM", "FORMAT", "REPLYQ")


def _cased(draw, word: str) -> str:
    return "".join(c.lower() if draw(st.booleans()) else c for c in word)


def _written(draw, keyword: str, value: str, enumerated: bool = False) -> str:
    """KEYWORD(value) as a person may write it: any case, blanks around the value,
    quoted when it must be or just because."""
    if enumerated:
        value = _cased(draw, value)
    if not _BARE.fullmatch(value) or draw(st.booleans()):
        value = "'" + value.replace("'", "''") + "'"
    inner = draw(st.sampled_from(["", " ", "  "]))
    return f"{_cased(draw, keyword)}{draw(st.sampled_from(['', ' ']))}({inner}{value}{inner})"


@st.composite
def written_rules(draw) -> tuple[list[str], Rule]:
    """(the items as written, in any order; the Rule they spell)."""
    chosen = draw(st.lists(st.sampled_from((*_TEXT_KEYWORDS, *_NUMERIC)), max_size=4, unique=True))
    patterns = {k: draw(_NUMERIC.get(k, _TEXT)) for k in chosen}
    items = [_written(draw, keyword, value) for keyword, value in patterns.items()]
    action = draw(st.sampled_from(list(Action)))
    items.append(_written(draw, "ACTION", action.value, enumerated=True))
    fields: dict = {}
    if action is Action.FWD:
        fields["fwd_q"] = draw(st.one_of(_NAME, st.sampled_from(["&DESTQ", "&REPLYQ"])))
        items.append(_written(draw, "FWDQ", fields["fwd_q"], fields["fwd_q"][0] == "&"))
        if draw(st.booleans()):
            fields["fwd_qm"] = draw(st.one_of(_NAME, st.sampled_from(["&DESTQM", "&REPLYQM"])))
            items.append(_written(draw, "FWDQM", fields["fwd_qm"], fields["fwd_qm"][0] == "&"))
        if draw(st.booleans()):
            fields["header"] = draw(st.booleans())
            items.append(_written(draw, "HEADER", "YES" if fields["header"] else "NO", True))
        if draw(st.booleans()):
            fields["put_authority"] = draw(st.sampled_from(list(PutAuthority)))
            items.append(_written(draw, "PUTAUT", fields["put_authority"].value, True))
    if draw(st.booleans()):
        fields["retry"] = draw(st.integers(1, 999_999_999))
        items.append(_written(draw, "RETRY", str(fields["retry"])))
    order = ("fwd_q", "fwd_qm", "header", "put_authority", "retry")
    names = {"fwd_q": "FWDQ", "fwd_qm": "FWDQM", "header": "HEADER", "put_authority": "PUTAUT"}
    given = tuple(names.get(key, "RETRY") for key in order if key in fields)
    ordered = tuple((k, patterns[k]) for k in PATTERN_KEYWORDS if k in patterns)
    rule = Rule(ordered, action, given=given, **fields)
    return draw(st.permutations(items)), rule


def _entry_lines(draw, items: list[str]) -> str:
    """One entry over one or more lines: blanks or commas between the items, a '+'
    (next line's first non-blank) or a '-' (next line's first column) continuation,
    comment lines inside it."""
    text = items[0]
    for item in items[1:]:
        separator = draw(st.sampled_from([" ", ",", " , ", "\t", "   "]))
        way = draw(st.sampled_from(["same line", "+", "+ comment", "-"]))
        if way == "same line":
            text += separator + item
        elif way.startswith("+"):
            comment = "* a comment inside the rule\n" if way == "+ comment" else ""
            indent = draw(st.sampled_from(["", "  ", "\t", "      "]))
            text += f"{separator}+\n{comment}{indent}{item}"
        else:
            cut = draw(st.integers(1, len(item) - 1))
            if item[cut:].lstrip().startswith("*"):
                cut = 0  # such a line would be a comment: continue before the item
            text += f"{separator}{item[:cut]}-\n{item[cut:]}"
    return text


@st.composite
def written_tables(draw) -> tuple[str, RulesTable]:
    control = Control()
    lines = []
    if draw(st.booleans()):
        wait = draw(st.sampled_from([None, 0, 30]))
        retry_interval = draw(st.integers(0, 3600))
        items = [
            _written(draw, "WAIT", {None: "YES", 0: "NO"}.get(wait, str(wait)), True),
            _written(draw, "RETRYINT", str(retry_interval)),
            _written(draw, "INPUTQ", " "),
        ]
        control = Control(" ", None, retry_interval, wait, ("INPUTQ", "RETRYINT", "WAIT"))
        lines.append(_entry_lines(draw, draw(st.permutations(items))))
    rules = []
    for items, rule in draw(st.lists(written_rules(), min_size=1, max_size=4)):
        rules.append(rule)
        gap = draw(st.sampled_from(["", "\n", "* a comment\n", "   \n* c\n\n"]))
        lines.append(gap + _entry_lines(draw, items))
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\r\n"])), RulesTable(
        control, tuple(rules)
    )


@settings(max_examples=400, deadline=None)
@given(written_tables())
def test_a_table_written_by_hand_parses_to_what_it_spells(written) -> None:
    text, table = written
    parsed = parse_table(text)
    assert parsed == table
    assert parse_table(print_table(parsed)) == parsed


def _as_regex(pattern: str) -> re.Pattern[str]:
    return re.compile("".join({"*": ".*", "?": "."}.get(c, re.escape(c)) for c in pattern), re.S)


@settings(max_examples=500, deadline=None)
@given(st.text("ab*?", max_size=9), st.text("ab", max_size=9))
def test_star_and_question_mark_match_as_a_regular_expression_does(pattern, text) -> None:
    assert glob_matches(pattern, text) == bool(_as_regex(pattern).fullmatch(text))


def test_a_letter_no_rule_takes_is_ignored_and_left() -> None:
    """IGNORE is assumed when no rule matches, and when every matching rule failed."""
    table = parse_table(
        "REASON(MQRC_Q_FULL) ACTION(RETRY) RETRY(2)\nDESTQ(ORDERS) ACTION(DISCARD)\n"
    )
    engine = Engine(table)
    header = {"reason": 2085, "dest_q_name": "10", "dest_q_mgr_name": "1"}
    full = {**header, "reason": 2053}
    engine.admit(Letter(1, header, (1, 13)), 0.0)
    engine.admit(Letter(2, full, (1, 13)), 0.0)
    assert (engine.step(1, 0.0).kind, engine.step(1, 0.0).reason) == (
        StepKind.IGNORE,
        "no rule matches",
    )
    for attempt in (1, 2):
        step = engine.step(2, 1000.0 * attempt)
        assert (step.kind, step.attempt, step.rule.line if step.rule else 0) == (
            StepKind.ACT,
            attempt,
            1,
        )
        engine.failed(2, 1000.0 * attempt)
    assert engine.step(2, 5000.0).reason == "every matching rule failed"


# ------------------------------------------------------------ the real command, --check
def test_check_reports_each_bad_rule_in_one_line_with_its_line(tmp_path: Path) -> None:
    """Unknown keyword, bad value, unterminated quote, duplicate keyword, missing
    ACTION, a huge value and a table cut short: each one line with its line and
    column, then the count; exit 2 (docs/operations.md: the table must change)."""
    config = write_single_group_config(tmp_path / "bus", queues=STANDARD_QUEUES)
    rules = tmp_path / "bad.rules"
    rules.write_text(
        "* every line below is wrong\n"
        "COLOUR(RED) ACTION(IGNORE)\n"
        "ACTION(FWD) FWDQ(ANYORDER) HEADER(PERHAPS)\n"
        "APPLNAME('night batch) ACTION(DISCARD)\n"
        "DESTQ(ORDERS) destq(SENDER) ACTION(IGNORE)\n"
        "DESTQ(ORDERS) FWDQ(ANYORDER)\n"
        f"ACTION(FWD) FWDQ({'Z' * 5000})\n"
        "REASON(MQRC_Q_FULL) ACTION(RETRY) +\n"
    )
    result = run_mrs("dlq-handler", "--check", "--config", str(config), "--group", "1", str(rules))
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and result.stdout == ""
    warning, *lines, total = result.stderr.splitlines()
    assert warning.startswith(f"mrs dlq-handler: {rules}: line 7, column 73: warning: ")
    assert total == "mrs dlq-handler: 7 error(s) in the rules table; not started"
    places = [
        re.match(rf"mrs dlq-handler: {re.escape(str(rules))}: line (\d+), column (\d+): ", line)
        for line in lines
    ]
    assert [
        (int(m[1]), int(m[2])) if m else line for m, line in zip(places, lines, strict=True)
    ] == [
        (2, 1),
        (3, 28),
        (4, 10),
        (5, 15),
        (6, 1),
        (7, 13),
        (8, 1),
    ]
    assert all(len(line) < 300 for line in lines), [len(line) for line in lines]
    rules.write_text(
        "REASON(MQRC_Q_FULL) ACTION(RETRY) +\n   RETRY(5)\nACTION(FWD) FWDQ(ANYORDER)\n"
    )
    fixed = run_mrs("dlq-handler", "--check", "--config", str(config), "--group", "1", str(rules))
    assert (fixed.returncode, fixed.stderr) == (0, ""), fixed
    assert fixed.stdout == f"{rules}: rules table valid: 2 rules\n"
