"""How `mrs status` draws a bus: the groups, links and queues tables, sizes and waits.

Fields other engineers add to a group's status are shown as they come, in words and
only when not zero (the Notes columns), so the table never hides them and never
fills with `{}`.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mrs.tools.group_view import GroupView

_GROUP_KEYS_SHOWN = {
    "group",
    "name",
    "epoch",
    "dqf_messages",
    "dedupe_keys",
    "corrupt_records",
    "writer",
    "links",
    "queues",
    "version",
    "pid",
    "started_time_s",
    "uptime_s",
    "listen",
    "connections",
    "journal",
    "endpoints",
    "dlq_readers",
    "quarantined",
    "mrs_acks_sent",
    "dqf_unconfigured_queues",
    "saf_unlinked_groups",
    "owed_unlinked_groups",
    "dqf_held_for_drains",
    "guards",
    "clients_draining",
    "alarms",
    "replication",  # the Replication table shows it; a note only when answers are held
    "pcj_archive",  # one note (`archive_note`)
    "pcj_archive_runs",  # runs `mrs pcj archive` waits for: its own answer shows them
}
_LINK_KEYS_SHOWN = {"state", "saf_backlog", "drain", "in_flight"}
_QUEUE_KEYS_SHOWN = {"name", "pending", "unconfirmed", "dqf_depth", "attached"}
_WAIT_KEYS = ("drain_wait", "drain_wait_reason", "wait_reason", "waiting_for", "why")


def human_bytes(count: int | float | None) -> str:
    if count is None:
        return "-"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


GROUP_COLUMNS = (
    "Group", "State", "Version", "Uptime", "Journal",
    "SAF", "DQF", "DLJ", "PCJ", "Clients",
)  # fmt: skip
DETAIL_COLUMNS = ("Group", "Listen", "Epoch", "Notes")
LINK_COLUMNS = ("From", "To", "State", "SAF", "In flight", "Drain", "Waits because / notes")
QUEUE_COLUMNS = ("Queue", "Name", "Depth", "DQF", "Unconfirmed", "Attached", "Notes")
_NUMBER_COLUMNS = {"SAF", "DQF", "DLJ", "PCJ", "Clients", "Epoch", "In flight", "Depth",
                   "Unconfirmed"}  # fmt: skip


def render(views: list[GroupView], bus_path: Path | None):
    """Rich renderables: groups, their details and notes, links, queues, DLQ readers.

    Why this shape: an operator reads it in an 80-column terminal, so each table keeps
    to the columns that change and say something; what is rarely needed (listen
    address, epoch) and what is only worth saying when it is not zero (notes) sit in
    a table of their own, in words."""
    from rich.console import Group as Stack

    up = sum(1 for view in views if view.up)
    title = f"{up} of {len(views)} groups up: {bus_path or views[0].address}"
    groups, details = _table(None, GROUP_COLUMNS), _table("Details", DETAIL_COLUMNS)
    links, queues = _table("Links", LINK_COLUMNS), _table("Queues", QUEUE_COLUMNS)
    names = _group_names(views)
    for view in views:
        label = _view_label(view)
        if view.status is None:
            _add_down_group(view, label, groups, details, links, names)
            continue
        groups.add_row(*_group_row(view))
        details.add_row(*_detail_row(view, label))
        links_status = view.status.get("links") or {}
        for peer, link in sorted(links_status.items(), key=lambda kv: int(kv[0])):
            links.add_row(*_link_row(label, _peer_label(peer, names), link))
        for address, queue in (view.status.get("queues") or {}).items():
            queues.add_row(*_queue_row(address, queue))
    handlers = _dlq_readers_table(views)
    from rich.text import Text

    from mrs.tools.replication_render import replication_table

    replication = replication_table(views, _table)
    shown = [
        table
        for table in (groups, details, replication, links, queues, handlers)
        if table.row_count
    ]
    return Stack(Text(title, style="bold", overflow="fold"), *_spaced(shown or [groups]))


def _spaced(tables: list) -> list:
    """The tables with a blank line between each two."""
    from rich.text import Text

    spaced: list = []
    for table in tables:
        spaced.extend([Text(""), table] if spaced else [table])
    return spaced


def _table(title: str | None, columns: tuple[str, ...]):
    """A table without vertical rules: two spaces between columns fit 80 columns."""
    from rich import box
    from rich.table import Table

    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        collapse_padding=True,
        expand=False,
    )
    for column in columns:
        wrap = column.startswith(("Notes", "Waits")) or column == "Name"  # long names fold
        table.add_column(
            column,
            justify="right" if column in _NUMBER_COLUMNS else "left",
            no_wrap=not wrap,
            overflow="fold" if wrap else "ellipsis",
        )
    return table


def _group_names(views: list[GroupView]) -> dict[str, str]:
    """Group number -> name, from the config or the group's own answer."""
    names = {}
    for view in views:
        status = view.status or {}
        group = view.group if view.group is not None else status.get("group")
        name = view.name or status.get("name")
        if group is not None and name:
            names[str(group)] = str(name)
    return names


