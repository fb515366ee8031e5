"""Selection arguments shared by `mrs dump` and `mrs jplay`: parsing, validation, and
that a filter selects exactly the records its criteria describe."""

from __future__ import annotations

import datetime
import fnmatch
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from journals import Journal, Record
from mrs.config.bus import parse_config
from mrs.offline.scalars import (
    SelectionError,
    parse_bytes_pattern,
    parse_duration_ns,
    parse_int_range,
    parse_reason,
    parse_time_ns,
)
from mrs.offline.selection import filter_from_args, queue_matcher
from mrs.tools.cli import build_parser
from mrs.tools.journal.pacing import Pacer, parse_rate

NOW = 1_700_000_000_000_000_000
UNITS = {"ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9, "d": 86400 * 10**9}
BUS = parse_config(
    """
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:0"
data_dir = "g1"
[[group.queue]]
id = 10
name = "ORDERS"
[[group.queue]]
id = 11
name = "ORDERS_EU"
[[group]]
id = 2
name = "LDN"
listen = "127.0.0.1:0"
data_dir = "g2"
[[group.queue]]
id = 20
name = "ORDERS"
""",
    Path("/tmp/bus.toml"),
)


PARSER = build_parser()


def _args(*selection: str, journal: str = "pcj"):
    return PARSER.parse_args(["dump", "--group", "1", "--data-dir", ".", journal, *selection])


def _filter(*selection: str, journal: str = "pcj", bus=BUS):
    args = _args(*selection, journal=journal)
    return filter_from_args(args, Journal(journal), bus, 1, NOW)


# ---------------------------------------------------------------------- times
@given(st.integers(0, 10**6), st.sampled_from(sorted(UNITS)))
def test_durations_in_every_unit(amount: int, unit: str) -> None:
    assert parse_duration_ns(f"{amount}{unit}") == amount * UNITS[unit]


def test_compound_and_fractional_durations() -> None:
    assert parse_duration_ns("1h30m") == 90 * UNITS["m"]
    assert parse_duration_ns("1.5h") == 90 * UNITS["m"]
    assert parse_duration_ns("1w") == 7 * UNITS["d"]


@given(st.integers(0, 10**5), st.sampled_from(["s", "m", "h", "d"]))
def test_relative_times_count_back_from_now(amount: int, unit: str) -> None:
    assert parse_time_ns(f"{amount}{unit}", NOW) == NOW - amount * UNITS[unit]


def test_iso_times_with_zone_naive_local_and_now() -> None:
    assert parse_time_ns("2023-11-14T22:13:20Z", 0) == NOW
    assert parse_time_ns("2023-11-14T23:13:20+01:00", 0) == NOW
    assert parse_time_ns("2023-11-14T22:13:20.5Z", 0) == NOW + 500_000_000
    local = datetime.datetime(2023, 11, 14, 22, 13, 20).astimezone()
    assert parse_time_ns("2023-11-14T22:13:20", 0) == int(local.timestamp()) * 10**9
    assert parse_time_ns("now", NOW) == NOW


@pytest.mark.parametrize("text", ["2x", "yesterday", "h", "2h-", "", "2023-13-01"])
def test_bad_times_are_refused(text: str) -> None:
    with pytest.raises(SelectionError, match="--since"):
        parse_time_ns(text, NOW, "--since")


# ---------------------------------------------------------------------- ranges
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_seq_ranges_in_every_form(a: int, b: int) -> None:
    low, high = min(a, b), max(a, b)
    assert parse_int_range(f"{low}..{high}", "--seq", minimum=0) == (low, high)
    assert parse_int_range(f"{low}..", "--seq", minimum=0) == (low, None)
    assert parse_int_range(f"..{high}", "--seq", minimum=0) == (None, high)
    assert parse_int_range(f"{low}", "--seq", minimum=0) == (low, low)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("9..5", "empty range"),
        ("..", "at least one end"),
        ("a..b", "not a number"),
        ("5...9", "not a number"),
        ("-1..5", "below 0"),
    ],
)
def test_bad_seq_ranges_are_refused(text: str, problem: str) -> None:
    with pytest.raises(SelectionError, match=problem):
        parse_int_range(text, "--seq", minimum=0)


