"""What an operator types, parsed: durations, times, integer ranges, byte patterns,
reasons. Every mistake is a `SelectionError` naming the option and what it expects.
Times have one rule for every tool, here, and the printed form that reads back
(`format_time_ns`): see the comment above `parse_time_ns`.
"""

from __future__ import annotations

import datetime
import difflib
import re
import sys
from collections.abc import Iterable
from fractions import Fraction

from mrs.errors import OperatorError
from mrs.model import Status

_DURATION_UNITS_NS = {
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
    "d": 86_400_000_000_000,
    "w": 7 * 86_400_000_000_000,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+")
INTEGER_PATTERN = re.compile(r"[+-]?\d+")
WILDCARD_PATTERN = re.compile(r"[*?\[]")
HEX_PREFIX = "hex:"
TEXT_PREFIX = "text:"


class SelectionError(OperatorError, ValueError):
    """A selection argument that cannot be used; the message says which and why."""


def whole_number(text: str, option: str) -> int:
    """int() of `text` (INTEGER_PATTERN matched), or a SelectionError naming `option`.
    Why: int() refuses more than sys.get_int_max_str_digits() digits with a ValueError
    of its own words ("use sys.set_int_max_str_digits()"), and `mrs dump --seq <5000
    digits>` ended as an unexpected error, exit 1: the status of corrupt records."""
    try:
        return int(text)
    except ValueError:
        raise SelectionError(f"{option}: a number of {len(text)} characters is too long") from None


# ---------------------------------------------------------------------- scalars
def parse_duration_ns(text: str) -> int:
    """'90s', '30m', '2h', '1d', '1w', '1h30m', '250ms' -> nanoseconds."""
    cleaned = text.strip().lower()
    if not _DURATION.fullmatch(cleaned):
        raise SelectionError(f"not a duration: {text!r} (use e.g. 90s, 30m, 2h, 1d, 1w or 1h30m)")
    total = 0
    for number, unit in _DURATION_PART.findall(cleaned):
        # exact: through a float, 400 digits of hours became infinity and an OverflowError
        whole, _, fraction = number.partition(".")
        if len(whole) + len(fraction) > sys.get_int_max_str_digits():  # Fraction's int()
            raise SelectionError(f"not a duration: {number[:20]}... has too many digits")
        total += int(Fraction(number) * _DURATION_UNITS_NS[unit])
    return total


# ---------------------------------------------------------------------- times
# One rule for every operator tool (`mrs dump`, `mrs jplay`, `mrs pcj archive`,
# `mrs audit`, `mrs admin journal`): a time without a zone is the machine's local time
# (TZ), as `date`, `journalctl --since` and `find -newermt` read one: the operator
# types the wall clock in front of them, and on a server kept in UTC local time is
# UTC. A zone (`Z`, `+02:00`, a trailing `UTC`) is honoured. Every time a tool prints
# for a person comes from `format_time_ns`: local time *with its offset*, to the
# nanosecond a journal keeps, so pasted into any tool's --since/--until, on any
# machine, it names the very instant (an --until pasted from a record keeps it).
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_UTC_WORD = re.compile(r"\s*(?:UTC|GMT)$", re.IGNORECASE)
_FRACTION = re.compile(r"(?<=\d\d:\d\d:\d\d)[.,](\d+)")
_TIME_FORMS = (
    "use an ISO time like 2024-05-01T10:00 (local time), 2024-05-01T10:00:00Z or "
    "2024-05-01T10:00-04:00, 'now', or a duration back from now like 2h, 30m, 1d"
)


def parse_time_ns(text: str, now_ns: int, option: str = "--since") -> int:
    """An ISO date or date-time ('2024-05-01', '2024-05-01T10:00', '...Z', '...+02:00',
    '... UTC'; naive = local time; seconds to the nanosecond), a duration back from now
    ('2h' = two hours ago), or 'now' -> ns since the epoch."""
    cleaned = text.strip()
    if cleaned.lower() == "now":
        return now_ns
    if _DURATION.fullmatch(cleaned.lower()):
        return now_ns - parse_duration_ns(cleaned)
    utc_word = _UTC_WORD.search(cleaned)
    if utc_word is not None:
        cleaned = cleaned[: utc_word.start()]
    if cleaned.endswith("z"):  # RFC 3339 allows a lowercase zone letter; datetime does not
        cleaned = cleaned[:-1] + "Z"
    fraction_ns = 0
    if (fraction := _FRACTION.search(cleaned)) is not None:  # datetime keeps 6 digits
        fraction_ns = int(fraction.group(1)[:9].ljust(9, "0"))
        cleaned = cleaned[: fraction.start()] + cleaned[fraction.end() :]
    try:
        moment = datetime.datetime.fromisoformat(cleaned)
    except ValueError:
        raise SelectionError(f"{option}: not a time: {text!r} ({_TIME_FORMS})") from None
    if utc_word is not None:
        if moment.tzinfo is not None:
            raise SelectionError(f"{option}: {text!r} names two zones: give one")
        moment = moment.replace(tzinfo=datetime.UTC)
    if moment.tzinfo is None:
        try:
            moment = moment.astimezone()  # naive times are the operator's local time
        except (OverflowError, ValueError):  # 0001-01-01 is year 0 east of UTC
            raise SelectionError(f"{option}: {text!r} is out of range") from None
    delta = moment - _EPOCH
    seconds = delta.days * 86_400 + delta.seconds
    return seconds * 1_000_000_000 + delta.microseconds * 1000 + fraction_ns


def parse_time_utc(text: str, now_ns: int, option: str = "--since") -> datetime.datetime:
    """`parse_time_ns` as an aware UTC datetime (microseconds), for a tool that hands
    the bound to a library (Spark); a time no datetime holds is a SelectionError."""
    time_ns = parse_time_ns(text, now_ns, option)
    try:
        return _EPOCH + datetime.timedelta(microseconds=time_ns // 1000)
    except OverflowError:
        raise SelectionError(
            f"{option}: {text!r} is out of range (years 1 to 9999 in UTC)"
        ) from None


def format_time_ns(time_ns: int) -> str:
    """ns since the epoch -> '2024-05-01T06:00:00.123456789-04:00': the local time with
    its offset, to the nanosecond; '-' for 0 (unset); the number when no date holds it.
    `parse_time_ns` reads it back to the same ns, whatever the reader's TZ."""
    if not time_ns:
        return "-"
    second, rest_ns = divmod(time_ns, 1_000_000_000)
    try:
        moment = datetime.datetime.fromtimestamp(second, datetime.UTC).astimezone()
    except (OverflowError, ValueError, OSError):
        return str(time_ns)
    text = moment.isoformat(timespec="seconds")
    return f"{text[:19]}.{rest_ns:09d}{text[19:]}"


def iso_utc(time_ns: int) -> str | None:
    """ns since the epoch -> '2024-05-01T10:00:00.123456789Z', the very instant (six
    digits when it falls on a microsecond: '...00.123456Z'); None for 0 or nonsense.
    Why to the nanosecond: cut to microseconds, a record's own `time` given back as
    `--until` (or `--since` and `--until`) selected every record but that one, as the
    time falls before the record's; a script that replays "up to the record it looked
    at" left it out. The table prints nanoseconds for the same reason."""
    if not time_ns:
        return None
    second, rest = divmod(time_ns, 1_000_000_000)
    try:
        moment = datetime.datetime.fromtimestamp(second, datetime.UTC)
    except (OverflowError, ValueError, OSError):
        return None
    return f"{moment.isoformat()[:19]}.{time_fraction(rest)}Z"


def time_fraction(nanoseconds: int) -> str:
    """The digits after the second's point: microseconds when they say it exactly."""
    microseconds, below = divmod(nanoseconds, 1000)
    return f"{microseconds:06d}" if not below else f"{nanoseconds:09d}"


def parse_int_range(
    text: str, option: str, *, minimum: int | None = None, maximum: int | None = None
) -> tuple[int | None, int | None]:
    """'5..9' (inclusive), '5..', '..9' or '7' -> (low, high); None = open end."""
    cleaned = text.strip()
    low_text, dots, high_text = cleaned.partition("..")
    if not dots:
        low_text = high_text = cleaned
    if not low_text and not high_text:
        raise SelectionError(f"{option}: give at least one end of the range, e.g. 5..9, 5.. or ..9")
    bounds: list[int | None] = []
    for part in (low_text, high_text):
        if not part:
            bounds.append(None)
            continue
        if not INTEGER_PATTERN.fullmatch(part):
            raise SelectionError(
                f"{option}: {text!r} is not a number or range (use 7, 5..9, 5.. or ..9)"
            )
        value = whole_number(part, option)
        if minimum is not None and value < minimum:
            raise SelectionError(f"{option}: {value} is below {minimum}")
        if maximum is not None and value > maximum:
            raise SelectionError(f"{option}: {value} is above {maximum}, the largest there is")
        bounds.append(value)
    low, high = bounds
    if low is not None and high is not None and low > high:
        raise SelectionError(f"{option}: empty range {text!r} (the start is after the end)")
    return low, high


def parse_bytes_pattern(text: str, option: str = "--contains") -> bytes:
    """Text (UTF-8), 'hex:0a1b...' for raw bytes, or 'text:...' to search for a
    string that itself starts with 'hex:'."""
    if text.startswith(HEX_PREFIX):
        digits = text[len(HEX_PREFIX) :].replace(" ", "")
        try:
            pattern = bytes.fromhex(digits)
        except ValueError:
            raise SelectionError(
                f"{option}: {text!r} is not hex (use pairs of hex digits after 'hex:')"
            ) from None
    elif text.startswith(TEXT_PREFIX):
        pattern = text[len(TEXT_PREFIX) :].encode("utf-8", "surrogateescape")
    else:  # surrogateescape: a byte of argv that is not UTF-8 ($'\xff') is that byte
        pattern = text.encode("utf-8", "surrogateescape")
    if not pattern:
        raise SelectionError(f"{option}: the pattern is empty")
    return pattern


def parse_reason(text: str) -> int:
    """A dead-letter reason: a status name ('NO_DQF', 'PAMS__DQF_FULL') or number (-228)."""
    cleaned = text.strip()
    if INTEGER_PATTERN.fullmatch(cleaned):
        return whole_number(cleaned, "--reason")
    name = cleaned.upper().removeprefix("PAMS__")
    try:
        return int(Status[name])
    except KeyError:
        close = difflib.get_close_matches(name, Status.__members__, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise SelectionError(
            f"--reason: no status named {text!r}{hint}; give a name like NO_DQF or a number"
        ) from None


def parse_int_list(values: Iterable[str], option: str) -> frozenset[int]:
    """Repeated and/or comma-separated integers -> a set."""
    result = set()
    for value in values:
        for part in value.split(","):
            if not INTEGER_PATTERN.fullmatch(part.strip()):
                raise SelectionError(f"{option}: {part!r} is not an integer")
            result.add(whole_number(part, option))
    return frozenset(result)
