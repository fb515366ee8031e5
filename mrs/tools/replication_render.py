"""`mrs status`'s Replication table: each instance of a replicated group as its active
reports it (role, term, in sync, its link, or why it cannot store, backlog of records
and bytes not yet acknowledged).

Why the active reports the replicas: a replica does not listen on the client port
(clients find the active by trying the instances), so the active, which streams to
them and counts their acknowledgements, is the one that knows each one's backlog.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mrs.tools.group_view import GroupView

REPLICATION_COLUMNS = ("Group", "Instance", "Role", "Term", "In sync", "Link", "Backlog", "Bytes")


def replication_rows(views: list[GroupView]) -> list[list[str]]:
    """One row per instance of every replicated group that answered."""
    rows: list[list[str]] = []
    for view in views:
        replication: dict[str, Any] = (view.status or {}).get("replication") or {}
        if not replication:
            continue
        label = str(view.name or (view.status or {}).get("name") or view.group)
        term = str(replication.get("term", ""))
        rows.append([label, replication["instance"], "active", term, "yes", "-", "0", "0"])
        for name, replica in sorted((replication.get("replicas") or {}).items()):
            rows.append(
                [
                    label,
                    name,
                    "replica",
                    term,
                    "yes" if replica.get("in_sync") else "no",
                    _link_text(replica),
                    str(replica.get("backlog_records", 0)),
                    str(replica.get("backlog_bytes", 0)),
                ]
            )
    return rows


def _link_text(replica: dict[str, Any]) -> str:
    """The Link cell: up, down, or why a replica said it cannot store (a full disk)."""
    if problem := replica.get("problem"):
        return f"cannot store: {problem}"
    return "up" if replica.get("connected") else "down"


def replication_table(views: list[GroupView], make_table: Callable[..., Any]) -> Any:
    """The table (made by status_render's `_table`), empty when no group is replicated."""
    table = make_table("Replication", REPLICATION_COLUMNS)
    for row in replication_rows(views):
        table.add_row(*row)
    return table
