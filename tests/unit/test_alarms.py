"""The alarm rules (mrs.ops.alarms) on numbers: raised from ALARM_USE_HIGH of a bound
(below DISK_FREE_ALARM_RESERVES_MIN reserves for the disk), with the numbers in words."""

from __future__ import annotations

import math

from mrs.limits import ALARM_USE_HIGH, DISK_FREE_ALARM_RESERVES_MIN
from mrs.ops.alarms import (
    connection_alarm,
    count_alarm,
    disk_alarm,
    journal_alarm,
    memory_alarm,
)


def test_a_count_alarms_from_the_high_fraction_of_its_limit() -> None:
    threshold = math.ceil(1000 * ALARM_USE_HIGH)
    assert count_alarm("saf", "saf", threshold - 1, 1000, "the SAF") is None
    alarm = count_alarm("saf", "saf", threshold, 1000, "the SAF")
    assert alarm is not None and alarm.as_dict() == {
        "alarm": "saf",
        "subject": "saf",
        "value": threshold,
        "threshold": threshold,
        "limit": 1000,
        "unit": "messages",
        "words": f"the SAF holds {threshold} of 1000 (80%); alarm from {threshold}, "
        "new messages refused at 1000",
    }


def test_a_zero_limit_never_alarms() -> None:
    assert count_alarm("dlj", "dlj", 5, 0, "the DLJ") is None
    assert memory_alarm("1.10", 5, 0) is None


def test_the_journal_alarm_counts_against_the_cap_less_its_reserve() -> None:
    cap, reserve = 1 << 20, 52_428
    threshold = math.ceil((cap - reserve) * ALARM_USE_HIGH)
    assert journal_alarm(threshold - 1, cap, reserve) is None
    alarm = journal_alarm(threshold, cap, reserve)
    assert alarm is not None and alarm.limit == cap - reserve and alarm.unit == "bytes"
    assert "journal_bytes_max 1.0 MiB less its reserve 51.2 KiB" in alarm.words


def test_the_disk_alarm_is_raised_under_two_reserves_free() -> None:
    reserve = 100 << 20
    assert disk_alarm("/data", DISK_FREE_ALARM_RESERVES_MIN * reserve, reserve) is None
    alarm = disk_alarm("/data", reserve + 1, reserve)
    assert alarm is not None and alarm.threshold == 2 * reserve and alarm.limit == reserve
    assert alarm.words.startswith("disk of /data has 100.0 MiB free; alarm under 200.0 MiB")


def test_memory_alarm_in_bytes() -> None:
    alarm = memory_alarm("1.11", 900, 1000)
    assert alarm is not None and alarm.words.startswith(
        "queue 1.11 holds 900 B of memory messages, 90% of queue_bytes_max 1000 B"
    )


def test_connection_alarm_names_the_peer() -> None:
    assert connection_alarm("127.0.0.1:5000", 799, 1000) is None
    alarm = connection_alarm("127.0.0.1:5000", 800, 1000)
    assert alarm is not None and alarm.subject == "connection 127.0.0.1:5000"
    assert alarm.words.startswith("connection 127.0.0.1:5000 has 800 B of memory messages")
