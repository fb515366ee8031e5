"""The web view rendered by a real headless Chromium: it shows the numbers the status
API gives, for the bus (`mrs web`) and for one group (`[group.ops] web_listen`).

Set MRS_DOCS_SCREENSHOTS=1 to also refresh docs/images/web-view.png and
docs/images/status-table.png from this run.
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from clients import connect_sync
from mrs.model import DeliveryMode
from sim.ports import free_port
from sim.processes import GroupProcess

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs chromium (.ci/system-packages --tests installs it)"
)
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def _browser(url: str, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,1000",
            "--virtual-time-budget=7000",
            *options,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _shown(dom: str) -> dict[str, str]:
    """data-key -> text of every number cell the page's script rendered."""
    return {
        key.replace("&gt;", ">"): value
        for key, value in re.findall(r'data-key="([^"]+)"[^>]*>([^<]*)<', dom)
    }


def _await_web_payload(url: str, status: dict, timeout_s: float = 30.0) -> None:
    """Wait until the page's own API (refreshed once a second) has caught up with
    `status`, so the browser renders the same numbers the status API gave."""
    wanted = status["groups"][0]["status"]["journal"]["records"]
    deadline = time.monotonic() + timeout_s
    while True:
        with urllib.request.urlopen(url.rstrip("/") + "/api/status", timeout=10) as response:
            payload = json.loads(response.read())
        if payload["groups"][0]["status"]["journal"]["records"] == wanted:
            return
        assert time.monotonic() < deadline, "the web view never caught up with mrs status"
        time.sleep(0.1)


