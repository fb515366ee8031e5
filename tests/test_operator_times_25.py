"""Times an operator types and reads: one rule for every tool.

A time without a zone is the machine's local time (TZ) in `mrs dump`, `mrs jplay`,
`mrs pcj archive` and `mrs audit` alike; a zone (`Z`, `+02:00`, ` UTC`) is honoured;
and every time a tool prints says its zone, so pasted into another tool's
`--since`/`--until` it names the same instant. The tests run under
TZ=America/New_York, where local time and UTC differ by hours, so a tool that read
a time as UTC where another reads it as local shows."""

from __future__ import annotations

import datetime
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journals import Journal
from mrs.audit.command import AuditUsageError
from mrs.audit.command import parse_time as audit_time
from mrs.offline.scalars import SelectionError, format_time_ns, parse_time_ns
from tests.cli_helpers import run_mrs
from tests.conftest import Bus
from tests.journal_helpers import HOUR_NS, SEQ_BASE, T0_NS, record, stopped_bus, write_records

NEW_YORK = "America/New_York"
"""UTC-5 in November: a naive 17:13:20 there is 22:13:20Z."""
T0_NEW_YORK = "2023-11-14T17:13:20"
"""T0_NS (2023-11-14T22:13:20Z) as a New York wall clock shows it."""
SUB_MS_NS = 123_456_789
"""Records are timed to the nanosecond: a printed time must keep every digit."""
RECORDS = 4
ZONED = re.compile(r"(Z|[+-]\d\d:\d\d)$")


@contextmanager
def local_zone(name: str) -> Iterator[None]:
    """This process's local time zone is `name` inside the block."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def mrs_in(zone: str, *args: str) -> tuple[int, str, str]:
    result = run_mrs(*args, env={"TZ": zone, "COLUMNS": "250"})
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout, result.stderr


@pytest.fixture
def pcj_bus(tmp_path: Path) -> Bus:
    """Group 1's PCJ: record i confirmed at T0 + i hours + SUB_MS_NS (no server)."""
    bus = stopped_bus(tmp_path / "bus")
    items = [
        record(i, confirm_value=i, confirm_time_ns=T0_NS + i * HOUR_NS + SUB_MS_NS)
        for i in range(RECORDS)
    ]
    write_records(bus.data_dir / "journals", Journal.PCJ, items)
    return bus


def dumped_indices(bus: Bus, *selection: str) -> list[int]:
    code, out, err = mrs_in(
        NEW_YORK, "dump", "--config", str(bus.config_path), "--group", "1", "pcj", "--json",
        *selection,
    )  # fmt: skip
    assert code == 0, err
    return [json.loads(line)["seq"] - SEQ_BASE for line in out.splitlines()]


# ---------------------------------------------------------------------- one rule
def test_audit_reads_a_naive_time_as_the_journal_tools_do() -> None:
    """Before: `mrs audit --since 2023-11-14T17:13:20` was 17:13Z, five hours later
    than the same words given to `mrs dump`/`mrs jplay`/`mrs pcj archive`."""
    with local_zone(NEW_YORK):
        expected_ns = parse_time_ns(T0_NEW_YORK, 0)
        moment = audit_time(T0_NEW_YORK, "--since")
    assert expected_ns == T0_NS
    assert moment == datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    "text",
    [
        "2023-11-14T22:13:20Z",
        "2023-11-14T22:13:20+00:00",
        "2023-11-14T17:13:20-05:00",
        "2023-11-15T00:13:20+02:00",
        "2023-11-14 22:13:20 UTC",  # as `mrs status` prints a time
        "2023-11-14T22:13:20.000000Z",  # as `mrs dump --json` prints one
        "2023-11-14t22:13:20z",  # RFC 3339 allows both letters in lowercase
    ],
)
def test_a_zone_is_honoured_by_every_tool(text: str) -> None:
    with local_zone(NEW_YORK):
        assert parse_time_ns(text, 0) == T0_NS
        moment = audit_time(text, "--since")
    assert moment is not None and moment.timestamp() == T0_NS / 1e9


def test_help_of_every_time_option_states_the_one_rule() -> None:
    """Each tool's --help says what a time without a zone is: local time."""
    for command in (["dump", "pcj"], ["jplay", "pcj"], ["audit"], ["pcj", "archive"]):
        code, out, _ = mrs_in(NEW_YORK, *command, "--help")
        assert code == 0
        flat = " ".join(out.split())
        assert "UTC time" not in flat and "naive = local time" in flat, command


# ---------------------------------------------------------------------- printed, pasted
def test_dump_prints_times_with_their_zone_that_paste_back_exactly(pcj_bus: Bus) -> None:
    """Before: the table showed `2023-11-14 17:13:20.123` (no zone, two words,
    milliseconds): read as UTC by `mrs audit` it was five hours off, and given as
    --until it left out the very record it was copied from."""
    code, out, err = mrs_in(NEW_YORK, "dump", "--config", str(pcj_bus.config_path),
                            "--group", "1", "pcj")  # fmt: skip
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()]
    printed = [row[1] for row in rows if row and row[0].isdigit()]
    assert len(printed) == RECORDS and all(ZONED.search(text) for text in printed), printed
    assert printed[0] == T0_NEW_YORK + ".123456789-05:00"
    with local_zone("Asia/Tokyo"):  # pasted on a machine in another zone
        for index, text in enumerate(printed):
            assert parse_time_ns(text, 0) == T0_NS + index * HOUR_NS + SUB_MS_NS
            moment = audit_time(text, "--since")
            assert moment is not None
            assert round(moment.timestamp()) == (T0_NS + index * HOUR_NS) // 10**9
    assert dumped_indices(pcj_bus, "--since", printed[1]) == [1, 2, 3]
    assert dumped_indices(pcj_bus, "--until", printed[2]) == [0, 1, 2]
    newest = re.search(r"newest (\S+)", out + err)  # the summary line
    assert newest is not None and newest.group(1) == printed[-1], out + err


