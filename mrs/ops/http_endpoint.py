"""A tiny read-only HTTP/1.1 server on trio, for /metrics and the web view.

Why not prometheus_client's own server or http.server: those answer from a thread,
and a scrape reads the group's live state (queues, links, journal) which only the
event loop may touch. This one runs in the server's own trio nursery, answers GET
and HEAD only, reads at most HTTP_REQUEST_BYTES_MAX of headers within
HTTP_REQUEST_DEADLINE_S, serves one request per connection and never lets a bad client
disturb the group: every failure closes that connection only.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from mrs.limits import HTTP_CONNECTIONS_MAX, HTTP_REQUEST_BYTES_MAX, HTTP_REQUEST_DEADLINE_S

log = logging.getLogger("mrs.http")



@dataclass(frozen=True, slots=True)
class Response:
    status: int
    content_type: str
    body: bytes


Route = Callable[[str], Response]
"""Called with the query string; returns the response."""

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def text(status: int, body: str) -> Response:
    return Response(status, "text/plain; charset=utf-8", body.encode())


async def serve_http(
    host: str,
    port: int,
    routes: dict[str, Route],
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `routes` (exact paths) on host:port; reports (host, bound port)."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    limiter = trio.CapacityLimiter(HTTP_CONNECTIONS_MAX)
    task_status.started((host, bound))

    async def handle(stream: trio.SocketStream) -> None:
        async with limiter:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                with trio.move_on_after(HTTP_REQUEST_DEADLINE_S):
                    await _answer(stream, routes)
            with contextlib.suppress(Exception), trio.move_on_after(1):
                await stream.aclose()

    await trio.serve_listeners(handle, listeners)


async def _answer(stream: trio.SocketStream, routes: dict[str, Route]) -> None:
    data = b""
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        chunk = await stream.receive_some(HTTP_REQUEST_BYTES_MAX)
        if not chunk:
            return
        data += chunk
        if len(data) > HTTP_REQUEST_BYTES_MAX:
            await _send(stream, text(400, "request too large\n"), head=False)
            return
    request_line = data.split(b"\n", 1)[0].decode("latin-1").strip()
    parts = request_line.split()
    if len(parts) != 3:
        await _send(stream, text(400, "bad request line\n"), head=False)
        return
    method, target, _version = parts
    if method not in ("GET", "HEAD"):
        await _send(stream, text(405, "read-only: GET and HEAD only\n"), head=False)
        return
    path, _, query = target.partition("?")
    route = routes.get(path)
    if route is None:
        response = text(404, f"no such page: {path}; pages: {', '.join(sorted(routes))}\n")
    else:
        try:
            response = route(query)
        except Exception:  # noqa: BLE001 - a broken page must not stop the group
            log.exception("HTTP %s failed", path)
            response = text(500, "internal error (see the group's log)\n")
    await _send(stream, response, head=method == "HEAD")


async def _send(stream: trio.SocketStream, response: Response, *, head: bool) -> None:
    reason = _REASONS.get(response.status, "Error")
    header = (
        f"HTTP/1.1 {response.status} {reason}\r\n"
        f"Content-Type: {response.content_type}\r\n"
        f"Content-Length: {len(response.body)}\r\n"
        "Cache-Control: no-store\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    await stream.send_all(header if head else header + response.body)