def _view_label(view: GroupView) -> str:
    status = view.status or {}
    group = view.group if view.group is not None else status.get("group")
    name = view.name or status.get("name") or ""
    return f"{group if group is not None else '?'} {name}".strip()


def _peer_label(peer: str, names: dict[str, str]) -> str:
    return f"{peer} {names[peer]}" if peer in names else str(peer)


def _add_down_group(view: GroupView, label: str, groups, details, links, names) -> None:
    from rich.text import Text

    refused = view.refused is not None
    style = "yellow" if refused or view.recovering else "red"
    groups.add_row(label or view.address, Text(view.state, style=f"bold {style}"),
                   *["-"] * (len(GROUP_COLUMNS) - 2))  # fmt: skip
    reason = f"refused the status request: {view.refused}" if refused else view.error
    if view.recovering is not None:
        reason = f"{view.recovering} (its client port: {view.error})"
    details.add_row(label, view.address, "-", Text(f"{view.state}: {reason}", style=style))
    why = "status refused" if refused else "group recovering" if view.recovering else "group down"
    for peer in view.links_configured:
        peer_label = _peer_label(str(peer), names)
        links.add_row(label, peer_label, Text("unknown", style="yellow"), "-", "-", "-", why)


def _group_row(view: GroupView) -> list:
    from rich.text import Text

    status = view.status or {}
    journal = status.get("journal") or {}
    records = journal.get("records") or {}
    percent = journal.get("used_percent")
    journal_text = Text(
        f"{percent:g}% of {human_bytes(journal.get('cap_bytes'))}" if percent is not None else "-",
        style=_percent_style(percent, journal.get("warn_percent")),
    )
    return [
        _view_label(view),
        Text("UP", style="bold green"),
        str(status.get("version", "-")),
        human_duration(status.get("uptime_s")),
        journal_text,
        str(records.get("saf", "-")),
        str(records.get("dqf", status.get("dqf_messages", "-"))),
        str(records.get("dlj", "-")),
        str(records.get("pcj", "-")),
        str((status.get("connections") or {}).get("clients", "-")),
    ]


def _detail_row(view: GroupView, label: str) -> list:
    status = view.status or {}
    journal = status.get("journal") or {}
    notes = group_notes(status)
    if journal.get("used_bytes") is not None:
        used = f"journal {human_bytes(journal['used_bytes'])} used"
        notes.insert(0, f"{used} of {human_bytes(journal.get('cap_bytes'))}")
    return [label, str(status.get("listen") or view.address), str(status.get("epoch", "-")),
            "; ".join(notes)]  # fmt: skip


