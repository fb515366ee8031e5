"""How `mrs status` draws a bus: the groups, links and queues tables, sizes and waits.

Fields other engineers add to a group's status are shown as they come (the "More"
columns), so the table never hides them.
"""

from __future__ import annotations

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
}
_LINK_KEYS_SHOWN = {"state", "saf_backlog", "drain", "in_flight", "notices_pending"}
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


def _compact(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_compact(v)}" for k, v in value.items()) or "{}"
    if isinstance(value, list):
        return (
            f"[{', '.join(_compact(v) for v in value)}]"
            if len(value) <= 6
            else f"{len(value)} items"
        )
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


GROUP_COLUMNS = (
    "Group", "State", "Listen", "Version", "Uptime", "Epoch", "Journal used",
    "SAF", "DQF", "DLJ", "PCJ", "Clients", "Notes",
)  # fmt: skip
LINK_COLUMNS = ("From", "To", "State", "SAF backlog", "Drain", "Waits because", "In flight", "More")
QUEUE_COLUMNS = ("Queue", "Name", "Depth", "DQF depth", "Unconfirmed", "Attached", "More")
_NUMBER_COLUMNS = {"SAF", "DQF", "DLJ", "PCJ"}


def render(views: list[GroupView], bus_path: Path | None):
    """Rich renderables: the groups, links and queues tables (with extras)."""
    from rich.console import Group as Stack
    from rich.table import Table

    up = sum(1 for view in views if view.up)
    title = f"{bus_path or views[0].address}: {up} of {len(views)} groups up"
    groups = Table(title=title, title_justify="left", expand=False)
    for column in GROUP_COLUMNS:
        groups.add_column(column, justify="right" if column in _NUMBER_COLUMNS else "left")
    links = Table(title="Links", title_justify="left")
    for column in LINK_COLUMNS:
        links.add_column(column)
    queues = Table(title="Queues", title_justify="left")
    for column in QUEUE_COLUMNS:
        queues.add_column(column)
    for view in views:
        if view.status is None:
            _add_down_group(view, groups, links)
            continue
        groups.add_row(*_group_row(view))
        label = _label(view.status)
        for peer, link in sorted(
            (view.status.get("links") or {}).items(), key=lambda kv: int(kv[0])
        ):
            links.add_row(*_link_row(label, peer, link))
        for address, queue in (view.status.get("queues") or {}).items():
            more = {k: v for k, v in queue.items() if k not in _QUEUE_KEYS_SHOWN}
            queues.add_row(
                address,
                str(queue.get("name", "")),
                str(queue.get("pending", "-")),
                str(queue.get("dqf_depth", "-")),
                str(queue.get("unconfirmed", "-")),
                "yes" if queue.get("attached") else "no",
                _compact(more) if more else "",
            )
    handlers = _dlq_readers_table(views, Table)
    return Stack(
        *[
            table
            for table in (groups, links, queues, handlers)
            if table.row_count or table is groups
        ]
    )


def _label(status: dict) -> str:
    return f"{status.get('group')} {status.get('name', '')}".strip()


def _add_down_group(view: GroupView, groups, links) -> None:
    from rich.text import Text

    label = f"{view.group if view.group is not None else '?'} {view.name or ''}".strip()
    refused = view.refused is not None
    groups.add_row(
        label or view.address,
        Text(view.state, style="bold yellow" if refused else "bold red"),
        view.address,
        *["-"] * (len(GROUP_COLUMNS) - 4),
        Text(view.refused or view.error or "", style="yellow" if refused else "red"),
    )
    why = "status refused" if refused else "group down"
    for peer in view.links_configured:
        links.add_row(label, str(peer), Text("unknown", style="yellow"), "-", "-", why, "-", "")


def _group_row(view: GroupView) -> list:
    from rich.text import Text

    status = view.status or {}
    journal = status.get("journal") or {}
    records = journal.get("records") or {}
    percent = journal.get("used_percent")
    used = f"{human_bytes(journal.get('used_bytes'))} / {human_bytes(journal.get('cap_bytes'))}"
    journal_text = Text(
        f"{used} ({percent:g}%)" if percent is not None else "-",
        style=_percent_style(percent, journal.get("warn_percent")),
    )
    notes = []
    if status.get("corrupt_records"):
        notes.append(f"corrupt records: {len(status['corrupt_records'])}")
    extras = {k: v for k, v in status.items() if k not in _GROUP_KEYS_SHOWN}
    notes.extend(f"{k}: {_compact(v)}" for k, v in extras.items())
    return [
        _label(status),
        Text("UP", style="bold green"),
        str(status.get("listen") or view.address),
        str(status.get("version", "-")),
        human_duration(status.get("uptime_s")),
        str(status.get("epoch", "-")),
        journal_text,
        str(records.get("saf", "-")),
        str(records.get("dqf", status.get("dqf_messages", "-"))),
        str(records.get("dlj", "-")),
        str(records.get("pcj", "-")),
        str((status.get("connections") or {}).get("clients", "-")),
        "; ".join(notes),
    ]


def _link_row(label: str, peer: str, link: dict) -> list:
    from rich.text import Text

    state = str(link.get("state", "?"))
    waits = next((describe_wait(link[k]) for k in _WAIT_KEYS if link.get(k)), "")
    if not waits and state != "up":
        waits = "link down: SAF holds messages until it is up"
    elif not waits and link.get("drain") == "retry":
        waits = "peer answered RETRY (its DQF is full)"
    more = {k: v for k, v in link.items() if k not in _LINK_KEYS_SHOWN and k not in _WAIT_KEYS}
    return [
        label,
        str(peer),
        Text(state, style="green" if state == "up" else "red"),
        str(link.get("saf_backlog", "-")),
        str(link.get("drain", "-")),
        waits,
        str(link.get("in_flight", "-")),
        _compact(more) if more else "",
    ]


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


def _dlq_readers_table(views: list[GroupView], table_type):
    """Running dead-letter handlers (every reader of a DLQ) and their counts."""
    table = table_type(title="DLQ readers (mrs dlq-handler)", title_justify="left")
    for column in ("Group", "Session", "Peer", "Got", "Moved", "Discarded", "Put", "Held"):
        table.add_column(column, justify="left" if column == "Peer" else "right")
    keys = ("session", "program", "got", "moved", "discarded", "put", "held")
    for view in views:
        status = view.status or {}
        for reader in status.get("dlq_readers") or []:
            table.add_row(str(status.get("group", "")), *(str(reader.get(k, "-")) for k in keys))
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
