"""`mrs web --admin`: the bus-wide page acts on any group of the bus (browse, purge, move,
connections, set-limits, add-queue, grant), through the same AdminRequests as `mrs
admin`, with the group page's login and CSRF rules; read-only without `--admin`. The
group's own page takes the run-time changes too. Real `mrs serve` and `mrs web`
processes over HTTP; one real Chromium run.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from clients import PutItem, connect_sync
from mrs.model import DeliveryMode
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.auth_helpers import SecureBus, add_principal, creds, password_of
from tests.cli_helpers import status_json


class WebSession:
    """One browser's worth of cookies and CSRF token against a page's admin API."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cookies: dict[str, str] = {}
        self.csrf = ""
        self.session = self.get_session()

    def _send(self, request: urllib.request.Request) -> tuple[int, dict]:
        request.add_header("Cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, headers, body = response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            status, headers, body = error.code, error.headers, error.read()
        for cookie in headers.get_all("Set-Cookie") or []:
            name, _, value = cookie.split(";", 1)[0].partition("=")
            self.cookies[name] = value
        return status, json.loads(body) if body.startswith(b"{") else {"text": body.decode()}

    def get_session(self) -> dict:
        status, body = self._send(urllib.request.Request(self.url + "api/admin/session"))
        assert status == 200, body
        self.csrf = body["csrf"]
        return body

    def post(self, path: str, body: dict, csrf: bool = True) -> tuple[int, dict]:
        headers = {"Content-Type": "application/json"}
        if csrf:
            headers["X-CSRF-Token"] = self.csrf
        request = urllib.request.Request(
            self.url + path, json.dumps(body).encode(), headers, method="POST"
        )
        return self._send(request)

    def login(self, name: str, password: str) -> tuple[int, dict]:
        status, body = self.post(
            "api/admin/login", {"name": name, "password": password, "csrf": self.csrf}
        )
        if status == 200:
            self.csrf = body["csrf"]
        return status, body

    def act(self, action: str, group: int | None = None, **args: object) -> tuple[int, dict]:
        return self.post("api/admin/act", {"action": action, "group": group, "args": args})


def start_web(config: Path, *options: str) -> tuple[subprocess.Popen, str]:
    web = subprocess.Popen(
        [sys.executable, "-m", "mrs", "web", "--config", str(config), "--listen", "127.0.0.1:0",
         *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    ready, _, _ = select.select([web.stdout], [], [], 60)
    assert ready, "mrs web did not start"
    return web, web.stdout.readline().split()[1]


def stop_web(web: subprocess.Popen) -> None:
    web.terminate()
    web.wait(timeout=30)


def journal_of(data_dir: Path) -> list[dict]:
    path = data_dir / "admin-journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def secure_bus(tmp_path: Path):
    bus = SecureBus(tmp_path / "bus")
    assert bus.config_path is not None
    add_principal(bus.config_path, "operator", ["--manage", "1.1*", "--admin", "status"])
    add_principal(bus.config_path, "producer2", ["--attach", "2.13", "--put", "2.10"])
    add_principal(
        bus.config_path, "boss", ["--manage", "*", "--admin", "status", "--admin", "config"]
    )
    bus.start()
    yield bus
    bus.stop()


def test_the_bus_page_logs_in_and_acts_on_each_group_as_the_principal(secure_bus) -> None:
    bus = secure_bus
    with connect_sync(bus.address(1), "SENDER", credentials=creds("producer")) as client:
        for i in range(2):
            client.put(f"order {i}".encode(), "1.10", delivery=DeliveryMode.WF_DQF)
    with connect_sync(bus.address(2), "SENDER", credentials=creds("producer2")) as client:
        client.put(b"far order", "2.10", delivery=DeliveryMode.WF_DQF)
    web, url = start_web(bus.config_path, "--admin")
    try:
        page = WebSession(url)
        assert page.session["login_required"] and page.session["principal"] is None
        assert [g["group"] for g in page.session["groups"]] == [1, 2]
        assert page.act("browse", queue="1.10")[0] == 403  # not logged in
        assert page.login("operator", "wrong") == (403, {"error": "wrong name or password"})
        assert page.login("operator", password_of("operator"))[0] == 200
        status, found = page.act("browse", queue="1.10")
        assert status == 200 and found["group"] == 1
        assert [m["preview"] for m in found["messages"]] == ["order 0", "order 1"]
        assert page.post("api/admin/act", {"action": "browse", "args": {"queue": "1.10"}},
                         csrf=False)[0] == 403  # fmt: skip
        status, refused = page.act("browse", queue="2.10")  # no manage right on group 2
        assert status == 403 and refused["error"].startswith("group 2: ")
        assert page.act("move", queue="1.10", to="1.11")[1]["moved"] == 2
        status, listed = page.act("connections", group=2)
        assert status == 200 and listed["group"] == 2 and listed["connections"]
        assert page.act("add_queue", group=1, id=30, name="RETRY")[0] == 403  # no config right
        assert page.post("api/admin/logout", {})[0] == 200
        assert page.act("browse", queue="1.11")[0] == 403
        boss = WebSession(url)
        assert boss.login("boss", password_of("boss"))[0] == 200
        status, purged = boss.act("purge", queue="2.10", reason="bus page test")
        assert status == 200 and purged["dead_lettered"] == 1
        changed = boss.act("set_limits", queue="2.11", messages_max=50, unconfirmed_max=5)
        assert changed[0] == 200 and changed[1]["queue"] == "2.11"
        assert {key: changed[1][key] for key in ("group", "messages_max", "unconfirmed_max")} == {
            "group": 2, "messages_max": 50, "unconfirmed_max": 5}  # fmt: skip
        assert set(changed[1]["was"]) == {"messages_max", "unconfirmed_max"}
        assert boss.act("add_queue", group=1, id=30, name="RETRY")[1]["queue"] == "1.30"
        status, granted = boss.act("grant", principal="reader", attach=["1.30"], confirm=["1.30"])
        assert status == 200 and granted["attach"] == ["1.30"]
    finally:
        stop_web(web)
    with connect_sync(bus.address(1), "RETRY", credentials=creds("reader")) as client:
        assert client.queue is not None and str(client.queue) == "1.30"  # the new grant
    text = bus.config_path.read_text()
    assert 'name = "RETRY"' in text and "unconfirmed_max = 5" in text
    one, two = journal_of(bus.directory / "g1"), journal_of(bus.directory / "g2")
    assert [(r["principal"], r["action"], "refused" in r["result"]) for r in one] == [
        ("operator", "move", False), ("operator", "add-queue", True),
        ("boss", "add_queue", False), ("boss", "grant", False),
    ]  # fmt: skip
    assert [(r["principal"], r["action"], "refused" in r["result"]) for r in two] == [
        ("operator", "browse", True), ("boss", "purge", False), ("boss", "set_limits", False),
    ]  # fmt: skip


def _plain_bus(tmp_path: Path, web_admin: bool = False) -> Path:
    ports = [free_port() for _ in range(2)]
    ops = '[group.ops]\nweb_listen = "127.0.0.1:0"\nweb_admin = true\n' if web_admin else ""
    config = tmp_path / "bus.toml"
    parts = []
    for group_id, port in zip((1, 2), ports, strict=True):
        parts.append(f"""
[[group]]
id = {group_id}
name = "G{group_id}"
listen = "127.0.0.1:{port}"
data_dir = "g{group_id}"
{ops}
[[group.queue]]
id = 10
name = "ORDERS{group_id}"
[[group.queue]]
id = 11
name = "EVENTS{group_id}"
""")
    config.write_text("".join(parts) + "\n[[link]]\ngroups = [1, 2]\n")
    return config


@pytest.fixture
def plain_bus(tmp_path: Path):
    config = _plain_bus(tmp_path)
    groups = [GroupProcess(config, group_id) for group_id in (1, 2)]
    for group in groups:
        group.start()
    with connect_sync(groups[1].address, "ORDERS2") as client:
        for i in range(3):
            client.put(f"ldn {i}".encode(), "2.10", delivery=DeliveryMode.WF_DQF)
    yield config, groups
    for group in groups:
        group.terminate()


def test_without_admin_the_bus_page_stays_read_only(plain_bus) -> None:
    config, _ = plain_bus
    web, url = start_web(config)
    try:
        request = urllib.request.Request(url + "api/admin/act", b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 405
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url + "api/admin/session", timeout=10)
        assert missing.value.code == 404
    finally:
        stop_web(web)


def test_the_bus_page_acts_without_auth_and_picks_the_group_by_the_queue(plain_bus) -> None:
    config, groups = plain_bus
    web, url = start_web(config, "--admin")
    try:
        page = WebSession(url)
        assert page.session["login_required"] is False
        assert page.act("browse", queue="ORDERS2")[1]["waiting"] == 3  # the name says group 2
        assert page.act("connections")[1] == {"error": "say which group (groups: 1, 2)"}
        assert page.act("browse", group=7, queue="1.10")[0] == 400
        assert page.act("move", queue="2.10", to="2.11")[1]["moved"] == 3
        assert page.act("purge", queue="EVENTS2")[1]["dead_lettered"] == 3
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is not None:
            with connect_sync(groups[0].address, "ORDERS1") as client:
                client.put_many([PutItem(b"e", "1.11", delivery=DeliveryMode.WF_DQF)] * 600)
            _browse_in_a_browser(chromium, url)
    finally:
        stop_web(web)
    records = journal_of(config.parent / "g2")
    assert [(r["principal"], r["action"]) for r in records][:2] == [
        (None, "move"), (None, "purge")
    ]  # fmt: skip (a browse done is logged, not journaled)
    purges = [(None, "purge")] * 2 if chromium is not None else []
    assert [(r["principal"], r["action"]) for r in journal_of(config.parent / "g1")] == purges


def test_the_bus_page_names_what_it_cannot_act_on(plain_bus) -> None:
    """A queue no group has, a group by its name, args that are no JSON object, and
    args with a key named like the client call's own parameter (a 502 with a Python
    TypeError once) or any key the action does not read: each a one-line answer."""
    config, _ = plain_bus
    web, url = start_web(config, "--admin")
    try:
        page = WebSession(url)
        assert page.act("browse", queue="NOPE") == (
            400,
            {"error": "no queue 'NOPE' in any group (groups: 1, 2)"},
        )
        assert page.act("browse", group="G2", queue="2.10")[1]["waiting"] == 3  # by its name
        listed = page.post("api/admin/act", {"action": "browse", "args": ["2.10"]})
        assert listed == (400, {"error": "args must be a JSON object, got list"})
        status, shadowed = page.post(
            "api/admin/act", {"action": "browse", "args": {"queue": "2.10", "action": "x"}}
        )
        assert status == 400, shadowed
        assert (
            "browse: unknown argument ['action'] (known: after, limit, queue, select)"
            in (shadowed["error"])
        )
    finally:
        stop_web(web)


def _browse_in_a_browser(chromium: str, url: str) -> None:
    """The bus page in a real Chromium: pick group 2, add a queue there, browse it;
    purge 600 messages of group 1 (the page repeats the request, as `mrs admin`)."""
    from tests.browser_cdp import Browser

    browser = Browser(chromium)
    try:
        browser.open(url)
        browser.until("document.body.dataset.admin === 'acting'")
        assert browser.evaluate("document.getElementById('act-group-row').hidden") is False
        browser.evaluate(
            "document.getElementById('act-group').value = '2';"
            "document.getElementById('new-id').value = '30';"
            "document.getElementById('new-name').value = 'RETRY2';"
            "document.getElementById('act-add-queue').click(); true"
        )
        browser.until("document.body.dataset.configured === 'add_queue'")
        assert browser.evaluate("document.getElementById('act-result').textContent").startswith(
            "added queue 2.30 RETRY2"
        )
        browser.evaluate(
            "document.getElementById('act-queue').value = 'ORDERS2';"
            "document.getElementById('act-browse').click(); true"
        )
        browser.until("document.body.dataset.browsed === '2.10:0'")
        browser.evaluate(  # 600 waiting: two requests of at most 500, added up
            "window.confirm = () => true;"
            "document.getElementById('act-group').value = '';"
            "document.getElementById('act-queue').value = 'EVENTS1';"
            "document.getElementById('act-purge').click(); true"
        )
        browser.until("document.getElementById('act-result').textContent.startsWith('purged')")
        assert browser.evaluate("document.getElementById('act-result').textContent") == (
            "purged 1.11: 600 to the DLJ, 0 memory messages discarded; 0 left"
        )
    finally:
        browser.close()


def _web_endpoint(address: str) -> str:
    """The group's page, once its status lists it (it may start just after READY)."""
    for _ in range(100):
        endpoints = status_json("--address", address)["endpoints"]
        if "web" in endpoints:
            return endpoints["web"]
    raise AssertionError(f"the group at {address} never listed its web page")


def test_the_group_page_sets_limits_and_adds_a_queue(tmp_path: Path) -> None:
    """The run-time changes from the group's own page (web_admin, no [auth]): the
    same answers as `mrs admin`, written to the config, journaled; a grant without
    [auth] is one line."""
    config = _plain_bus(tmp_path, web_admin=True)
    group = GroupProcess(config, 1)
    group.start()
    try:
        page = WebSession(_web_endpoint(group.address))
        status, changed = page.act("set_limits", queue="ORDERS1", unconfirmed_max=7)
        assert status == 200 and changed["unconfirmed_max"] == 7
        assert page.act("add_queue", id=31, name="RETRY1", recoverable=False)[1] == {
            "queue": "1.31",
            "name": "RETRY1",
        }
        status, refused = page.act("grant", principal="x", attach=["1.*"])
        assert status == 400 and "no [auth]" in refused["error"]
        with connect_sync(group.address, "RETRY1") as client:
            assert str(client.queue) == "1.31"
    finally:
        group.terminate()
    assert "unconfirmed_max = 7" in config.read_text()
    records = journal_of(tmp_path / "g1")
    assert [r["action"] for r in records] == ["set_limits", "add_queue", "grant"]
    assert "no [auth]" in json.dumps(records[-1])  # the refused grant is written down too


def test_the_operations_page_transcripts_run_as_pasted(tmp_path: Path) -> None:
    """docs/operations.md, "The bus page acts too" and "Alarms": their commands against
    group 1 of the example bus, `mrs web --admin` on a free port instead of 8100."""
    from tests.process.test_docs_pasted import (
        PastedPage,
        blocks,
        console_commands,
        shell_environment,
    )

    if shutil.which("curl") is None:
        # CI installs it: a skip there would count a gap as a pass
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            "needs curl (.ci/system-packages --tests installs it)"
        )
    page = PastedPage("operations.md", tmp_path)
    web = None
    try:
        page.serve_examples()
        [alarms] = blocks(page.page, "Alarms", "console")
        assert page.run("sh", console_commands(alarms)) == (
            "memory queue 1.14's memory (messages_max) holds 2 of 2 (100%); "
            "alarm from 2, new messages refused at 2\n"
        )
        start, transcript = blocks(page.page, "The bus page acts too", "console")
        port = str(free_port())
        command = page.address(console_commands(start)).replace("8100", port).split()
        web = subprocess.Popen(
            command, cwd=page.directory, env=shell_environment(), stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        ready, _, _ = select.select([web.stdout], [], [], 60)
        assert ready and web.stdout is not None
        assert web.stdout.readline().startswith("WEB http://127.0.0.1:")
        output = page.run("sh", console_commands(transcript).replace("8100", port))
        expected = [line for line in transcript.splitlines() if not line.startswith("$ ")]
        assert output.splitlines() == expected
    finally:
        if web is not None:
            stop_web(web)
        page.close()
    config = (page.directory / "docs" / "examples" / "bus.toml").read_text()
    assert "unconfirmed_max = 400" in config and 'name = "ORDERS_HOLD"' in config