def group_notes(status: dict) -> list[str]:
    """What a group's status says beyond the table's columns, in words, only where it
    is not zero: a note that is always there teaches the eye to skip the column."""
    notes = [f"ALARM {alarm.get('words') or alarm}" for alarm in status.get("alarms") or []]
    corrupt = len(status.get("corrupt_records") or [])
    if corrupt:
        notes.append(f"{corrupt} corrupt records")
    if status.get("quarantined"):
        notes.append(f"{status['quarantined']} quarantined records")
    for queue, count in (status.get("dqf_unconfigured_queues") or {}).items():
        notes.append(f"DQF keeps {count} messages for queue {queue}, not in the config")
    for peer, count in (status.get("saf_unlinked_groups") or {}).items():
        notes.append(f"SAF keeps {count} messages for group {peer}, not linked")
    for peer, owed in (status.get("owed_unlinked_groups") or {}).items():
        notes.append(
            f"owes group {peer} {owed['confirm_notices']} confirm notices and "
            f"{owed['mrs_acks']} MRS_ACKs, not linked"
        )
    for peer, held in sorted((status.get("dqf_held_for_drains") or {}).items()):
        if held:
            notes.append(f"DQF room held for group {peer}'s drain: {_words(held)}")
    refused = (status.get("guards") or {}).get("refused") or {}
    for limit, count in sorted(refused.items()):
        if count:
            notes.append(f"refused {count} times by {limit}")
    if gone := (status.get("guards") or {}).get("gone_before_served"):
        notes.append(f"{gone} connections reset by their peers before they were served")
    draining = status.get("clients_draining") or []
    if draining:
        notes.append(f"{len(draining)} clients draining their SAF journals")
    if held := replication_held(status.get("replication")):
        notes.append(held)
    if archived := archive_note(status.get("pcj_archive")):
        notes.append(archived)
    extras = {k: v for k, v in status.items() if k not in _GROUP_KEYS_SHOWN}
    notes.extend(_described(extras))
    return notes


def archive_note(summary: object) -> str | None:
    """The last PCJ archive run in one line: its failure, or what it archived. Why: the
    summary went to the Notes column whole, every file's path of a large archive a
    wall of text, and a run that archived nothing is not news."""
    if not isinstance(summary, dict):
        return None
    run = summary.get("run", "run")
    if summary.get("error"):
        return f"PCJ archive ({run}) failed: {summary['error']}"
    archived = summary.get("archived")
    if not archived:
        return None
    files = summary.get("files")
    count = len(files) if isinstance(files, list) else files
    return f"PCJ archive ({run}): {archived} records in {count} files to {summary.get('dir')}"


def replication_held(replication: object) -> str | None:
    """The note a replicated group's active gets when it cannot answer: fewer of the
    replicas its answers wait for are linked than each answer needs (two instances
    of three lost). Why: the group still answers `mrs status` and shows UP, while
    every WF put, get and confirm waits (a put times out); before, the only sign was
    the Notes column's dump of the whole replication status."""
    if not isinstance(replication, dict):
        return None
    replicas = replication.get("replicas") or {}
    needed = replication.get("acks_needed") or 0
    linked = sorted(
        name
        for name, replica in replicas.items()
        if isinstance(replica, dict) and replica.get("waited_for") and replica.get("connected")
    )
    if not isinstance(needed, int) or len(linked) >= needed:
        return None
    return (
        f"ANSWERS HELD: each answer waits for {needed} replica(s) in sync, and "
        f"{len(linked)} is linked: recoverable puts, gets and confirms wait (a put times "
        "out, its outcome unknown) until an instance is back; nothing is answered "
        "from one disk"
    )


_LINK_WORDS = {
    "mrs_acks_owed": "MRS_ACKs owed",
    "receipts_pending": "receipts pending",
    "notices_pending": "notices pending",
    "queued": "messages queued to send",
    "messages_sent": "messages sent",
    "messages_resent": "messages sent again",
    "messages_received": "messages received",
}


def _link_row(label: str, peer_label: str, link: dict) -> list:
    from rich.text import Text

    state = str(link.get("state", "?"))
    waits = next((describe_wait(link[k]) for k in _WAIT_KEYS if link.get(k)), "")
    if not waits and state != "up":
        waits = "link down: SAF holds messages until it is up"
    elif not waits and link.get("drain") == "retry":
        waits = "peer answered RETRY (its DQF is full)"
    notes = [waits] if waits else []
    for key, words in _LINK_WORDS.items():
        if link.get(key):
            notes.append(f"{link[key]} {words}")
    if (link.get("connections") or 0) > 1:
        notes.append(f"connected {link['connections']} times")
    skipped = _LINK_KEYS_SHOWN | set(_WAIT_KEYS) | set(_LINK_WORDS) | {"connections"}
    notes.extend(_described({k: v for k, v in link.items() if k not in skipped}))
    return [
        label,
        peer_label,
        Text(state, style="green" if state == "up" else "red"),
        str(link.get("saf_backlog", "-")),
        str(link.get("in_flight", "-")),
        str(link.get("drain", "-")),
        "; ".join(notes),
    ]


