"""A tiny HTTP/1.1 server on trio, for /metrics and the web view.

Why not prometheus_client's own server or http.server: those answer from a thread,
and a scrape reads the group's live state (queues, links, journal) which only the
event loop may touch. This one runs in the server's own trio nursery, answers GET
and HEAD only, reads at most HTTP_REQUEST_BYTES_MAX of headers within
HTTP_REQUEST_DEADLINE_S, serves one request per connection and never lets a bad client
disturb the group: every failure closes that connection only. Read-only unless it is
given `handlers` (the web view's actions, mrs.ops.web_admin): paths answered with the
whole request (headers, cookies, a POST body of at most HTTP_BODY_BYTES_MAX).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from mrs.exit_status import CommandError
from mrs.limits import (
    HTTP_BODY_BYTES_MAX,
    HTTP_CONNECTIONS_MAX,
    HTTP_REQUEST_BYTES_MAX,
    HTTP_REQUEST_DEADLINE_S,
)
from mrs.transport.bind_failure import bind_failure
from mrs.transport.network import CAPACITY_ERRNOS, CAPACITY_SLEEP_S

log = logging.getLogger("mrs.http")


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    """More header lines (Set-Cookie, ...)."""


Route = Callable[[str], Response]
"""Called with the query string; returns the response."""


@dataclass(frozen=True, slots=True)
class Request:
    """One whole request, for a `Handler`."""

    method: str
    path: str
    query: str
    headers: dict[str, str] = field(default_factory=dict)
    """Lower-cased names."""
    body: bytes = b""
    peer: str = "?"

    def cookie(self, name: str) -> str | None:
        for part in self.headers.get("cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return None


Handler = Callable[[Request], Awaitable[Response]]
"""A path answered with the whole request, any method (the web view's actions)."""

_REASONS = {
    200: "OK",
    303: "See Other",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
}


def text(status: int, body: str) -> Response:
    return Response(status, "text/plain; charset=utf-8", body.encode())


async def serve_http(
    host: str,
    port: int,
    routes: dict[str, Route],
    *,
    handlers: dict[str, Handler] | None = None,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `routes` (exact paths, GET and HEAD) and `handlers` (exact paths, any
    method) on host:port; reports (host, bound port)."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    slots = trio.Semaphore(HTTP_CONNECTIONS_MAX)
    task_status.started((host, bound))

    async def handle(stream: trio.SocketStream) -> None:
        try:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                with trio.move_on_after(HTTP_REQUEST_DEADLINE_S):
                    await _answer(stream, routes, handlers or {})
            with contextlib.suppress(Exception), trio.move_on_after(1):
                await stream.aclose()
        finally:
            slots.release()

    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept_within, listener, slots, handle, nursery)


async def _accept_within(
    listener: trio.SocketListener,
    slots: trio.Semaphore,
    handle: Callable[[trio.SocketStream], Awaitable[None]],
    nursery: trio.Nursery,
) -> None:
    """Accept a connection only once one of the HTTP_CONNECTIONS_MAX `slots` is free.

    Why not trio.serve_listeners behind a limiter: it accepts every connection at once
    and parks it until a slot frees, so connections that never send a byte (or never
    read the answer) piled up as open sockets: 1,100 of them took all of a group's
    1,024 descriptors and its clients' connects failed (EMFILE). Past the bound they
    now wait in the kernel's listen backlog and cost the group nothing."""
    while True:
        await slots.acquire()
        try:
            stream = await listener.accept()
        except OSError as error:
            slots.release()
            if error.errno not in CAPACITY_ERRNOS:
                raise
            log.error("HTTP accept: %s; waiting %.1f s", error, CAPACITY_SLEEP_S)
            await trio.sleep(CAPACITY_SLEEP_S)
            continue
        nursery.start_soon(handle, stream)


def endpoint_failure(
    server: Any, key: str, host: str | None, port: int | None, error: OSError
) -> CommandError:
    """The one line for an endpoint of `[group.ops]` (`key`: metrics_listen, web_listen)
    that cannot be bound, naming the file, the group, the key and the address, as the
    group's own `listen` failure does (mrs.transport.bind_failure)."""
    config = server.config
    where = f"{server.bus.path}: group {config.id} ({config.name}) ops.{key} = {host}:{port}"
    return bind_failure(where, key, error)


async def _answer(
    stream: trio.SocketStream, routes: dict[str, Route], handlers: dict[str, Handler]
) -> None:
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
    handler = handlers.get(target.partition("?")[0])
    if handler is not None:
        await _send(stream, await _handled(stream, handler, data, method, target), head=False)
        return
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


async def _handled(
    stream: trio.SocketStream, handler: Handler, data: bytes, method: str, target: str
) -> Response:
    """A handler's answer to the whole request: headers parsed, the body read."""
    head, _, body = data.replace(b"\r\n", b"\n").partition(b"\n\n")
    headers: dict[str, str] = {}
    for line in head.decode("latin-1").split("\n")[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit() or int(length_text) > HTTP_BODY_BYTES_MAX:
        return text(413, f"body over {HTTP_BODY_BYTES_MAX} bytes\n")
    while len(body) < int(length_text):
        chunk = await stream.receive_some(HTTP_BODY_BYTES_MAX)
        if not chunk:
            break
        body += chunk
    path, _, query = target.partition("?")
    try:
        peer = stream.socket.getpeername()
        peer_text = f"{peer[0]}:{peer[1]}"
    except (AttributeError, OSError):
        peer_text = "?"
    request = Request(method, path, query, headers, body[: int(length_text)], peer_text)
    try:
        return await handler(request)
    except Exception:  # noqa: BLE001 - a broken page must not stop the group
        log.exception("HTTP %s %s failed", method, path)
        return text(500, "internal error (see the group's log)\n")


async def _send(stream: trio.SocketStream, response: Response, *, head: bool) -> None:
    reason = _REASONS.get(response.status, "Error")
    extra = "".join(f"{name}: {value}\r\n" for name, value in response.headers)
    header = (
        f"HTTP/1.1 {response.status} {reason}\r\n"
        f"{extra}"
        f"Content-Type: {response.content_type}\r\n"
        f"Content-Length: {len(response.body)}\r\n"
        "Cache-Control: no-store\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    await stream.send_all(header if head else header + response.body)
