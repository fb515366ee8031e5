"""A small read-only web view of a bus or a group: the status tables and live charts.

Why: operators coming from RabbitMQ open a management page first. This one is
served either by one group (`[group.ops] web_listen`, showing that group) or by
`mrs web --config bus.toml` (asking every group, like `mrs status`). The page is
one self-contained HTML file (no CDN: it works on an air-gapped host) that polls
`/api/status` — the same JSON as `mrs status --json --config` — every two seconds
and draws rates and commit latency from the difference of successive samples (what
happens now), backlogs as they are. Read-only by default: the endpoint answers GET
and HEAD only. A group with `[group.ops] web_admin = true` adds the actions of
mrs.ops.web_admin (browse, purge, move, connections, behind a login under [auth]).
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import time
from importlib import resources
from typing import TYPE_CHECKING, cast

import trio

from mrs.limits import STATUS_BUILD_INTERVAL_S
from mrs.ops.http_endpoint import (
    Handler,
    Response,
    Route,
    SharedBuild,
    http_url,
    serve_endpoint,
    text,
)

if TYPE_CHECKING:
    from mrs.ops.group_ops import GroupOps

log = logging.getLogger("mrs.web")

WEB_LISTEN_DEFAULT = "127.0.0.1:8100"
BUS_CACHE_S = 1.0
"""`mrs web` asks the groups at most once a second however many pages are open."""


def page_html(title: str) -> bytes:
    """The page (mrs/ops/web_page.html: HTML, CSS and script in one file) for `title`."""
    page = resources.files("mrs.ops").joinpath("web_page.html").read_text(encoding="utf-8")
    return page.replace("__TITLE__", _escape(title)).encode()


def _escape(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


HISTORY_SAMPLES_MAX = 180
"""Samples kept for the charts (one a second: the last three minutes)."""


def sample_of(payload: dict) -> dict:
    """One point of the live charts from a bus status payload: running totals, so the
    page charts what happened between two points (the current commit latency and
    rates), not the since-start mean that flattens after an hour."""
    batches = commits = saf = depth = 0
    commit_ms_total = 0.0
    for view in payload.get("groups", []):
        status = view.get("status")
        if not status:
            continue
        writer = status.get("writer") or {}
        batches += writer.get("batches", 0)
        commits += writer.get("commits", 0)
        commit_ms_total += commit_time_ms_total(writer)
        saf += sum(link.get("saf_backlog", 0) for link in (status.get("links") or {}).values())
        depth += sum(queue.get("pending", 0) for queue in (status.get("queues") or {}).values())
    return {
        "t": payload.get("time_s", time.time()),
        "batches": batches,
        "commits": commits,
        "commit_ms_total": round(commit_ms_total, 3),
        "saf": saf,
        "depth": depth,
    }


def commit_time_ms_total(writer: dict) -> float:
    """A group's commit time so far; from the mean for a server that sends no total."""
    if "commit_time_ms_total" in writer:
        return float(writer["commit_time_ms_total"])
    return float(writer.get("commit_time_ms_mean", 0.0)) * writer.get("commits", 0)


def _with_queue_counts(status: dict, ops: GroupOps) -> dict:
    """The group's status with each queue's delivery and confirm totals (the rates)."""
    if ops.queue_counts is not None and isinstance(status.get("queues"), dict):
        ops.queue_counts.add_to(status["queues"])
    return status


def json_response(payload: dict) -> Response:
    return Response(200, "application/json", json.dumps(payload).encode())


# ---------------------------------------------------------------- served by a group
def _admin_handlers(ops: GroupOps) -> dict[str, Handler]:
    """The web page's admin actions (`web_admin = true`), none otherwise."""
    if not ops.server.config.ops.web_admin:
        return {}
    from mrs.ops.admin_actions import AdminActions, AdminServer
    from mrs.ops.web_admin import WebAdmin

    owner = cast(AdminServer, ops.server)
    return WebAdmin(AdminActions(owner), owner.authority).handlers()


async def serve_group_web(
    ops: GroupOps,
    *,
    listeners: list[trio.SocketListener] | None = None,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """The group's own page: this group only (on `listeners` when the server took its
    address before its journals)."""
    server = ops.server
    config = server.config

    history: collections.deque[dict] = collections.deque(maxlen=HISTORY_SAMPLES_MAX)

    def payload() -> dict:
        address = f"{server.address[0]}:{server.address[1]}" if server.address else ""
        return {
            "bus": None,
            "time_s": round(time.time(), 3),
            "groups": [
                {
                    "group": config.id,
                    "name": config.name,
                    "address": address,
                    "up": True,
                    "error": None,
                    "status": _with_queue_counts(server.status_info(), ops),
                }
            ],
        }

    status_answer = SharedBuild(lambda: json_response(payload()), STATUS_BUILD_INTERVAL_S)

    async def api(_query: str) -> Response:
        return await status_answer.get()

    title = f"MRS group {config.id} ({config.name})"
    routes: dict[str, Route] = {
        "/": lambda _q: Response(200, "text/html; charset=utf-8", page_html(title)),
        "/api/status": api,
        "/api/history": lambda _q: json_response({"samples": list(history)}),
        "/healthz": lambda _q: text(200, "ok\n"),
    }
    handlers = _admin_handlers(ops)

    def listening(host: str, port: int) -> None:
        ops.endpoints["web"] = http_url(host, port)
        log.info("group %d web view on %s", config.id, ops.endpoints["web"])

    async with trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(
                serve_endpoint,
                server,
                "web_listen",
                config.ops.web_host,
                config.ops.web_port,
                routes,
                listening,
                handlers=handlers,
                listeners=listeners,
            )
        )
        task_status.started()
        while True:
            history.append(sample_of(payload()))
            await trio.sleep(1.0)