def _queue_row(address: str, queue: dict) -> list:
    more = {k: v for k, v in queue.items() if k not in _QUEUE_KEYS_SHOWN}
    notes = []
    if at_max := more.pop("at_unconfirmed_max", None):
        notes.append(unconfirmed_max_note(at_max))
    return [
        address,
        str(queue.get("name", "")),
        str(queue.get("pending", "-")),
        str(queue.get("dqf_depth", "-")),
        str(queue.get("unconfirmed", "-")),
        "yes" if queue.get("attached") else "no",
        "; ".join(notes + _described(more)),
    ]


def unconfirmed_max_note(unconfirmed_max: object) -> str:
    """The note of a queue whose receivers hold its unconfirmed_max. Why: a consumer
    that stopped confirming showed only as an Unconfirmed count no row compared
    with anything, while its gets were refused and the queue, then the DQF, filled."""
    return (
        f"at its unconfirmed_max ({unconfirmed_max}): gets refused EXCMAXUNCONF until its "
        "receivers confirm (`mrs admin connections` names them)"
    )


def _described(fields: dict) -> list[str]:
    """Fields a newer server added, as words ("key words: value"), skipping zeros."""
    return [f"{_key_words(key)}: {_words(value, key)}" for key, value in fields.items()
            if not _is_nothing(value)]  # fmt: skip


def _key_words(key: object) -> str:
    """`opened_ns` -> "opened": the unit goes with the value (`_words`)."""
    text = str(key)
    return (text.removesuffix("_ns") if text.endswith("_ns") else text).replace("_", " ")


def _is_nothing(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_is_nothing(v) for v in value.values())
    if isinstance(value, list | tuple | set):
        return not value
    return value is None or value is False or value == 0 or value == ""


_EPOCH_NS_MIN = 10**17
"""An `_ns` value this large is a time since the epoch (after 1973), not a duration."""


def _words(value: Any, key: object = "") -> str:
    """A value as an operator reads it: no braces, quotes or `key=value`; a time in ns
    since the epoch (a key ending in `_ns`) as a UTC time, not 19 digits."""
    if isinstance(value, dict):
        parts = [f"{_key_words(k)} {_words(v, k)}" for k, v in value.items()
                 if not _is_nothing(v)]  # fmt: skip
        return ", ".join(parts)
    if str(key).endswith("_ns") and type(value) is int and value >= _EPOCH_NS_MIN:
        stamp = datetime.datetime.fromtimestamp(value / 1e9, datetime.UTC)
        return stamp.strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(value, list | tuple):
        if len(value) > 6 or any(isinstance(v, dict | list) for v in value):
            return f"{len(value)} entries"
        return ", ".join(_words(v) for v in value)
    if value is True:
        return "yes"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def describe_wait(wait: Any) -> str:
    """Why a link's drain waits, in words (the peer's drain_wait, or any text)."""
    if not isinstance(wait, dict):
        return str(wait)
    words = str(wait.get("reason") or wait.get("status") or "waiting")
    details = []
    if wait.get("status") and wait.get("reason"):
        details.append(str(wait["status"]))
    if wait.get("stuck_seq") is not None:
        details.append(f"seq {wait['stuck_seq']}")
    if wait.get("waiting_behind"):
        details.append(f"{wait['waiting_behind']} behind it")
    if wait.get("retry_in_s"):
        details.append(f"retry in {wait['retry_in_s']:g} s")
    return f"{words} ({', '.join(details)})" if details else words


def _dlq_readers_table(views: list[GroupView]):
    """Running dead-letter handlers (every reader of a DLQ) and their counts."""
    columns = ("Group", "Session", "Program", "Got", "Moved", "Discarded", "Put", "Held")
    table = _table("DLQ readers (mrs dlq-handler)", columns)
    keys = ("session", "program", "got", "moved", "discarded", "put", "held")
    for view in views:
        status = view.status or {}
        for reader in status.get("dlq_readers") or []:
            table.add_row(_view_label(view), *(str(reader.get(k, "-")) for k in keys))
    return table


def _percent_style(percent: float | None, thresholds: list[int] | None) -> str:
    if percent is None:
        return ""
    marks = sorted(thresholds or [80, 95])
    if percent >= marks[-1]:
        return "bold red"
    if percent >= marks[0]:
        return "yellow"
    return ""
