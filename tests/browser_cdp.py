"""A real headless Chromium driven over the DevTools protocol on a pipe, for tests that
click through a page (log in, press buttons) rather than only render it.

Why a pipe (`--remote-debugging-pipe`, fds 3 and 4) and not a websocket: nothing to
install and no port to find; each message is JSON ended by a NUL byte.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
from typing import Any

ANSWER_WAIT_S = 60.0
"""How long the browser may take to answer one command (page loads included)."""


class Browser:
    """One headless Chromium with one page; `evaluate` runs script in it."""

    def __init__(self, chromium: str) -> None:
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        self.profile = tempfile.TemporaryDirectory()
        self.process = subprocess.Popen(
            [
                "bash",
                "-c",
                f'exec "$0" "$@" 3<&{to_browser_read} 4>&{from_browser_write}',
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                f"--user-data-dir={self.profile.name}",
                "about:blank",
            ],
            pass_fds=(to_browser_read, from_browser_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._last_id = 0
        self._session: str | None = None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Runtime.enable")

    def call(self, method: str, **params: Any) -> dict:
        """One DevTools command; its result (events on the way are skipped)."""
        self._last_id += 1
        message: dict[str, Any] = {"id": self._last_id, "method": method, "params": params}
        if self._session is not None and not method.startswith("Target."):
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._last_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], ANSWER_WAIT_S)
            if not ready:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed its pipe")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    def evaluate(self, expression: str) -> Any:
        """The value of `expression` in the page (a promise is awaited)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.until("document.readyState === 'complete' && location.href.startsWith('http')")

    def until(self, condition: str) -> None:
        """Wait (in the page, on its own timers) until `condition` is true; after 30 s
        fail with what the page shows (its data attributes and the start of its text),
        so a wait that never ends says why."""
        try:
            self.evaluate(
                "new Promise((done, fail) => { const t0 = Date.now(); const test = () => "
                f"({condition}) ? done(true) : Date.now() - t0 > 30000 ? fail(new Error("
                f"{json.dumps('never: ' + condition)})) : setTimeout(test, 50); test(); }})"
            )
        except RuntimeError as error:
            shown = self.evaluate(
                "JSON.stringify({data: {...document.body.dataset},"
                " text: document.body.innerText.slice(0, 1500)})"
            )
            raise RuntimeError(f"never: {condition}; the page: {shown}") from error

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (EOFError, TimeoutError, RuntimeError, OSError):
            self.process.kill()
        self.process.wait(timeout=30)
        os.close(self._to_browser)
        os.close(self._from_browser)
        self.profile.cleanup()
