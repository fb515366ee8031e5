"""`mrs web`: the web view of a whole bus, asking every group like `mrs status`;
read-only unless `--admin` (then it acts on any group: mrs.tools.web_actions).

The page and the group's own view live in mrs/ops/web.py (a group serves it itself);
this is the bus-wide server an operator starts from the shell.
"""

from __future__ import annotations

import argparse
import collections
import functools
import time
from typing import TYPE_CHECKING

import trio

from mrs.offline.journal_files import operator_path
from mrs.ops.http_endpoint import Response, http_url, serve_http, text
from mrs.ops.web import (
    BUS_CACHE_S,
    HISTORY_SAMPLES_MAX,
    WEB_LISTEN_DEFAULT,
    json_response,
    page_html,
    sample_of,
)
from mrs.tools.cli_support import GROUP_ANSWER_S_MAX, GROUP_ANSWER_S_MIN, seconds_in
from mrs.transport.bind_failure import bind_failure

if TYPE_CHECKING:
    from mrs.tools.web_actions import BusWebAdmin


def add_web_parser(commands: argparse._SubParsersAction, run) -> None:
    web = commands.add_parser(
        "web",
        help="serve a web view of the whole bus (status tables, live charts; --admin: actions)",
        description="Serve the bus status page on --listen; it asks every group of "
        "--config for its status, like `mrs status`. See docs/operations.md.",
    )
    web.add_argument("--config", type=operator_path, required=True, help="bus configuration (TOML)")
    web.add_argument(
        "--listen", default=WEB_LISTEN_DEFAULT, help="HOST:PORT to serve on (port 0: any free)"
    )
    web.add_argument(
        # > 0 and bounded, as `mrs status --timeout`: 0, a negative, nan or inf was
        # taken, and the page showed every group DOWN or REFUSED while they served;
        # 1e308 left a poll waiting for good on a group that never answered
        "--timeout",
        type=seconds_in(GROUP_ANSWER_S_MIN, GROUP_ANSWER_S_MAX),
        default=3.0,
        help=f"seconds to wait for each group's status, "
        f"{GROUP_ANSWER_S_MIN:g}..{GROUP_ANSWER_S_MAX:g}",
    )
    web.add_argument(
        "--admin",
        action="store_true",
        help="the page acts too (browse, purge, move, connections, limits, queues, grants) "
        "on any group, behind a login under [auth]; read-only without it",
    )
    web.set_defaults(run=run)


def _bus_admin(args: argparse.Namespace, views: list) -> BusWebAdmin | None:
    """With --admin, the login and action endpoints (mrs.tools.web_actions); None
    without it (the page stays read-only)."""
    if not args.admin:
        return None
    from mrs.config.bus import load_config
    from mrs.tools.web_actions import BusWebAdmin

    return BusWebAdmin(load_config(args.config), views)


def _listen_address(text: str) -> tuple[str, int]:
    """--listen as (host, port), read as the bus file reads `web_listen`
    (mrs.config.addresses.parse_host_port), refused in the same words."""
    from mrs.config.addresses import parse_host_port
    from mrs.tools.cli_support import EXIT_USAGE, CommandError

    address = parse_host_port(text)
    if isinstance(address, str):
        raise CommandError(f"--listen: {address}", EXIT_USAGE)
    return address


def run_web(args: argparse.Namespace) -> int:
    from mrs.tools.bus_status import bus_json, fetch_all, targets_from_args

    host, port = _listen_address(args.listen)
    status_args = argparse.Namespace(address=None, config=args.config, group=None)
    views, bus_path = targets_from_args(status_args)
    cache: dict = {"time": 0.0, "payload": None}
    admin = _bus_admin(args, views)
    handlers = admin.handlers() if admin is not None else {}

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
                if admin is not None:
                    admin.forget_expired()  # a login's password, 8 hours on, with no request
                await trio.sleep(BUS_CACHE_S)

        def api(_query: str) -> Response:
            return json_response(latest.get("payload") or {"groups": [], "bus": str(bus_path)})

        routes = {
            "/": lambda _q: Response(
                200, "text/html; charset=utf-8", page_html(f"MRS bus {bus_path}")
            ),
            "/api/status": api,
            "/api/history": lambda _q: json_response({"samples": list(history)}),
            "/healthz": lambda _q: text(200, "ok\n"),
        }
        async with trio.open_nursery() as nursery:
            latest["payload"] = await refresh()
            nursery.start_soon(poller)
            try:
                bound_host, bound_port = await nursery.start(
                    functools.partial(serve_http, handlers=handlers), host, port, routes
                )
            except OSError as error:
                raise bind_failure(f"mrs web --listen {args.listen}", "--listen", error) from None
            print(f"WEB {http_url(bound_host, bound_port)}", flush=True)

    try:
        trio.run(main)
    except KeyboardInterrupt:
        return 0
    return 0
