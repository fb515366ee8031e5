"""A tiny HTTP/1.1 server on trio, for /metrics and the web view.

Why not prometheus_client's own server or http.server: those answer from a thread,
and a scrape reads the group's live state (queues, links, journal) which only the
event loop may touch. This one runs in the server's own trio nursery, answers GET
and HEAD only, reads at most HTTP_REQUEST_BYTES_MAX of headers within
HTTP_REQUEST_DEADLINE_S, serves one request per connection and never lets a bad client
disturb the group: every failure closes that connection only (any exception in
answering one is logged, never raised into the group's nursery). Read-only unless it is
given `handlers` (the web view's actions, mrs.ops.web_admin): paths answered with the
whole request (headers, cookies, a POST body of at most HTTP_BODY_BYTES_MAX).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import ipaddress
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import trio

from mrs.config.addresses import host_port
from mrs.exit_status import CommandError
from mrs.limits import (
    ADMIN_REQUEST_WAIT_S,
    ENDPOINT_BIND_RETRY_S,
    HTTP_BODY_BYTES_MAX,
    HTTP_CONNECTIONS_MAX,
    HTTP_REQUEST_BYTES_MAX,
    HTTP_REQUEST_DEADLINE_S,
)
from mrs.transport.bind_failure import bind_failure
from mrs.transport.network import CAPACITY_ERRNOS, CAPACITY_SLEEP_S
from mrs.transport.open_files import OutOfFilesLog

log = logging.getLogger("mrs.http")


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    """More header lines (Set-Cookie, ...)."""


Route = Callable[[str], "Response | Awaitable[Response]"]
"""Called with the query string; returns the response (or awaits it: a `SharedBuild`)."""

T = TypeVar("T")


@dataclass(slots=True)
class _Pending(Generic[T]):
    """The next build, which every asker that arrives before it is made shares."""

    done: trio.Event = field(default_factory=trio.Event)
    value: T | None = None
    error: BaseException | None = None


class SharedBuild(Generic[T]):
    """`build()` at most once per `interval_s`; askers share the next build.

    Why not a cache of the last answer: a user who acts (a put, a purge) and then asks
    must see the result of the act. Every asker gets a value built after it asked;
    askers that come while the next build waits for its turn share it, so a flood of
    askers costs the loop one build per interval, not one per asker."""

    def __init__(self, build: Callable[[], T], interval_s: float) -> None:
        self._build = build
        self._interval_s = interval_s
        self._last_s = -math.inf
        self._pending: _Pending[T] | None = None
        self.builds = 0
        """How many times `build` ran (for tests and the curious)."""

    async def get(self) -> T:
        pending = self._pending
        if pending is None:
            pending = self._pending = _Pending()
            await self._build_for(pending)
        else:
            await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.value  # type: ignore[return-value]  # set when no error

    async def _build_for(self, pending: _Pending[T]) -> None:
        """Wait for the interval (shielded: the askers sharing this build must not be
        left waiting for a build that a cancelled first asker never made), build once."""
        wait_s = self._last_s + self._interval_s - trio.current_time()
        if wait_s > 0:
            with trio.CancelScope(shield=True):
                await trio.sleep(wait_s)
        self._pending = None
        try:
            pending.value = self._build()
        except Exception as error:  # noqa: BLE001 - each asker answers it (a 500)
            pending.error = error
        finally:
            self.builds += 1
            self._last_s = trio.current_time()
            pending.done.set()


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
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


_GUARDS = (
    "X-Frame-Options: DENY\r\n"
    "Content-Security-Policy: frame-ancestors 'none'\r\n"
    "X-Content-Type-Options: nosniff\r\n"
)
"""On every answer. Why: a page of another origin could show the console in a frame
under its own decoy buttons and have the operator click Purge (clickjacking); the
browser now refuses to frame it. nosniff: a text answer is never run as HTML."""


def http_url(host: str, port: int) -> str:
    """The page's address as a browser takes it: an IPv6 host in brackets."""
    return f"http://{host_port(host, port)}/"


ANY_PATH = "*"
"""A route under this key answers every path no other route names (a group that is
recovering: mrs.ops.recovering)."""


def text(status: int, body: str) -> Response:
    return Response(status, "text/plain; charset=utf-8", body.encode())