def test_admin_journal_prints_times_with_their_zone(pcj_bus: Bus) -> None:
    """Before: `mrs admin journal` showed `2023-11-14 22:13:20` under "time (UTC)":
    pasted into `mrs dump --since` it was read as local time, five hours off."""
    line = {"time_ns": T0_NS + SUB_MS_NS, "principal": "ops", "peer": None,
            "action": "purge", "args": {"queue": "1.10"}, "result": {"purged": 3}}  # fmt: skip
    (pcj_bus.data_dir / "admin-journal.jsonl").write_text(json.dumps(line) + "\n")
    code, out, err = mrs_in(NEW_YORK, "admin", "journal", "--offline",
                            "--config", str(pcj_bus.config_path), "--group", "1")  # fmt: skip
    assert code == 0, err
    found = re.search(r"\d{4}-\d\d-\d\d[T ][\d:.]+\S*", out)
    assert found is not None, out
    assert ZONED.search(found.group(0)), out
    with local_zone("UTC"):
        assert parse_time_ns(found.group(0), 0) == T0_NS + SUB_MS_NS
    assert dumped_indices(pcj_bus, "--until", found.group(0)) == [0]


# ---------------------------------------------------------------------- mistakes
@pytest.mark.parametrize(
    "text", ["2023-13-01", "yesterday", "9999-12-31T23:30:00-01:00", "2023-11-14T22:00+02:00 UTC"]
)
def test_a_malformed_or_unusable_time_is_one_line_and_exit_2(pcj_bus: Bus, text: str) -> None:
    """Every tool: one line naming the option, status 2 (a usage error), no traceback.
    9999-12-31T23:30-01:00 is year 10000 in UTC: no timestamp holds it."""
    config = ["--config", str(pcj_bus.config_path), "--group", "1"]
    commands = [
        ["dump", *config, "pcj", "--since", text],
        ["jplay", *config, "pcj", "--since", text, "--to", "1.21", "--dry-run"],
        ["pcj", "archive", *config, "--until", text],
        ["audit", *config, "--since", text, "--master", "spark://127.0.0.1:1"],
    ]
    for command in commands:
        code, _, err = mrs_in(NEW_YORK, *command)
        if command[0] != "audit" and text.startswith("9999"):
            assert code == 0, err  # a bound in year 10000 selects, it names an instant
            continue
        assert code == 2, (command, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and ("--since" in lines[0] or "--until" in lines[0]), err


# ---------------------------------------------------------------------- properties
OFFSETS_MIN = st.integers(-14 * 60, 14 * 60)
MOMENTS = st.datetimes(
    min_value=datetime.datetime(1971, 1, 1), max_value=datetime.datetime(9998, 12, 31)
)


@settings(max_examples=200, deadline=None)
@given(MOMENTS, OFFSETS_MIN, st.integers(0, 999), st.sampled_from(["T", " "]))
def test_a_zoned_time_names_one_instant_in_any_local_zone(
    moment: datetime.datetime, offset_min: int, extra_ns: int, separator: str
) -> None:
    zone = datetime.timezone(datetime.timedelta(minutes=offset_min))
    zoned = moment.replace(tzinfo=zone)
    text = zoned.isoformat(sep=separator, timespec="microseconds")
    text = text[:-6] + f"{extra_ns:03d}" + text[-6:]  # nanoseconds, before the offset
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    delta = zoned - epoch
    expected = (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000
    with local_zone(NEW_YORK):
        assert parse_time_ns(text, 0) == expected + extra_ns
    with local_zone("Asia/Kolkata"):
        assert parse_time_ns(text, 0) == expected + extra_ns


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 253_402_214_400 * 10**9 - 1))
def test_a_printed_time_parses_back_to_the_same_nanosecond(time_ns: int) -> None:
    with local_zone(NEW_YORK):
        printed = format_time_ns(time_ns)
    assert ZONED.search(printed), printed
    for zone in ("UTC", "Australia/Lord_Howe"):
        with local_zone(zone):
            assert parse_time_ns(printed, 0) == time_ns


@settings(max_examples=100, deadline=None)
@given(MOMENTS)
def test_a_naive_time_is_the_local_wall_clock(moment: datetime.datetime) -> None:
    text = moment.isoformat(timespec="seconds")
    with local_zone(NEW_YORK):
        local = moment.replace(microsecond=0).astimezone()
        assert parse_time_ns(text, 0) == int(local.timestamp()) * 10**9


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_text_is_a_time_or_a_selection_error(text: str) -> None:
    """Never another exception: a traceback is what reaches the operator then."""
    with local_zone(NEW_YORK):
        with suppress(SelectionError):
            parse_time_ns(text, T0_NS)
        with suppress(AuditUsageError):
            audit_time(text, "--since")
