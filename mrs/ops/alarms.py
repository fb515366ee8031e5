"""A group's alarms: memory, disk and journal bounds it is about to reach.

Why: RabbitMQ's management page shows its memory and disk alarms before the broker
blocks publishers; MRS refuses at its own bounds (a queue's queue_bytes_max and
messages_max, the journal reserve on the map and on the disk, dqf/saf/dlj_messages_max)
and until now said so only once it refused. An alarm is raised when a use reaches
ALARM_USE_HIGH of its bound (or the disk's free space falls under
DISK_FREE_ALARM_RESERVES_MIN reserves) and says, in words, what, how much now, and
from where it alarms and where it refuses. The same list goes to the status (`alarms`:
the web page's Alarms table and `mrs status` notes) and to the metrics (`mrs_alarms`
per kind).

Pure functions of numbers, so the rules are tested without a server; `group_alarms`
reads those numbers off a running group.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mrs.limits import ALARM_USE_HIGH, DISK_FREE_ALARM_RESERVES_MIN

if TYPE_CHECKING:
    from mrs.config.guards import Guards
    from mrs.group import Group

ALARM_KINDS = ("memory", "disk", "journal", "dqf", "saf", "dlj")
"""Every kind of alarm (the `alarm` label of `mrs_alarms`, always all of them)."""


@dataclass(frozen=True, slots=True)
class Alarm:
    """One raised alarm: what is near its bound, and the numbers, in words."""

    kind: str
    subject: str
    """What it is about: a queue's address, `journal`, the data directory."""
    value: int
    threshold: int
    """The alarm is raised from here (at or above; for the disk: below)."""
    limit: int
    """Where MRS refuses (for the disk: the reserve it keeps free)."""
    words: str
    unit: str = "messages"
    """What value, threshold and limit count: `messages` or `bytes`."""

    def as_dict(self) -> dict:
        return {
            "alarm": self.kind,
            "subject": self.subject,
            "value": self.value,
            "threshold": self.threshold,
            "limit": self.limit,
            "words": self.words,
            "unit": self.unit,
        }


def alarm_threshold(limit: int) -> int:
    """Where the alarm starts: never under ALARM_USE_HIGH of the limit (rounded up)."""
    return math.ceil(limit * ALARM_USE_HIGH)


def _percent(value: int, limit: int) -> str:
    return f"{100.0 * value / limit:.0f}%" if limit else "-"


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def count_alarm(kind: str, subject: str, count: int, limit: int, what: str) -> Alarm | None:
    """`count` records (or messages) against the configured `limit` (e.g. the DQF's
    records against dqf_messages_max); None while under ALARM_USE_HIGH of it."""
    threshold = alarm_threshold(limit)
    if limit <= 0 or count < threshold:
        return None
    words = (
        f"{what} holds {count} of {limit} ({_percent(count, limit)}); "
        f"alarm from {threshold}, new messages refused at {limit}"
    )
    return Alarm(kind, subject, count, threshold, limit, words)


def memory_alarm(queue: str, held_bytes: int, bytes_max: int) -> Alarm | None:
    """Bodies of nonrecoverable messages waiting in one queue's memory against the
    queue_bytes_max guard (mrs.group.memory_quota refuses EXCEEDQUOTA past it)."""
    threshold = alarm_threshold(bytes_max)
    if bytes_max <= 0 or held_bytes < threshold:
        return None
    words = (
        f"queue {queue} holds {_size(held_bytes)} of memory messages, "
        f"{_percent(held_bytes, bytes_max)} of queue_bytes_max {_size(bytes_max)}; "
        f"alarm from {_size(threshold)}, puts refused EXCEEDQUOTA past it"
    )
    return Alarm("memory", queue, held_bytes, threshold, bytes_max, words, "bytes")


def connection_alarm(peer: str, held_bytes: int, bytes_max: int) -> Alarm | None:
    """Bodies one connection has waiting in the group's memory queues against the
    connection_bytes_max guard (its next nonrecoverable put is refused past it)."""
    threshold = alarm_threshold(bytes_max)
    if bytes_max <= 0 or held_bytes < threshold:
        return None
    words = (
        f"connection {peer} has {_size(held_bytes)} of memory messages waiting, "
        f"{_percent(held_bytes, bytes_max)} of connection_bytes_max {_size(bytes_max)}; "
        f"alarm from {_size(threshold)}, its puts refused EXCEEDQUOTA past it"
    )
    return Alarm("memory", f"connection {peer}", held_bytes, threshold, bytes_max, words, "bytes")