# ---------------------------------------------------------------------- bodies, reasons
def test_body_patterns_text_hex_and_escaped_text() -> None:
    assert parse_bytes_pattern("order 7") == b"order 7"
    assert parse_bytes_pattern("hex:00ff 10") == b"\x00\xff\x10"
    assert parse_bytes_pattern("text:hex:00") == b"hex:00"
    assert parse_bytes_pattern("ünï") == "ünï".encode()
    with pytest.raises(SelectionError, match="not hex"):
        parse_bytes_pattern("hex:0g")
    with pytest.raises(SelectionError, match="empty"):
        parse_bytes_pattern("hex:")


def test_reasons_by_name_number_and_prefix() -> None:
    assert parse_reason("NO_DQF") == parse_reason("no_dqf") == parse_reason("PAMS__NO_DQF") == -228
    assert parse_reason("-202") == -202
    with pytest.raises(SelectionError, match="did you mean NO_DQF"):
        parse_reason("NO_DQ")


# ---------------------------------------------------------------------- addresses
def test_queue_addresses_exact_names_and_wildcards() -> None:
    exact = queue_matcher(["1.10", "LDN.ORDERS"], "--target", BUS, 1)
    assert exact(1, 10) and exact(2, 20) and not exact(1, 11)
    local_name = queue_matcher(["ORDERS"], "--target", BUS, 1)
    assert local_name(1, 10) and not local_name(2, 20)
    assert queue_matcher(["1.*"], "--target", BUS, 1)(1, 999)
    by_group_name = queue_matcher(["LDN.*"], "--target", BUS, 1)
    assert by_group_name(2, 20) and not by_group_name(1, 10)
    orders = queue_matcher(["*.ORDERS*"], "--target", BUS, 1)
    assert orders(1, 10) and orders(1, 11) and orders(2, 20) and not orders(1, 12)
    assert queue_matcher(["ORDERS_?U"], "--target", BUS, 1)(1, 11)


def test_unknown_names_and_names_without_config_are_refused() -> None:
    with pytest.raises(SelectionError, match="no queue named 'ORDRES'"):
        queue_matcher(["ORDRES"], "--target", BUS, 1)
    with pytest.raises(SelectionError, match="need --config"):
        queue_matcher(["ORDERS"], "--target", None, 1)
    assert queue_matcher(["1.10"], "--target", None, 1)(1, 10)
    assert queue_matcher(["10"], "--target", None, 1)(1, 10)


# ---------------------------------------------------------------------- whole filters
@pytest.mark.parametrize(
    "selection, journal, problem",
    [
        (["--reason", "NO_DQF"], "pcj", "applies to the dlj"),
        (["--confirm-value", "5"], "dlj", "applies to the pcj"),
        (["--since", "1h", "--until", "2h"], "pcj", "is after --until"),
        (["--limit", "0"], "pcj", "positive integer"),
        (["--limit", "x"], "pcj", "positive integer"),
        (["--class", "five"], "pcj", "--class"),
        (["--type", "1,x"], "pcj", "--type"),
        (["--target", "NOSUCH.1"], "pcj", "no group named"),
    ],
)
def test_invalid_selections_are_refused(selection, journal, problem) -> None:
    with pytest.raises(SelectionError, match=problem):
        _filter(*selection, journal=journal)


