"""A small read-only web view of a bus or a group: the status tables and live charts.

Why: operators coming from RabbitMQ open a management page first. This one is
served either by one group (`[group.ops] web_listen`, showing that group) or by
`mrs web --config bus.toml` (asking every group, like `mrs status`). The page is
one self-contained HTML file (no CDN: it works on an air-gapped host) that polls
`/api/status` — the same JSON as `mrs status --json --config` — every two seconds
and draws rates, backlogs and latency from successive samples. Nothing on the page
can change the bus: the endpoint answers GET and HEAD only.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from mrs.http_endpoint import Response, serve_http, text

if TYPE_CHECKING:
    from mrs.group_ops import GroupOps

log = logging.getLogger("mrs.web")

WEB_LISTEN_DEFAULT = "127.0.0.1:8100"
BUS_CACHE_S = 1.0
"""`mrs web` asks the groups at most once a second however many pages are open."""


def page_html(title: str) -> bytes:
    """The page (mrs/web_page.html: HTML, CSS and script in one file) for `title`."""
    page = resources.files("mrs").joinpath("web_page.html").read_text(encoding="utf-8")
    return page.replace("__TITLE__", _escape(title)).encode()


def _escape(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


HISTORY_SAMPLES_MAX = 180
"""Samples kept for the charts (one a second: the last three minutes)."""


def sample_of(payload: dict) -> dict:
    """One point of the live charts from a bus status payload."""
    batches = saf = depth = 0
    latencies = []
    for view in payload.get("groups", []):
        status = view.get("status")
        if not status:
            continue
        writer = status.get("writer") or {}
        batches += writer.get("batches", 0)
        if writer.get("commits"):
            latencies.append(writer.get("commit_time_ms_mean", 0.0))
        saf += sum(link.get("saf_backlog", 0) for link in (status.get("links") or {}).values())
        depth += sum(queue.get("pending", 0) for queue in (status.get("queues") or {}).values())
    return {
        "t": payload.get("time_s", time.time()),
        "batches": batches,
        "saf": saf,
        "lat_ms": sum(latencies) / len(latencies) if latencies else 0.0,
        "depth": depth,
    }


def _json_response(payload: dict) -> Response:
    return Response(200, "application/json", json.dumps(payload).encode())


# ---------------------------------------------------------------- served by a group
async def serve_group_web(ops: GroupOps, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """The group's own page: this group only."""
    server = ops.server
    config = server.config

    history: collections.deque[dict] = collections.deque(maxlen=HISTORY_SAMPLES_MAX)

    def payload() -> dict:
        address = f"{server.address[0]}:{server.address[1]}" if server.address else ""
        return (
            {
                "bus": None,
                "time_s": round(time.time(), 3),
                "groups": [
                    {
                        "group": config.id,
                        "name": config.name,
                        "address": address,
                        "up": True,
                        "error": None,
                        "status": server.status_info(),
                    }
                ],
            }
        )

    def api(_query: str) -> Response:
        return _json_response(payload())

    title = f"MRS group {config.id} ({config.name})"
    routes = {
        "/": lambda _q: Response(200, "text/html; charset=utf-8", page_html(title)),
        "/api/status": api,
        "/api/history": lambda _q: _json_response({"samples": list(history)}),
        "/healthz": lambda _q: text(200, "ok\n"),
    }
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(
            serve_http, config.ops.web_host, config.ops.web_port, routes
        )
        ops.endpoints["web"] = f"http://{host}:{port}/"
        log.info("group %d web view on http://%s:%d/", config.id, host, port)
        task_status.started()
        while True:
            history.append(sample_of(payload()))
            await trio.sleep(1.0)


# ---------------------------------------------------------------- `mrs web`
def add_web_parser(commands: argparse._SubParsersAction, run) -> None:
    web = commands.add_parser(
        "web",
        help="serve a read-only web view of the whole bus (status tables and live charts)",
        description="Serve the bus status page on --listen; it asks every group of "
        "--config for its status, like `mrs status`. See docs/operations.md.",
    )
    web.add_argument("--config", type=Path, required=True, help="bus configuration (TOML)")
    web.add_argument(
        "--listen", default=WEB_LISTEN_DEFAULT, help="HOST:PORT to serve on (port 0: any free)"
    )
    web.add_argument(
        "--timeout", type=float, default=3.0, help="seconds to wait for each group's status"
    )
    web.set_defaults(run=run)


def run_web(args: argparse.Namespace) -> int:
    from mrs.bus_status import bus_json, fetch_all, targets_from_args
    from mrs.cli_support import EXIT_USAGE, CommandError

    host, _, port_text = args.listen.rpartition(":")
    if not host or not port_text.isdigit() or int(port_text) > 65535:
        raise CommandError(f"--listen must be HOST:PORT, got {args.listen!r}", EXIT_USAGE)
    status_args = argparse.Namespace(address=None, config=args.config, group=None)
    views, bus_path = targets_from_args(status_args)
    cache: dict = {"time": 0.0, "payload": None}

    async def main() -> None:
        lock = trio.Lock()

        async def refresh() -> dict:
            async with lock:
                if cache["payload"] is None or time.monotonic() - cache["time"] > BUS_CACHE_S:
                    for view in views:
                        view.status = None
                        if not (view.error and "listen port is 0" in view.error):
                            view.error = None
                    await fetch_all(views, args.timeout)
                    cache["payload"] = bus_json(views, bus_path, single=False)
                    cache["time"] = time.monotonic()
                return cache["payload"]

        latest: dict = {}
        history: collections.deque[dict] = collections.deque(maxlen=HISTORY_SAMPLES_MAX)

        async def poller() -> None:
            while True:
                latest["payload"] = await refresh()
                history.append(sample_of(latest["payload"]))
                await trio.sleep(BUS_CACHE_S)

        def api(_query: str) -> Response:
            return _json_response(latest.get("payload") or {"groups": [], "bus": str(bus_path)})

        routes = {
            "/": lambda _q: Response(
                200, "text/html; charset=utf-8", page_html(f"MRS bus {bus_path}")
            ),
            "/api/status": api,
            "/api/history": lambda _q: _json_response({"samples": list(history)}),
            "/healthz": lambda _q: text(200, "ok\n"),
        }
        async with trio.open_nursery() as nursery:
            latest["payload"] = await refresh()
            nursery.start_soon(poller)
            try:
                bound_host, bound_port = await nursery.start(
                    serve_http, host, int(port_text), routes
                )
            except OSError as error:
                raise CommandError(
                    f"--listen {args.listen}: cannot listen ({error.strerror or error})", 1
                ) from None
            print(f"WEB http://{bound_host}:{bound_port}/", flush=True)

    try:
        trio.run(main)
    except KeyboardInterrupt:
        return 0
    return 0