def journal_alarm(used_bytes: int, cap_bytes: int, reserve_bytes: int) -> Alarm | None:
    """The journal's LMDB map in use against where new recoverable messages stop:
    journal_bytes_max less the reserve kept for deliveries, confirms and deletes."""
    limit = cap_bytes - reserve_bytes
    threshold = alarm_threshold(limit)
    if limit <= 0 or used_bytes < threshold:
        return None
    words = (
        f"journal {_size(used_bytes)} in use, {_percent(used_bytes, limit)} of the "
        f"{_size(limit)} where new recoverable messages are refused (journal_bytes_max "
        f"{_size(cap_bytes)} less its reserve {_size(reserve_bytes)}); alarm from "
        f"{_size(threshold)}: archive the PCJ, drain queues or raise journal_bytes_max"
    )
    return Alarm("journal", "journal", used_bytes, threshold, limit, words, "bytes")


def disk_alarm(where: str, free_bytes: int, reserve_bytes: int) -> Alarm | None:
    """Free space on the disk of the data directory against the journal reserve: new
    recoverable messages are refused once less than the reserve is free."""
    threshold = DISK_FREE_ALARM_RESERVES_MIN * reserve_bytes
    if free_bytes >= threshold:
        return None
    words = (
        f"disk of {where} has {_size(free_bytes)} free; alarm under {_size(threshold)} "
        f"({DISK_FREE_ALARM_RESERVES_MIN} journal reserves), new recoverable messages "
        f"refused under {_size(reserve_bytes)}: free disk space"
    )
    return Alarm("disk", where, free_bytes, threshold, reserve_bytes, words, "bytes")


def group_alarms(
    group: Group, guards: Guards, journal: dict, held: Iterable[tuple[str, int]] = ()
) -> list[Alarm]:
    """The alarms of a running group, from its counts, queues and journal usage
    (`journal`: the status's journal section with `disk_numbers` in it; empty for
    the simulator's store, which has neither map nor disk) and the bytes each
    connection has waiting in memory (`held`: peer, bytes)."""
    ctx = group.ctx
    limits = ctx.limits
    counts = ctx.counts
    found = [
        count_alarm("dqf", "dqf", counts.dqf, limits.dqf_messages_max, "the DQF"),
        count_alarm("saf", "saf", counts.saf, limits.saf_messages_max, "the SAF"),
        count_alarm(
            "dlj", "dlj", _dlj_records(journal, counts), limits.dlj_messages_max, "the DLJ"
        ),
    ]
    for queue in ctx.queues.values():
        address = str(queue.address)
        found.append(memory_alarm(address, queue.memory_bytes, guards.queue_bytes_max))
        what = f"queue {address}'s memory (messages_max)"
        found.append(
            count_alarm("memory", address, queue.memory_count, queue.config.messages_max, what)
        )
    for peer, held_bytes in held:
        found.append(connection_alarm(peer, held_bytes, guards.connection_bytes_max))
    reserve = journal.get("reserve_bytes")
    if reserve is not None:
        found.append(journal_alarm(journal["used_bytes"], limits.journal_bytes_max, reserve))
        if journal.get("disk_free_bytes") is not None:
            where = str(ctx.config.data_dir)
            found.append(disk_alarm(where, journal["disk_free_bytes"], reserve))
    return [alarm for alarm in found if alarm is not None]


def _dlj_records(journal: dict, counts) -> int:
    """The DLJ's records as read now (the status's journal section) with those being
    committed: `mrs jplay --remove` and the DLQ handler delete dead letters beside the
    group, which its own count (`counts.dlj`) does not see until it reaches the cap."""
    on_disk = (journal.get("records") or {}).get("dlj")
    return counts.dlj if on_disk is None else on_disk + counts.dlj_in_flight


def disk_numbers(data_dir: str, journal_bytes_max: int, message_bytes_max: int) -> dict:
    """The journal reserve and the free bytes of the data directory's disk (None when
    it cannot be measured): what the journal reserve itself compares."""
    from mrs.storage import journal_measure
    from mrs.storage.journal_reserve import reserve_bytes

    try:
        free: int | None = journal_measure.disk_free_bytes(data_dir)
    except OSError:
        free = None
    return {
        "reserve_bytes": reserve_bytes(journal_bytes_max, message_bytes_max),
        "disk_free_bytes": free,
    }