RECORDS = st.builds(
    Record,
    seq=st.integers(0, 50),
    target_group=st.sampled_from([1, 2]),
    target_queue=st.sampled_from([10, 11, 20]),
    source_group=st.sampled_from([1, 2]),
    source_queue=st.sampled_from([10, 13]),
    body=st.lists(st.sampled_from([b"a", b"b", b"\x00"]), max_size=6).map(b"".join),
    msg_class=st.integers(0, 3),
    msg_type=st.integers(-2, 2),
    written_time_ns=st.integers(NOW - 5 * UNITS["h"], NOW),
    confirm_time_ns=st.sampled_from([0, NOW - UNITS["h"]]),
    confirm_value=st.integers(-3, 3),
    reason=st.sampled_from([0, -228, -202]),
)


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(RECORDS, max_size=20),
    seq=st.one_of(st.none(), st.tuples(st.integers(0, 50), st.integers(0, 50))),
    since_h=st.one_of(st.none(), st.integers(0, 6)),
    target=st.one_of(st.none(), st.sampled_from(["1.10", "ORDERS", "*.ORDERS*", "2.*"])),
    source=st.one_of(st.none(), st.sampled_from(["1.13", "1.*"])),
    classes=st.lists(st.integers(0, 3), max_size=2),
    types=st.lists(st.integers(-2, 2), max_size=2),
    contains=st.lists(st.sampled_from(["a", "ab", "hex:00"]), max_size=2),
    not_contains=st.lists(st.sampled_from(["b", "hex:0000"]), max_size=1),
    confirm=st.one_of(st.none(), st.sampled_from(["0", "-1..1", "2.."])),
)
def test_a_filter_selects_exactly_what_its_criteria_say(
    records, seq, since_h, target, source, classes, types, contains, not_contains, confirm
) -> None:
    selection: list[str] = []
    if seq is not None:
        selection += ["--seq", f"{min(seq)}..{max(seq)}"]
    if since_h is not None:
        selection += ["--since", f"{since_h}h"]
    if target is not None:
        selection += ["--target", target]
    if source is not None:
        selection += ["--source", source]
    for value in classes:
        selection += ["--class", str(value)]
    for value in types:
        selection += ["--type", str(value)]
    for text in contains:
        selection += ["--contains", text]
    for text in not_contains:
        selection += ["--not-contains", text]
    if confirm is not None:
        selection.append(f"--confirm-value={confirm}")  # '=': the value may start with '-'
    chosen = _filter(*selection)

    def expected(record: Record) -> bool:
        time_ns = record.confirm_time_ns or record.written_time_ns
        target_names = {
            (1, 10): ["1.10", "NYC.ORDERS", "ORDERS"],
            (1, 11): ["1.11", "NYC.ORDERS_EU", "ORDERS_EU"],
            (2, 20): ["2.20", "LDN.ORDERS"],
            (2, 10): ["2.10"],
            (2, 11): ["2.11"],
            (1, 20): ["1.20"],
        }[(record.target_group, record.target_queue)]
        source_text = f"{record.source_group}.{record.source_queue}"
        low, high = {None: (None, None), "0": (0, 0), "-1..1": (-1, 1), "2..": (2, None)}[confirm]
        return (
            (seq is None or min(seq) <= record.seq <= max(seq))
            and (since_h is None or time_ns >= NOW - since_h * UNITS["h"])
            and (target is None or any(fnmatch.fnmatchcase(n, target) for n in target_names))
            and (source is None or fnmatch.fnmatchcase(source_text, source))
            and (not classes or record.msg_class in classes)
            and (not types or record.msg_type in types)
            and all(parse_bytes_pattern(t) in record.body for t in contains)
            and all(parse_bytes_pattern(t) not in record.body for t in not_contains)
            and (low is None or record.confirm_value >= low)
            and (high is None or record.confirm_value <= high)
        )

    assert [chosen.matches(r) for r in records] == [expected(r) for r in records]


def test_reason_selects_dead_letters_by_reason() -> None:
    chosen = _filter("--reason", "NO_DQF", "--reason", "-202", journal="dlj")
    assert chosen.matches(Record(1, 1, 10, 1, 13, reason=-228))
    assert chosen.matches(Record(1, 1, 10, 1, 13, reason=-202))
    assert not chosen.matches(Record(1, 1, 10, 1, 13, reason=-206))


# ---------------------------------------------------------------------- rate
def test_rates_parse_in_every_form() -> None:
    assert parse_rate("500") == parse_rate("500/s") == 500.0
    assert parse_rate("30/m") == 0.5
    assert parse_rate("7200/h") == 2.0
    for bad in ("0", "fast", "-5/s", "5/d"):
        with pytest.raises(ValueError, match="--rate"):
            parse_rate(bad)


async def test_pacer_holds_the_rate_on_trio_clock(autojump_clock) -> None:
    pacer = Pacer(50.0)
    started: list[float] = []

    async def sender() -> None:
        for _ in range(25):
            await pacer.wait()
            started.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        for _ in range(4):  # many tasks share one cap
            nursery.start_soon(sender)
    assert len(started) == 100
    span = max(started) - min(started)
    assert span == pytest.approx(99 / 50.0, rel=0.01)
