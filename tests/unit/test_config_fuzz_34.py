"""Bad input an operator (or a sender) feeds the parsers, fuzzed (session 34): each is
refused in one line naming what is wrong, or read for what it is, never an
"unexpected error" (exit 1, which `mrs dump` also says for corrupt records).

- A number longer than int() reads (sys.get_int_max_str_digits(), 4300 digits) in the
  protection policy file or the credentials file, and in `mrs dump`/`jplay`'s --seq,
  --confirm-value, --class, --type, --reason, --limit and durations.
- "²", which str.isdigit() takes and int() refuses, as a group in `mrs admin`'s queue,
  `mrs failover --group`, `mrs dump --target` without --config, a rules table's
  FWDQM, a grant's queue, and a dead letter's `reply_q` header: that one stopped the
  DLQ handler at the letter on every run.
- `--contains` with a byte argv holds that is not UTF-8 ($'\\xff'), `jplay --rate` of
  400 digits (infinity: an OverflowError once connected), and a bus file's quoted key
  with a newline (the one-line error took two lines).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journals import Journal
from mrs.config.bus import ConfigError, load_config, parse_config
from mrs.dlq.actions import target_problems
from mrs.dlq.handler import letter_of
from mrs.dlq.parser import parse_table
from mrs.model import Address, Message
from mrs.offline.scalars import (
    SelectionError,
    parse_bytes_pattern,
    parse_duration_ns,
    parse_int_list,
    parse_int_range,
    parse_reason,
    parse_time_ns,
)
from mrs.offline.selection import add_selection_arguments, filter_from_args, resolve_address
from mrs.protection.errors import PolicyError
from mrs.protection.policy import parse_policies
from mrs.security import creds
from mrs.security.permissions import named_problem
from mrs.tools.cli import main
from mrs.tools.journal.pacing import parse_rate

LONG = "9" * (sys.get_int_max_str_digits() + 10)
BUS = (
    '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:1"\ndata_dir = "g1"\n'
    '[[group.queue]]\nid = 10\nname = "ORDERS"\n'
    '[[group]]\nid = 2\nname = "LON"\nlisten = "127.0.0.1:2"\ndata_dir = "g2"\n'
)
FUZZ = settings(max_examples=25, derandomize=True, deadline=None)
NOT_ASCII_DIGITS = st.sampled_from(["²", "³", "¹0", "٣", "①", LONG])
"""Strings isdigit() takes (or one too long for int()): "٣" int() reads, the rest not."""


@pytest.fixture
def bus_file(tmp_path: Path) -> Path:
    path = tmp_path / "bus.toml"
    path.write_text(BUS)
    return path


# -- the files ------------------------------------------------------------------------


@FUZZ
@given(st.text(min_size=1, max_size=8).filter(lambda key: not key.isprintable()))
def test_an_unknown_key_with_a_control_character_is_one_line(key: str) -> None:
    escaped = "".join(c if c.isalnum() else f"\\U{ord(c):08x}" for c in key)  # TOML's escape
    with pytest.raises(ConfigError) as refused:
        parse_config(BUS + f'"{escaped}" = 1\n', "/nonexistent/bus.toml")
    assert "\n" not in str(refused.value) and "\r" not in str(refused.value)
    assert "unknown key" in str(refused.value)


def test_a_number_too_long_in_the_policy_file_names_its_line(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"policy.toml: x: line 2: a number of \d+ digits"):
        parse_policies(f'keys_dir = "k"\nx = {LONG}\n', tmp_path / "policy.toml")


def test_a_number_too_long_in_the_credentials_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "creds.toml"
    path.write_text(f"decoy_key = {LONG}\n")
    path.chmod(0o600)
    with pytest.raises(creds.CredsError, match=r"decoy_key: line 1: a number of \d+ digits"):
        creds.load(path)


# -- the journal tools' selection -------------------------------------------------------


@FUZZ
@given(st.sampled_from([LONG, f"1..{LONG}", f"{LONG}..", f"-{LONG}"]))
def test_a_range_too_long_to_read_is_a_selection_error(text: str) -> None:
    with pytest.raises(SelectionError, match="--seq: a number of"):
        parse_int_range(text, "--seq", minimum=0)


def test_every_number_option_refuses_one_too_long_naming_itself() -> None:
    for parse, option in (
        (lambda: parse_reason(LONG), "--reason"),
        (lambda: parse_int_list(["1", f"2,{LONG}"], "--class"), "--class"),
        (lambda: parse_duration_ns(f"{LONG}s"), "not a duration"),
        (lambda: parse_duration_ns(f"1.{LONG}h"), "not a duration"),
        (lambda: parse_time_ns(f"{LONG}h", 10**18, "--since"), "not a duration"),
    ):
        with pytest.raises(SelectionError, match=option):
            parse()


def test_dump_limit_and_confirm_value_too_long_are_selection_errors() -> None:
    parser = argparse.ArgumentParser()
    add_selection_arguments(parser)
    for option in ("--limit", "--confirm-value"):
        args = parser.parse_args([option, LONG])
        with pytest.raises(SelectionError, match=f"{option}: a number of"):
            filter_from_args(args, Journal.PCJ, None, 1, 10**18)


def test_contains_a_byte_that_is_not_utf8_searches_for_that_byte() -> None:
    argv_text = b"ok\xff".decode("utf-8", "surrogateescape")  # what Python makes of argv
    assert parse_bytes_pattern(argv_text) == b"ok\xff"
    assert parse_bytes_pattern("text:" + argv_text) == b"ok\xff"


def test_a_rate_too_large_to_be_a_number_is_refused_before_connecting() -> None:
    for text in ("9" * 400, "9" * 400 + "/h"):
        with pytest.raises(ValueError, match="--rate: a number of 40[0-9] characters is too large"):
            parse_rate(text)


# -- "²": isdigit() yes, int() no -------------------------------------------------------


@FUZZ
@given(NOT_ASCII_DIGITS)
def test_a_target_of_odd_digits_without_config_is_a_selection_error(digits: str) -> None:
    with pytest.raises(SelectionError, match="--target"):
        resolve_address(f"{digits}.10", None, 1, "--target")
    with pytest.raises(SelectionError, match="--target"):
        resolve_address(digits, None, 1, "--target")


@FUZZ
@given(NOT_ASCII_DIGITS)
def test_a_dead_letters_odd_reply_q_header_is_no_reply_queue(digits: str) -> None:
    """The DLQ handler reads every letter with letter_of: one raising stopped it."""
    for reply_q in (f"{digits}.1", f"1.{digits}"):
        message = Message(
            body=b"x",
            seq=1,
            source=Address(1, 10),
            target=Address(1, 96),
            headers={"reply_q": reply_q},
        )
        letter = letter_of(message)
        assert letter.reply_to is None, reply_q
    numbered = Message(b"x", 1, Address(1, 10), Address(1, 96), headers={"reply_q": "2.20"})
    assert letter_of(numbered).reply_to == (2, 20)


def test_a_rules_table_forwarding_to_an_odd_group_number_names_no_group(bus_file: Path) -> None:
    table = parse_table("ACTION(FWD) FWDQ(&DESTQ) FWDQM('²')\n")
    (problem,) = target_problems(table, load_config(bus_file), 1)
    assert "names no group of the bus" in problem


@FUZZ
@given(NOT_ASCII_DIGITS)
def test_a_grant_of_an_odd_queue_number_is_a_problem(digits: str) -> None:
    bus = parse_config(BUS, "/nonexistent/bus.toml")
    for pattern in (digits, f"1.{digits}"):
        found = named_problem(bus, pattern)
        assert found is not None and "queue" in found[0], pattern


@pytest.mark.parametrize(
    "argv",
    [
        ["admin", "purge", "--config", "{bus}", "².10"],
        ["admin", "purge", "--config", "{bus}", LONG + ".10"],
        ["failover", "--config", "{bus}", "²"],
    ],
    ids=["admin-superscript", "admin-long", "failover-superscript"],
)
def test_a_group_of_odd_digits_is_a_usage_error(bus_file: Path, capsys, argv: list[str]) -> None:
    assert main([arg.format(bus=bus_file) for arg in argv]) == 2
    said = capsys.readouterr().err
    assert "unexpected" not in said and said.count("\n") == 1, said