async def serve_http(
    host: str,
    port: int,
    routes: dict[str, Route],
    *,
    handlers: dict[str, Handler] | None = None,
    listeners: list[trio.SocketListener] | None = None,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `routes` (exact paths, GET and HEAD) and `handlers` (exact paths, any
    method) on host:port, or on `listeners` already bound there (`bind_endpoint`);
    reports (host, bound port)."""
    if listeners is None:
        listeners = await bind_endpoint(host, port)
    bound = listeners[0].socket.getsockname()[1]
    slots = _process_slots()
    local_only = all(_loopback(listener.socket.getsockname()[0]) for listener in listeners)
    task_status.started((host, bound))

    async def handle(stream: trio.SocketStream) -> None:
        try:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await _answer(stream, routes, handlers or {}, local_only=local_only)
        except Exception:  # noqa: BLE001 - one request's fault closes that connection only
            log.exception("HTTP request failed")
        finally:
            with contextlib.suppress(Exception), trio.move_on_after(1):
                await stream.aclose()
            slots.release()

    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept_within, listener, slots, handle, nursery)


async def bind_endpoint(host: str | None, port: int) -> list[trio.SocketListener]:
    """Take an endpoint's address (every address `host` resolves to), as `serve_http`
    serves it; OSError when it cannot be bound."""
    return await trio.open_tcp_listeners(port, host=host)


_SLOTS: trio.lowlevel.RunVar[trio.Semaphore] = trio.lowlevel.RunVar("mrs_http_slots")


def _process_slots() -> trio.Semaphore:
    """The HTTP_CONNECTIONS_MAX connections every endpoint of this process (the
    metrics and the web view of a group) holds in all. Why one bound, not one each:
    the server keeps OPEN_FILES_KEPT_MIN descriptors for itself, counting
    HTTP_CONNECTIONS_MAX web requests; with two endpoints each holding that many idle
    connections, a group limited to 200 descriptors ran out (EMFILE) while admitting
    the clients it thought it had room for, and could accept no one."""
    try:
        return _SLOTS.get()
    except LookupError:
        slots = trio.Semaphore(HTTP_CONNECTIONS_MAX)
        _SLOTS.set(slots)
        return slots


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
    host, port = listener.socket.getsockname()[:2]
    out_of_files = OutOfFilesLog(log, f"HTTP {http_url(host, port)}")
    while True:
        await slots.acquire()
        try:
            stream = await listener.accept()
        except OSError as error:
            slots.release()
            if error.errno not in CAPACITY_ERRNOS:
                raise
            out_of_files.failed(error)
            await trio.sleep(CAPACITY_SLEEP_S)
            continue
        out_of_files.accepted()
        nursery.start_soon(handle, stream)


def endpoint_failure(
    server: Any, key: str, host: str | None, port: int | None, error: OSError
) -> CommandError:
    """The one line for an endpoint of `[group.ops]` (`key`: metrics_listen, web_listen)
    that cannot be bound, naming the file, the group, the key and the address, as the
    group's own `listen` failure does (mrs.transport.bind_failure)."""
    config = server.config
    address = host_port(str(host), str(port))
    where = f"{server.bus.path}: group {config.id} ({config.name}) ops.{key} = {address}"
    return bind_failure(where, key, error)


async def serve_endpoint(
    server: Any,
    key: str,
    host: str | None,
    port: int | None,
    routes: Mapping[str, Route],
    listening: Callable[[str, int], None],
    *,
    handlers: dict[str, Handler] | None = None,
    listeners: list[trio.SocketListener] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve one `[group.ops]` endpoint (`key`: metrics_listen, web_listen) on
    `listeners` when the server took its address before its journals
    (mrs.ops.group_ops.GroupOps.bind_endpoints), else on a bind of its own; calls
    `listening(host, bound port)` once it listens.

    A port it cannot take fails the group's start in one line (`endpoint_failure`).
    Not on a replicated group: there it starts at a promotion, and the old active may
    still hold the port (paused on the same host, it answers nothing until it is
    resumed and steps down). That failure used to end the new active, and with it the
    failover: no instance served the group because a port for scrapes was taken. The
    active now serves messages without the endpoint, says so in one WARNING, and takes
    the port once it is free."""
    replicated = bool(getattr(server.config, "instances", None))
    warned = False
    async with trio.open_nursery() as nursery:
        while True:
            try:
                bound = await nursery.start(
                    functools.partial(serve_http, handlers=handlers, listeners=listeners),
                    host,
                    port,
                    routes,
                )
                break
            except OSError as error:
                failure = endpoint_failure(server, key, host, port, error)
                if not replicated:
                    raise failure from None
                if not warned:
                    log.warning(
                        "%s; the active serves messages without it and tries again every %g s",
                        failure,
                        ENDPOINT_BIND_RETRY_S,
                    )
                    warned = True
                    task_status.started()
            await trio.sleep(ENDPOINT_BIND_RETRY_S)
        listening(*bound)
        if warned:
            log.info("ops.%s = %s: listening now", key, host_port(str(host), bound[1]))
        else:
            task_status.started()


HANDLER_WAIT_S = ADMIN_REQUEST_WAIT_S + HTTP_REQUEST_DEADLINE_S
"""How long a handler (an action, a login) may take before the asker is told so: longer
than the action's own wait, so its own one-line answer comes first."""


async def _answer(
    stream: trio.SocketStream,
    routes: dict[str, Route],
    handlers: dict[str, Handler],
    *,
    local_only: bool,
) -> None:
    """Read the request within HTTP_REQUEST_DEADLINE_S, then answer it. Why two bounds:
    a slow client must not hold a slot, but an action on a slow group may take longer
    than reading a request does, and it is owed an answer rather than a closed socket."""
    received: Request | Response | None = None
    with trio.move_on_after(HTTP_REQUEST_DEADLINE_S):
        received = await _receive(stream, handlers, local_only=local_only)
    if received is None:
        return
    if isinstance(received, Response):
        response, head = received, False
    elif received.path in handlers:
        # HEAD is answered as GET is, without the body (RFC 9110): a handler's path
        # sent its body too, which a client reads as the start of its next answer
        response = await _handled(handlers[received.path], received)
        head = received.method == "HEAD"
    else:
        response, head = await _routed(routes, received), received.method == "HEAD"
    with trio.move_on_after(HTTP_REQUEST_DEADLINE_S):
        await _send(stream, response, head=head)
    if isinstance(received, Response):
        await _linger(stream)


LINGER_S = 1.0
LINGER_BYTES_MAX = 1 << 20
"""What an answer given before the request was read whole (400 too large, 413) waits
for the rest of it at most, and reads of it at most, before the connection closes."""


async def _linger(stream: trio.SocketStream) -> None:
    """Say this side is done (FIN), then read and drop what the client still sends,
    for LINGER_S or LINGER_BYTES_MAX at most. Why: closed with bytes of the request
    unread, the socket sends a TCP reset, and a client across a network may lose the
    answer it was owed (the 400 saying why) to it before reading it."""
    with (
        trio.move_on_after(LINGER_S),
        contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
    ):
        await stream.send_eof()
        drained = 0
        while drained < LINGER_BYTES_MAX:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            drained += len(chunk)


async def _receive(
    stream: trio.SocketStream, handlers: dict[str, Handler], *, local_only: bool
) -> Request | Response | None:
    """The request (with its headers and body for a handler's path), or the error
    response for a malformed one; None if the client closed first."""
    data = b""
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        chunk = await stream.receive_some(HTTP_REQUEST_BYTES_MAX)
        if not chunk:
            return None
        data += chunk
        if len(data) > HTTP_REQUEST_BYTES_MAX:
            return text(400, "request too large\n")
        if not _may_start_http(data):
            return text(400, "not an HTTP request (the group's MRS port is its listen)\n")
    request_line = data.split(b"\n", 1)[0].decode("latin-1").strip()
    parts = request_line.split()
    if len(parts) != 3:
        return text(400, "bad request line\n")
    method, target, _version = parts
    path, _, query = target.partition("?")
    if path not in handlers:
        return Request(method, path, query)
    head, _, body = data.replace(b"\r\n", b"\n").partition(b"\n\n")
    headers: dict[str, str] = {}
    for line in head.decode("latin-1").split("\n")[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    foreign = _foreign_host(headers.get("host"), local_only)
    if foreign is not None:
        return text(403, foreign)
    length = _content_length(headers.get("content-length", "0"))
    if length is None:
        return text(400, "Content-Length must be a number of bytes\n")
    if length > HTTP_BODY_BYTES_MAX:
        return text(413, f"body over {HTTP_BODY_BYTES_MAX} bytes\n")
    while len(body) < length:
        chunk = await stream.receive_some(HTTP_BODY_BYTES_MAX)
        if not chunk:
            break
        body += chunk
    return Request(method, path, query, headers, body[:length], _peer(stream))


def _may_start_http(data: bytes) -> bool:
    """False when the first byte cannot begin a request line (a method is upper-case
    letters; blank lines may come first). Why: an MRS client given a group's
    metrics_listen or web_listen by mistake sends a binary Hello and waits; the page
    waited for a blank line until its deadline, so `mrs status` said "no answer within
    3 s; is it running?" of a group that was running. Answered at once, the client
    reads "HTTP" and `mrs status` names the mistake."""
    first = data.lstrip(b"\r\n")[:1]
    return not first or b"A" <= first <= b"Z"


def _content_length(value: str) -> int | None:
    """The header's byte count, or None unless it is plain ASCII digits. Why not
    str.isdigit: it takes '²' (latin-1 0xB2), which int() refuses, and that one
    request used to stop the whole group."""
    if not value or len(value) > 12 or not all("0" <= c <= "9" for c in value):
        return None
    return int(value)


def _loopback(name: str) -> bool:
    """True for a loopback address or a name that can only mean this host."""
    name = name.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name.partition("%")[0]).is_loopback
    except ValueError:
        return False


def _foreign_host(host_header: str | None, local_only: bool) -> str | None:
    """Why an action must be refused for its Host header, or None. Why: a web page can
    point a name of its own at 127.0.0.1 (DNS rebinding) and then be the console's
    "same origin": without [auth] it could take a session and purge. A console that
    listens on loopback only is reached by loopback names only (an SSH tunnel's
    localhost:9000 included), so any other name is such a page, or a proxy that
    forwards its public Host (it should send the upstream's)."""
    if not local_only or host_header is None:
        return None
    name = host_header.strip()
    if name.startswith("["):
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    if _loopback(name):
        return None
    return (
        f"Host {host_header!r} is not a loopback name and this console listens on "
        "loopback only: actions refused (DNS rebinding guard; a proxy must send the "
        "upstream's Host)\n"
    )


def _peer(stream: trio.SocketStream) -> str:
    try:
        peer = stream.socket.getpeername()
        return f"{peer[0]}:{peer[1]}"
    except (AttributeError, OSError):
        return "?"


async def _routed(routes: dict[str, Route], request: Request) -> Response:
    """A read-only page's answer (GET and HEAD only); an ANY_PATH route answers every
    method. Why: while a group recovers, its acting page's POST (an operator's Purge in
    a page left open across the restart) was answered 405 "read-only: GET and HEAD
    only", as if web_admin were off, instead of the 503 "recovering" line."""
    route = routes.get(request.path)
    if request.method not in ("GET", "HEAD") and (route is not None or ANY_PATH not in routes):
        return text(405, "read-only: GET and HEAD only\n")
    route = route or routes.get(ANY_PATH)
    if route is None:
        return text(404, f"no such page: {request.path}; pages: {', '.join(sorted(routes))}\n")
    try:
        answer = route(request.query)
        return await answer if inspect.isawaitable(answer) else answer
    except Exception:  # noqa: BLE001 - a broken page must not stop the group
        log.exception("HTTP %s failed", request.path)
        return text(500, "internal error (see the group's log)\n")


async def _handled(handler: Handler, request: Request) -> Response:
    """A handler's answer within HANDLER_WAIT_S; a failure is one line, never a
    closed connection."""
    with trio.move_on_after(HANDLER_WAIT_S):
        try:
            return await handler(request)
        except Exception:  # noqa: BLE001 - a broken page must not stop the group
            log.exception("HTTP %s %s failed", request.method, request.path)
            return text(500, "internal error (see the group's log)\n")
    return text(504, f"no answer within {HANDLER_WAIT_S:.0f} s\n")


async def _send(stream: trio.SocketStream, response: Response, *, head: bool) -> None:
    reason = _REASONS.get(response.status, "Error")
    extra = "".join(f"{name}: {value}\r\n" for name, value in response.headers)
    header = (
        f"HTTP/1.1 {response.status} {reason}\r\n"
        f"{extra}"
        f"Content-Type: {response.content_type}\r\n"
        f"Content-Length: {len(response.body)}\r\n"
        "Cache-Control: no-store\r\n"
        f"{_GUARDS}"
        "Connection: close\r\n\r\n"
    ).encode()
    await stream.send_all(header if head else header + response.body)
