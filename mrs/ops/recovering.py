"""While a group opens its journals and recovers, its `[group.ops]` endpoints
(metrics_listen, web_listen) answer every request at once with 503 and one line that
starts "recovering", instead of holding it unanswered.

Why: the server binds those ports before its journals (mrs.ops.group_ops
`bind_endpoints`) but serves them from its event loop, and recovery runs on that
loop's thread without yielding (the journal check in a child, the boot epoch's
fsync, the scan of a million DQF keys or SAF records): a Prometheus scrape during a
long recovery timed out (`up` = 0 with no reason) and `mrs status` said only "no
answer". Why a thread: the recovery cannot be cut into steps that yield to a loop,
so these answers need a loop of their own; it runs `serve_http` (the endpoints' one
HTTP path) on duplicates of the held sockets, and is started and joined by the
server around its recovery (`GroupServer.run`). The client port is left as it was:
the kernel holds a connection there in its listen backlog and the group serves it
once recovery ends, so an application that connects during a restart waits for it
within its connect_timeout_s rather than being refused.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterable
from types import TracebackType

import trio

from mrs.ops.http_endpoint import ANY_PATH, Response, serve_http, text

log = logging.getLogger("mrs.http")

RECOVERING_WORD = "recovering"
"""The first word of the answer's body, which `mrs status` looks for."""


class RecoveringAnswers:
    """`with RecoveringAnswers(descriptors, who):` the listening sockets answer
    "recovering" inside the block. None given: nothing runs (no thread)."""

    def __init__(self, descriptors: Iterable[int], who: str) -> None:
        self._sockets = [socket.socket(fileno=os.dup(fd)) for fd in descriptors]
        self._who = who
        self._since_s = time.monotonic()
        self._since_text = time.strftime("%H:%M:%S")
        self._ready = threading.Event()
        self._stop: tuple[trio.lowlevel.TrioToken, trio.CancelScope] | None = None
        self._thread = threading.Thread(target=self._run, name="mrs-recovering", daemon=True)

    def __enter__(self) -> RecoveringAnswers:
        if self._sockets:
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._sockets:
            self._ready.wait()
            if self._stop is not None:
                token, scope = self._stop
                token.run_sync_soon(scope.cancel)
            self._thread.join()
        for sock in self._sockets:
            sock.close()  # a duplicate: the server's own socket still listens

    def answer(self, _query: str) -> Response:
        seconds = time.monotonic() - self._since_s
        return text(
            503,
            f"{RECOVERING_WORD}: {self._who} is opening its journals and recovering its "
            f"messages since {self._since_text} ({seconds:.0f} s); it answers once that ends\n",
        )

    def _run(self) -> None:
        try:
            trio.run(self._serve)
        except Exception:  # noqa: BLE001 - the start goes on; scrapes wait as before
            log.exception("the endpoints could not answer while recovering")
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        with trio.CancelScope() as scope:
            self._stop = (trio.lowlevel.current_trio_token(), scope)
            self._ready.set()
            listeners = [
                trio.SocketListener(trio.socket.from_stdlib_socket(sock)) for sock in self._sockets
            ]
            await serve_http("", 0, {ANY_PATH: self.answer}, listeners=listeners)