def _status(config: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "status", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return json.loads(result.stdout)


@pytest.fixture
def bus(tmp_path: Path):
    ports = [free_port() for _ in range(2)]
    config = tmp_path / "bus.toml"
    config.write_text(f"""
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:{ports[0]}"
data_dir = "g1"
pcj_default = true
[group.ops]
web_listen = "127.0.0.1:0"
[[group.queue]]
id = 10
name = "ORDERS"
[[group.queue]]
id = 11
name = "EVENTS"
[[group]]
id = 2
name = "LDN"
listen = "127.0.0.1:{ports[1]}"
data_dir = "g2"
[[group.queue]]
id = 10
name = "ORDERS"
[[link]]
groups = [1, 2]
""")
    group = GroupProcess(config, 1)  # group 2 stays down: the SAF fills
    group.start()
    with connect_sync(group.address, "ORDERS") as client:
        for i in range(7):
            client.put(f"local {i}".encode(), "1.10", delivery=DeliveryMode.WF_DQF)
        for i in range(4):
            client.put(f"remote {i}".encode(), "2.10", delivery=DeliveryMode.WF_SAF)
        client.get(timeout=10).confirm()
    yield config
    group.terminate()


def test_bus_page_in_a_real_browser_shows_the_status_api_numbers(bus: Path, tmp_path) -> None:
    web = subprocess.Popen(
        [sys.executable, "-m", "mrs", "web", "--config", str(bus), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([web.stdout], [], [], 30)
        assert ready, "mrs web did not start"
        url = web.stdout.readline().split()[1]
        address = _status(bus)["groups"][0]["address"]
        with connect_sync(address, "EVENTS") as client:  # traffic for the live charts
            for i in range(40):
                client.put(f"event {i}".encode(), "1.11", delivery=DeliveryMode.WF_DQF)
                time.sleep(0.05)
        status = _status(bus)
        _await_web_payload(url, status)
        dom = _browser(url, "--dump-dom").stdout
        shot = (
            DOCS_IMAGES / "web-view.png"
            if os.environ.get("MRS_DOCS_SCREENSHOTS")
            else (tmp_path / "web-view.png")
        )
        result = _browser(url, f"--screenshot={shot}")
        assert result.returncode == 0 and shot.stat().st_size > 20_000
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        web.terminate()
        web.wait(timeout=30)
    shown = _shown(dom)
    nyc = status["groups"][0]["status"]
    assert shown["1.state"] == "UP" and shown["2.state"] == "DOWN"
    assert shown["1.10.pending"] == str(nyc["queues"]["1.10"]["pending"]) == "6"
    assert shown["1.dqf"] == str(nyc["journal"]["records"]["dqf"]) == "46"
    assert shown["1.11.pending"] == "40"
    assert shown["1.saf"] == str(nyc["journal"]["records"]["saf"]) == "4"
    assert shown["1.pcj"] == str(nyc["journal"]["records"]["pcj"]) == "1"
    assert shown["1>2.saf_backlog"] == str(nyc["links"]["2"]["saf_backlog"]) == "4"
    assert 'data-up="1"' in dom and "1 of 2 groups up" in dom
    assert dom.count("<canvas") == 4


def test_group_page_served_by_the_group_itself(bus: Path) -> None:
    status = _status(bus)["groups"][0]["status"]
    url = status["endpoints"]["web"]
    dom = _browser(url, "--dump-dom").stdout
    shown = _shown(dom)
    assert shown["1.state"] == "UP" and "2.state" not in shown
    assert '<section id="replication-section" hidden="">' in dom  # not replicated
    assert shown["1.10.pending"] == str(status["queues"]["1.10"]["pending"])
    assert shown["1.saf"] == "4"


def test_status_table_screenshot(bus: Path, tmp_path: Path) -> None:
    """The `mrs status` table, exported by rich as SVG and rendered by the browser."""
    import trio
    from rich.console import Console

    from mrs.config.bus import load_config
    from mrs.tools.bus_status import GroupView, fetch_all
    from mrs.tools.status_render import render

    config = load_config(bus)
    views = [
        GroupView(f"{g.listen_host}:{g.listen_port}", g.id, g.name) for g in config.groups.values()
    ]
    trio.run(fetch_all, views, 5.0)
    console = Console(record=True, width=150, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render(views, config.path))
    table = console.export_text(clear=False)
    assert "1 of 2 groups up" in table and "DOWN" in table and "ORDERS" in table
    svg = tmp_path / "status.svg"
    svg.write_text(console.export_svg(title="mrs status --config bus.toml"))
    shot = (
        DOCS_IMAGES / "status-table.png"
        if os.environ.get("MRS_DOCS_SCREENSHOTS")
        else (tmp_path / "status-table.png")
    )
    result = _browser(svg.as_uri(), f"--screenshot={shot}", "--window-size=1400,900")
    assert result.returncode == 0 and shot.read_bytes()[:4] == b"\x89PNG"


def test_charts_show_the_current_commit_latency_and_rate_not_the_since_start_mean(
    tmp_path: Path,
) -> None:
    """A disk that was fast for 10,000 commits (1 ms each) stalls: every commit now
    takes 50 ms. The page, fed those totals by its own API, charts 50 ms now (the
    since-start mean is still about 1 ms) and the rate of the last interval."""
    import http.server
    import threading

    from mrs.ops.web import page_html

    state = {"t": 1_000.0, "commits": 10_000, "batches": 20_000, "ms": 10_000.0}

    def payload() -> dict:
        writer = {"commits": state["commits"], "batches": state["batches"],
                  "commit_time_ms_total": state["ms"],
                  "commit_time_ms_mean": state["ms"] / state["commits"]}  # fmt: skip
        status = {"group": 1, "name": "NYC", "writer": writer, "links": {}, "queues": {}}
        return {"bus": None, "time_s": state["t"],
                "groups": [{"group": 1, "name": "NYC", "up": True, "status": status}]}  # fmt: skip

    def stall_for_two_seconds() -> None:  # 10 commits of 50 ms, 20 messages
        state["t"] += 2.0
        state["commits"] += 10
        state["batches"] += 20
        state["ms"] += 500.0

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            if self.path == "/":
                body, kind = page_html("stall"), "text/html"
            elif self.path == "/api/history":
                body, kind = json.dumps({"samples": []}).encode(), "application/json"
            else:
                stall_for_two_seconds()
                body, kind = json.dumps(payload()).encode(), "application/json"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        dom = _browser(url, "--dump-dom").stdout
    finally:
        server.shutdown()
    now = dict(re.findall(r'<canvas id="(c-[a-z]+)"[^>]*? data-now="([^"]*)"', dom))
    assert float(now["c-lat"]) == 50.0, now  # the since-start mean is ~1.05 ms
    assert float(now["c-rate"]) == 10.0, now


def test_acting_in_a_real_browser_log_in_browse_move_and_see_it_arrive(tmp_path: Path) -> None:
    """[group.ops] web_admin under [auth]: a wrong password is refused, the operator
    logs in with its bus credentials, browses ORDERS, moves its messages to EVENTS and
    sees them there; the server journaled each action with the principal."""
    from tests.auth_helpers import add_principal, group_config, password_of
    from tests.browser_cdp import Browser

    port = free_port()
    config = tmp_path / "bus.toml"
    ops = '[group.ops]\nweb_listen = "127.0.0.1:0"\nweb_admin = true'
    config.write_text(
        group_config(1, port, ops)
        .replace('name = "OTHER"', 'name = "EVENTS"')
        .replace('name = "IN"', 'name = "ORDERS"')
        + '\n[auth]\ncredentials = "creds.toml"\nlink_secrets = "secrets"\n'
    )
    add_principal(config, "operator", ["--manage", "1.1*", "--admin", "status"])
    add_principal(config, "producer", ["--attach", "1.13", "--put", "1.10"])
    add_principal(config, "consumer", ["--attach", "1.11", "--confirm", "1.11"])
    group = GroupProcess(config, 1)
    group.start()
    browser = Browser(CHROMIUM)
    try:
        from clients import ClientCredentials

        producer = ClientCredentials("producer", password_of("producer"))
        with connect_sync(group.address, "SENDER", credentials=producer) as client:
            for i in range(3):
                client.put(f"order {i}".encode(), "1.10", delivery=DeliveryMode.WF_DQF)
        log = (tmp_path / "group1.log").read_text()
        url = re.search(r"web view on (http://\S+)", log).group(1)
        browser.open(url)
        browser.until("document.body.dataset.admin === 'login'")
        assert browser.evaluate("document.getElementById('acting').hidden") is True
        for password, expected in (("wrong", "login"), (password_of("operator"), "acting")):
            browser.evaluate(
                "document.getElementById('login-name').value = 'operator';"
                f"document.getElementById('login-password').value = {json.dumps(password)};"
                "document.getElementById('login-go').click(); true"
            )
            if expected == "login":
                browser.until("document.getElementById('login-error').textContent !== ''")
            browser.until(f"document.body.dataset.admin === '{expected}'")
        cookies = browser.call("Network.getAllCookies")["cookies"]
        [cookie] = [one for one in cookies if one["name"] == "mrs_session"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        forged = _post(url + "api/admin/act", {"action": "purge", "args": {"queue": "1.10"}},
                       {"Cookie": f"{cookie['name']}={cookie['value']}"})  # fmt: skip
        assert forged == (403, "missing or wrong CSRF token: reload the page")
        browser.evaluate(
            "document.getElementById('act-queue').value = 'ORDERS';"
            "document.getElementById('act-browse').click(); true"
        )
        browser.until("document.body.dataset.browsed === '1.10:3'")
        assert browser.evaluate(
            "document.querySelector('[data-key=\"browse.0\"]').textContent"
        ).startswith("order 0")
        browser.evaluate(
            "document.getElementById('act-target').value = 'EVENTS';"
            "document.getElementById('act-move').click(); true"
        )
        browser.until("document.getElementById('act-result').textContent.startsWith('moved 3')")
        browser.evaluate(
            "document.getElementById('act-queue').value = 'EVENTS';"
            "document.getElementById('act-browse').click(); true"
        )
        browser.until("document.body.dataset.browsed === '1.11:3'")
        arrived = browser.evaluate(
            "[...document.querySelectorAll('[data-key^=\"browse.\"]')].map(c => c.textContent)"
        )
        assert [text.split(" (")[0] for text in arrived] == ["order 0", "order 1", "order 2"]
        browser.until("document.querySelector('[data-key=\"1.11.pending\"]').textContent === '3'")
        if os.environ.get("MRS_DOCS_SCREENSHOTS"):
            browser.call(
                "Emulation.setDeviceMetricsOverride",
                width=1100, height=900, deviceScaleFactor=1, mobile=False,
            )  # fmt: skip
            shot = browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
            (DOCS_IMAGES / "web-admin.png").write_bytes(base64.b64decode(shot["data"]))
        consumer = ClientCredentials("consumer", password_of("consumer"))
        with connect_sync(group.address, "EVENTS", credentials=consumer) as client:
            for _ in range(3):
                client.get(timeout=10).confirm()
        with urllib.request.urlopen(url + "api/status", timeout=10) as response:
            queues = json.loads(response.read())["groups"][0]["status"]["queues"]
        assert queues["1.11"]["delivered_total"] == queues["1.11"]["confirmed_total"] == 3
        rate = "document.querySelector('[data-key=\"1.11.confirmed_per_s\"]').textContent"
        browser.until(f"Number({rate}) > 0")  # shown for the poll interval the confirms fell in
    finally:
        browser.close()
        group.terminate()
    journal = [
        json.loads(line)
        for line in (tmp_path / "g1" / "admin-journal.jsonl").read_text().splitlines()
    ]
    assert [(r["principal"], r["action"]) for r in journal] == [
        ("operator", "move"),  # the browses done: logged, not journaled
    ]
    assert all(r["peer"].startswith("web ") for r in journal)


def _post(url: str, body: dict, headers: dict[str, str]) -> tuple[int, str]:
    """POST JSON; (status, the answer's error or text)."""
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        text = error.read().decode()
        return error.code, json.loads(text)["error"] if text.startswith("{") else text


def test_the_page_stays_read_only_without_web_admin(bus: Path) -> None:
    url = _status(bus)["groups"][0]["status"]["endpoints"]["web"]
    status, text = _post(url + "api/admin/act", {"action": "purge", "args": {"queue": "1.10"}}, {})
    assert status == 405 and "read-only" in text
    dom = _browser(url, "--dump-dom").stdout
    assert '<section id="admin" hidden="">' in dom
