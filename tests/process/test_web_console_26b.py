"""The acting web console as an operator at 3 a.m. uses it: dead letters looked at one
by one (why each is there, every header, HTML in them shown as text), the browse
table after a move, a very long queue name, and a page left open on a server slow to
answer. Real `mrs serve` processes and a real headless Chromium (tests/browser_cdp.py);
the slow server is a real HTTP server serving the real page.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import Uma, connect_sync
from mrs.model import DeliveryMode
from mrs.ops.web import page_html
from sim.processes import GroupProcess
from tests.browser_cdp import Browser
from tests.process.test_web_bus_admin import _plain_bus, _web_endpoint
from tests.process.test_web_probes import _chromium

LONG_NAME = "Q" * 127
"""The longest queue name a bus file takes (QUEUE_NAME_CHARS_MAX: `G.NAME` in 256)."""
HOSTILE = '<img src=x onerror="document.body.dataset.pwned = 1">'


@pytest.fixture
def acting_page(tmp_path: Path) -> Iterator[tuple[GroupProcess, Browser]]:
    """Group 1 serving its own acting page (no [auth]), its queue 11 named with 127
    characters, and a Chromium on the page with the Act panel shown."""
    config = _plain_bus(tmp_path, web_admin=True)
    config.write_text(config.read_text().replace('name = "EVENTS1"', f'name = "{LONG_NAME}"'))
    group = GroupProcess(config, 1)
    group.start()
    browser = Browser(_chromium())
    try:
        browser.open(_web_endpoint(group.address))
        browser.until("document.body.dataset.admin === 'acting'")
        browser.until("Number(document.body.dataset.rendered || 0) >= 1")
        yield group, browser
    finally:
        browser.close()
        group.terminate()


def _browse(browser: Browser, queue: str, shown: str) -> None:
    browser.evaluate(
        f"document.getElementById('act-queue').value = {json.dumps(queue)};"
        "document.getElementById('act-browse').click(); true"
    )
    browser.until(f"document.body.dataset.browsed === {json.dumps(shown)}")


def test_a_dead_letter_says_why_and_shows_every_header_as_text(acting_page) -> None:
    """Browsing the DLQ showed each letter's seq, class/type and body's first bytes,
    nothing of why it was dead or where it was going (its dead-letter header was not
    in the browse answer), and no way to see one message's headers: at 3 a.m. the
    operator could not tell which letters to retry. The row now says why, "Look"
    lists the message's fields, headers and dead-letter header, and HTML in a body,
    a header's name or its value is shown as written, never run."""
    group, browser = acting_page
    with connect_sync(group.address, "ORDERS1") as client:
        client.put(
            HOSTILE.encode(), "1.50", delivery=DeliveryMode.WF_DQF, uma=Uma.DLQ,
            headers={HOSTILE: HOSTILE, "order": {"id": 17}},
        )  # fmt: skip
    _browse(browser, "DLQ", "1.96:1")
    why = browser.evaluate("document.querySelector('[data-key=\"dead.0\"]')?.textContent")
    browser.evaluate("document.querySelector('[data-look=\"0\"]').click(); true")
    browser.until("document.body.dataset.looked !== undefined")
    field = "document.querySelector('[data-key=\"msg.{}\"]')?.textContent"
    looked = {
        name: browser.evaluate(field.format(name.replace('"', '\\\\"')))
        for name in (
            "body (first 64 bytes)", f"header {HOSTILE}", "header order",
            "dead letter mrs_status_name", "dead letter dest_q_name", "dead letter text",
        )
    }  # fmt: skip
    injected = browser.evaluate(
        "[document.body.dataset.pwned, document.querySelectorAll('#admin img').length]"
    )
    assert why == "NO_DQF: no DQF for target 1.50 (was for 1.50)", why
    assert looked == {
        "body (first 64 bytes)": HOSTILE,
        f"header {HOSTILE}": HOSTILE,
        "header order": '{"id":17}',
        "dead letter mrs_status_name": "NO_DQF",
        "dead letter dest_q_name": "50",
        "dead letter text": "no DQF for target 1.50",
    }, looked
    assert injected == [None, 0], injected


def test_a_move_empties_the_browse_table_it_made_stale(acting_page) -> None:
    """After a browse of 60 orders and a move of them all, the page said "moved 60 ...
    0 left" above the first page of them as if they still waited there, and "Next
    page" went on from one that had gone. The table is emptied with "Next page"
    hidden; a browse of the target (a 127-character name) shows them there, and the
    page stays as wide as the window (such a name stretched it past it)."""
    group, browser = acting_page
    with connect_sync(group.address, "ORDERS1") as client:
        for i in range(60):
            client.put(f"order {i}".encode(), "1.10", delivery=DeliveryMode.WF_DQF)
    _browse(browser, "ORDERS1", "1.10:50")
    browser.evaluate(
        f"document.getElementById('act-target').value = {json.dumps(LONG_NAME)};"
        "document.getElementById('act-move').click(); true"
    )
    browser.until("document.getElementById('act-result').textContent.startsWith('moved')")
    after_move = browser.evaluate(
        "[document.querySelectorAll('#act-table tbody tr').length,"
        " document.getElementById('act-next').hidden]"
    )
    said = browser.evaluate("document.getElementById('act-result').textContent")
    _browse(browser, LONG_NAME, "1.11:50")
    widths = browser.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert said == "moved 60 from 1.10 to 1.11; 0 left", said
    assert after_move == [0, True], after_move
    assert widths[0] <= widths[1], widths


class QuietHandler(http.server.BaseHTTPRequestHandler):
    """A fake page server's handler: answers whole bodies, logs no request line."""

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:  # no request lines on stderr
        pass


class _SlowStatus(QuietHandler):
    """The real page, and a /api/status whose second answer waits for `release`;
    `asked` counts the status requests and `second`/`third` mark their arrival."""

    asked = 0
    second = threading.Event()
    third = threading.Event()
    release = threading.Event()
    lock = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/":
            self._send(page_html("slow"), "text/html; charset=utf-8")
        elif self.path == "/api/history":
            self._send(b'{"samples": []}', "application/json")
        elif self.path == "/api/status":
            with self.lock:
                type(self).asked += 1
                number = self.asked
            if number == 2:
                self.second.set()
                self.release.wait(60)
            elif number == 3:
                self.third.set()
            self._send(b'{"groups": [], "time_s": 1}', "application/json")
        else:
            self.send_error(404)



def test_a_page_asks_a_slow_server_one_request_at_a_time() -> None:
    """The page polled /api/status with setInterval: a server slower than 2 s to
    answer (a group busy or stopped) was asked again every 2 s all the same, so a
    page left open held the browser's six connections to it and queued one request
    more every 2 s, all sent at once when it answered. The page now asks again only
    2 s after an answer. Here the second answer is held 5 s (two and a half periods):
    no third request may come meanwhile."""
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowStatus) as site:
        threading.Thread(target=site.serve_forever, daemon=True).start()
        browser = Browser(_chromium())
        try:
            browser.open(f"http://127.0.0.1:{site.server_address[1]}/")
            assert _SlowStatus.second.wait(30), "the page never asked a second time"
            overlapped = _SlowStatus.third.wait(5)
            _SlowStatus.release.set()
            browser.until("Number(document.body.dataset.rendered || 0) >= 2")
        finally:
            _SlowStatus.release.set()
            browser.close()
            site.shutdown()
    assert not overlapped, "a third status request came while the second was unanswered"
