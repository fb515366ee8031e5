"""The acting web console probed as an operator at 3 a.m. (thirty-third session): a
double click, a group that restarts or stops answering under an open page. Real `mrs
serve` processes and a real headless Chromium (tests/browser_cdp.py); the group that
never answers is a real HTTP server serving the real page.
"""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from clients import PutItem, connect_sync
from mrs.model import DeliveryMode
from mrs.ops.web import page_html
from sim.processes import GroupProcess
from tests.browser_cdp import Browser
from tests.process.test_status_recovering_25 import _bus_file, _serving
from tests.process.test_web_bus_admin import _plain_bus, _web_endpoint, journal_of
from tests.process.test_web_console_26b import QuietHandler
from tests.process.test_web_probes import _chromium


@contextmanager
def _acting_page(tmp_path: Path, puts: list[PutItem]) -> Iterator[Browser]:
    """A group with `web_admin` holding `puts` (from 1.1, ORDERS1), and its page open
    in a real browser, ready to act; both stopped at the end."""
    group = GroupProcess(_plain_bus(tmp_path, web_admin=True), 1)
    group.start()
    browser = Browser(_chromium())
    try:
        with connect_sync(group.address, "ORDERS1") as client:
            client.put_many(puts)
        browser.open(_web_endpoint(group.address))
        browser.until("document.body.dataset.admin === 'acting'")
        yield browser
    finally:
        browser.close()
        group.terminate()


def test_a_double_click_on_move_moves_once_and_says_how_many(tmp_path: Path) -> None:
    """A double click on Move sent two moves: the first moved the 30 orders, the
    second none, and its answer replaced the first's: the page said "moved 0 from 1.10
    to 1.11; 0 left" of a queue it had just emptied. The page now does one action at a
    time: the second press does nothing while the first is under way."""
    orders = [PutItem(b"order", "1.10", delivery=DeliveryMode.WF_DQF)] * 30
    with _acting_page(tmp_path, orders) as browser:
        browser.evaluate(
            "document.getElementById('act-queue').value = '1.10';"
            "document.getElementById('act-target').value = '1.11';"
            "const button = document.getElementById('act-move');"
            "button.click(); button.click(); true"
        )
        browser.until("document.body.dataset.acted === '1' && !document.body.dataset.busy")
        said = browser.evaluate("document.getElementById('act-result').textContent")
    moves = [r["result"]["moved"] for r in journal_of(tmp_path / "g1") if r["action"] == "move"]
    assert moves == [30], moves
    assert said == "moved 30 from 1.10 to 1.11; 0 left", said


JAPANESE = "注文番号12345の出荷は明日になります。ご確認ください。"
"""An order's text: its 64th byte falls inside a character."""


def test_a_browse_shows_a_cut_or_multi_line_body_as_text(tmp_path: Path) -> None:
    """Browsing a queue of Japanese orders or pretty-printed JSON showed every row's
    body as hex (`0xe6b3a8...`): the 64-byte preview cut a character in two, and a line
    break was not "printable". Both are text now, as `mrs dump` shows them."""
    bodies = (JAPANESE, '{\n  "order": 17\n}', "\x00\x01")
    puts = [PutItem(body.encode(), "1.10", delivery=DeliveryMode.WF_DQF) for body in bodies]
    with _acting_page(tmp_path, puts) as browser:
        browser.evaluate(
            "document.getElementById('act-queue').value = '1.10';"
            "document.getElementById('act-browse').click(); true"
        )
        browser.until("document.body.dataset.browsed === '1.10:3'")
        shown = browser.evaluate(
            "[0, 1, 2].map(i => document.querySelector(`[data-key='browse.${i}']`).textContent)"
        )
    assert shown == [
        f"{JAPANESE[:24]} (77 B)",
        '{\n  "order": 17\n} (17 B)',
        "0x0001 (2 B)",
    ], shown


def test_an_action_while_the_group_recovers_is_answered_recovering(tmp_path: Path) -> None:
    """A page left open across a restart: a Purge pressed while the group recovered its
    journals was answered 405 "read-only: GET and HEAD only", as if the group's
    web_admin were off. It is answered as every request is then: 503 "recovering"."""
    bus = _bus_file(tmp_path)
    bus.config.write_text(
        bus.config.read_text().replace("[[group.queue]]", "web_admin = true\n[[group.queue]]")
    )
    bus.fault.write_text("SLOW 60")  # the recovery's commit: until the file says otherwise
    with _serving(bus):
        answer = _post_purge(bus.web_port)
        while answer is None:  # refused: the server has not bound its ports yet
            answer = _post_purge(bus.web_port)
    assert answer[0] == 503, answer
    assert answer[1].startswith("recovering: group 1 (NYC) is opening its journals"), answer


def _post_purge(port: int) -> tuple[int, str] | None:
    """A Purge posted as the page does: (status, body), or None when refused."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/admin/act",
        json.dumps({"action": "purge", "args": {"queue": "1.10"}}).encode(),
        {"Content-Type": "application/json", "X-CSRF-Token": "t"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            return None
        raise


class _Unanswered(QuietHandler):
    """The real page, a session without [auth], and an action answer held until
    `release` (a group paused under the page: SIGSTOP, a stalled disk)."""

    release = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/":
            self._send(page_html("paused"), "text/html; charset=utf-8")
        elif self.path == "/api/admin/session":
            session = {"admin": True, "login_required": False, "principal": None, "csrf": "t"}
            self._send(json.dumps(session).encode(), "application/json")
        else:
            self._send(b'{"groups": [], "samples": [], "time_s": 1}', "application/json")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.release.wait(60)
        self._send(b'{"error": "too late"}', "application/json")



def test_an_action_a_paused_group_never_answers_gives_the_panel_back(tmp_path: Path) -> None:
    """The page's POST waited as long as the group held it: a paused group left the
    operator with no word at all (and, one action at a time, no button). It now gives
    up past the server's own bounds (75 s; 1 s here), says the action may or may not
    have been done, and the buttons work again."""
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unanswered) as site:
        threading.Thread(target=site.serve_forever, daemon=True).start()
        browser = Browser(_chromium())
        try:
            browser.open(f"http://127.0.0.1:{site.server_address[1]}/")
            browser.until("document.body.dataset.admin === 'acting'")
            waits_ms = browser.evaluate("ACT_WAIT_MS")
            browser.evaluate(
                "ACT_WAIT_MS = 1000; window.confirm = () => true;"
                "document.getElementById('act-queue').value = 'ORDERS';"
                "document.getElementById('act-purge').click(); true"
            )
            browser.until("document.body.dataset.acted === '1' && !document.body.dataset.busy")
            said = browser.evaluate("document.getElementById('act-result').textContent")
            disabled = browser.evaluate("document.getElementById('act-purge').disabled")
        finally:
            _Unanswered.release.set()
            browser.close()
            site.shutdown()
    assert waits_ms == 75000
    assert said == (
        "no answer from the server within 1 s: the action may or may not have been done"
    ), said
    assert disabled is False
