"""The web console under abuse: malformed requests, slow groups, other origins. Real
`mrs serve` and `mrs web` processes over real TCP; a real Chromium where a browser's
own rules are what protect the operator.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import connect_sync
from mrs.exit_status import EXIT_USAGE
from mrs.model import DeliveryMode
from sim.processes import GroupProcess
from tests.auth_helpers import SecureBus, add_principal, password_of
from tests.process.test_web_bus_admin import (
    WebSession,
    _plain_bus,
    _web_endpoint,
    start_web,
    stop_web,
)


def raw_http(url: str, request: bytes) -> bytes:
    """Send `request` as is on a new connection; everything the server answers."""
    host, _, port = url.split("//", 1)[1].rstrip("/").rpartition(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


@pytest.fixture
def admin_group(tmp_path: Path) -> Iterator[tuple[GroupProcess, str]]:
    """Group 1 of a two-group bus, serving its own page with the actions on (no [auth])."""
    group = GroupProcess(_plain_bus(tmp_path, web_admin=True), 1)
    group.start()
    yield group, _web_endpoint(group.address)
    group.terminate()


@pytest.mark.parametrize("length", ["\u00b2", "9" * 5000, "-1", "12abc"])
def test_a_bad_content_length_is_refused_and_the_group_serves_on(admin_group, length) -> None:
    """'²' passes str.isdigit and a 5,000-digit number passes it too, but int() refuses
    both: that one request used to raise out of the HTTP server and stop the group."""
    group, url = admin_group
    request = f"POST /api/admin/act HTTP/1.1\r\nContent-Length: {length}\r\n\r\n"
    answer = raw_http(url, request.encode("latin-1"))
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert answer.endswith(b"Content-Length must be a number of bytes\n")
    assert raw_http(url, b"GET /healthz HTTP/1.1\r\n\r\n").endswith(b"\r\n\r\nok\n")
    with connect_sync(group.address, "ORDERS1") as client:
        client.put(b"still here", "1.10", delivery=DeliveryMode.WF_DQF)
    assert group.running


def test_an_action_on_a_group_that_never_answers_gets_one_line(tmp_path: Path) -> None:
    """Group 2's address accepts connections but never speaks (a hung host): the
    action's own connect timeout answers 502 with the group and why. It used to be cut
    by the five-second request deadline first: the browser got a closed connection and
    the page showed nothing."""
    config = _plain_bus(tmp_path)
    port_2 = int(re.findall(r'listen = "127.0.0.1:(\d+)"', config.read_text())[1])
    with socket.create_server(("127.0.0.1", port_2)):
        group = GroupProcess(config, 1)
        group.start()
        web, url = start_web(config, "--admin")
        try:
            status, answer = WebSession(url).act("browse", group=2, queue="ORDERS2")
        finally:
            stop_web(web)
            group.terminate()
    assert status == 502
    assert answer["error"].startswith("group 2: cannot connect to 127.0.0.1:")


def _session_as(url: str, host: str) -> tuple[bytes, str, str]:
    """GET the admin session the way a page served under `host` would: the answer,
    its session cookie and its CSRF token (empty when refused)."""
    answer = raw_http(url, f"GET /api/admin/session HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    cookie = re.search(rb"Set-Cookie: (mrs_session=[^;]+)", answer)
    csrf = re.search(rb'"csrf": "([^"]+)"', answer)
    return (
        answer,
        cookie.group(1).decode() if cookie else "",
        csrf.group(1).decode() if csrf else "",
    )


def test_a_page_that_rebinds_its_name_to_loopback_cannot_purge(admin_group) -> None:
    """DNS rebinding: a web page at evil.example:PORT points its name at 127.0.0.1 and
    is then the console's "same origin"; without [auth] it used to take a session and
    purge. A console listening on loopback answers actions only under loopback names."""
    group, url = admin_group
    with connect_sync(group.address, "ORDERS1") as client:
        client.put(b"keep me", "1.10", delivery=DeliveryMode.WF_DQF)
    port = url.rstrip("/").rpartition(":")[2]
    answer, cookie, csrf = _session_as(url, f"evil.example:{port}")
    assert answer.startswith(b"HTTP/1.1 403 "), answer
    assert b"DNS rebinding guard" in answer and not cookie
    body = b'{"action": "purge", "args": {"queue": "ORDERS1"}}'
    purge = (
        f"POST /api/admin/act HTTP/1.1\r\nHost: evil.example:{port}\r\nCookie: {cookie}\r\n"
        f"X-CSRF-Token: {csrf}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    assert raw_http(url, purge).startswith(b"HTTP/1.1 403 ")
    for host in (f"localhost:{port}", "127.0.0.1:9000", "[::1]:9000"):  # SSH tunnels too
        answer, cookie, csrf = _session_as(url, host)
        assert answer.startswith(b"HTTP/1.1 200 ") and cookie and csrf, (host, answer)
    status = WebSession(url).act("browse", queue="ORDERS1")
    assert status[0] == 200 and status[1]["waiting"] == 1


def _chromium() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium is not None, "needs chromium (.ci/system-packages --tests installs it)"
    return chromium


def test_a_page_of_another_origin_cannot_frame_the_console(admin_group, tmp_path: Path) -> None:
    """Clickjacking: a page on another port framed the acting console (logged in,
    buttons live) under its own decoys. The browser now refuses to frame it."""
    from tests.browser_cdp import Browser

    _, url = admin_group
    (tmp_path / "index.html").write_text(
        f'<iframe src="{url}" onload="document.body.dataset.framed = 1"></iframe>'
    )
    handler = functools.partial(_QuietFiles, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as site:
        threading.Thread(target=site.serve_forever, daemon=True).start()
        browser = Browser(_chromium())
        try:
            browser.open(f"http://127.0.0.1:{site.server_address[1]}/index.html")
            browser.until("document.body.dataset.framed === '1'")
            [child] = browser.call("Page.getFrameTree")["frameTree"]["childFrames"]
        finally:
            browser.close()
            site.shutdown()
    assert child["frame"]["url"] != url and child["frame"].get("unreachableUrl") == url


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    """The other origin's page; no request lines on the test's stderr."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass


def test_an_action_while_the_group_is_down_says_so_in_the_page(admin_group) -> None:
    """The group's own page, its group stopped (a restart): a click used to leave the
    page silent (the failed fetch was an unhandled rejection), and an operator clicked
    Purge again. The page now says the server gave no answer."""
    from tests.browser_cdp import Browser

    group, url = admin_group
    browser = Browser(_chromium())
    try:
        browser.open(url)
        browser.until("document.body.dataset.admin === 'acting'")
        group.terminate()
        browser.evaluate(
            "document.getElementById('act-queue').value = 'ORDERS1';"
            "document.getElementById('act-browse').click(); true"
        )
        browser.until("document.body.dataset.acted === '1'")
        shown = browser.evaluate("document.getElementById('act-result').textContent")
    finally:
        browser.close()
    assert shown.startswith("no answer from the server (TypeError: Failed to fetch)")
    assert shown.endswith("the action may or may not have been done")


@pytest.mark.parametrize(
    ("listen", "said"),
    [
        ("127.0.0.1:\u00b2", "mrs: --listen: port must be a number in 0..65535"),
        ("127.0.0.1:" + "1" * 5000, "mrs: --listen: port must be a number in 0..65535"),
        (":8100", "mrs: --listen: must be 'host:port' with a non-empty host, got ':8100'"),
    ],
)
def test_a_bad_listen_address_is_one_line(tmp_path: Path, listen: str, said: str) -> None:
    """`mrs web --listen` with a port int() refuses ('²' passes str.isdigit; 5,000
    digits pass it too) used to stop with "unexpected error: ValueError"."""
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "web", "--config", str(_plain_bus(tmp_path)),
         "--listen", listen],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == EXIT_USAGE
    assert result.stderr.startswith(said)
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_deeply_nested_body_is_a_plain_refusal(admin_group, tmp_path: Path) -> None:
    """16 KiB of '[' (within the body bound) made json.loads raise RecursionError: such
    a post, to the login (no session needed) or to an action, was answered "internal
    error" and left a traceback in the group's log."""
    group, url = admin_group
    page = WebSession(url)
    body = b"[" * 15000
    for path, expected in (("login", b"403 "), ("act", b"400 ")):
        request = (
            f"POST /api/admin/{path} HTTP/1.1\r\nContent-Length: {len(body)}\r\n"
            "Content-Type: application/json\r\n"
            f"Cookie: mrs_session={page.cookies['mrs_session']}\r\n"
            f"X-CSRF-Token: {page.csrf}\r\n\r\n"
        ).encode()
        answer = raw_http(url, request + body)
        assert answer.startswith(b"HTTP/1.1 " + expected), answer[:200]
    assert answer.endswith(b'{"error": "unknown action None"}')
    group.terminate()
    assert "Traceback" not in (tmp_path / "group1.log").read_text()


def test_the_bus_page_logs_in_while_its_first_group_hangs(tmp_path: Path) -> None:
    """Under [auth] `mrs web --admin` checks a password by connecting to a group. Group
    1's host hangs (accepts, never answers): every login used to wait on it past the
    request deadline, so nobody could log in to act on group 2. The next group is now
    asked after a second."""
    bus = SecureBus(tmp_path / "bus")
    assert bus.config_path is not None
    add_principal(bus.config_path, "operator", ["--manage", "2.1*"])
    with socket.create_server(("127.0.0.1", bus.ports[1])):
        bus.processes[2].start()
        web, url = start_web(bus.config_path, "--admin")
        try:
            refused = WebSession(url).login("operator", "not the password")
            page = WebSession(url)
            status, login = page.login("operator", password_of("operator"))
            browsed = page.act("browse", group=2, queue="2.10")
        finally:
            stop_web(web)
            bus.stop()
    assert refused == (403, {"error": "wrong name or password"})
    assert status == 200 and login["principal"] == "operator"
    assert browsed[0] == 200 and browsed[1]["queue"] == "2.10"
