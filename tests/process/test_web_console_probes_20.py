"""The acting web console probed as an operator meets it: a queue added from the bus
page, a page left open past its login, the bus page's kept passwords, hostile strings
shown back. Real `mrs serve` and `mrs web` processes over real TCP, a real Chromium
where what the operator sees is the promise.
"""

from __future__ import annotations

import argparse
import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from clients import ClientCredentials, connect_sync
from mrs.model import DeliveryMode
from mrs.ops.http_endpoint import Request
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.auth_helpers import SecureBus, add_principal, group_config, password_of
from tests.browser_cdp import Browser
from tests.process.test_web_bus_admin import (
    WebSession,
    _plain_bus,
    _web_endpoint,
    start_web,
    stop_web,
)
from tests.process.test_web_probes import _chromium


def test_the_bus_page_acts_on_a_queue_it_has_just_added(tmp_path: Path) -> None:
    """`mrs web --admin` read the bus file once, at its start: after its own add-queue
    (HOLD2 on group 2, written to the file), naming HOLD2 was answered "no queue 'HOLD2'
    in any group" (browse, set-limits, purge alike) until `mrs web` was restarted. It
    now reads the file again when it changed."""
    config = _plain_bus(tmp_path)
    groups = [GroupProcess(config, group_id) for group_id in (1, 2)]
    for group in groups:
        group.start()
    web, url = start_web(config, "--admin")
    try:
        page = WebSession(url)
        added = page.act("add_queue", group=2, id=31, name="HOLD2")
        browsed = page.act("browse", queue="HOLD2")
        limited = page.act("set_limits", queue="HOLD2", messages_max=5)
    finally:
        stop_web(web)
        for group in groups:
            group.terminate()
    assert added == (200, {"group": 2, "queue": "2.31", "name": "HOLD2"})
    assert browsed[0] == 200 and (browsed[1]["group"], browsed[1]["queue"]) == (2, "2.31")
    assert limited[0] == 200 and limited[1]["messages_max"] == 5
    assert "messages_max = 5" in config.read_text()


@pytest.fixture
def secure_group_page(tmp_path: Path) -> Iterator[tuple[GroupProcess, str]]:
    """One group under [auth] serving its own acting page; `operator` may manage 1.1*."""
    config = tmp_path / "bus.toml"
    ops = '[group.ops]\nweb_listen = "127.0.0.1:0"\nweb_admin = true'
    config.write_text(
        group_config(1, free_port(), ops).replace('name = "IN"', 'name = "ORDERS"')
        + '\n[auth]\ncredentials = "creds.toml"\nlink_secrets = "secrets"\n'
    )
    add_principal(config, "operator", ["--manage", "1.1*", "--admin", "status"])
    add_principal(config, "producer", ["--attach", "1.13", "--put", "1.10"])
    group = GroupProcess(config, 1)
    group.start()
    producer = ClientCredentials("producer", password_of("producer"))
    with connect_sync(group.address, "SENDER", credentials=producer) as client:
        client.put(b"order 0", "1.10", delivery=DeliveryMode.WF_DQF)
    log = (tmp_path / "group1.log").read_text()
    url = re.search(r"web view on (http://\S+)", log)
    assert url is not None, log[-2000:]
    yield group, url.group(1)
    group.terminate()


def _log_in(browser: Browser) -> None:
    browser.evaluate(
        "document.getElementById('login-name').value = 'operator';"
        f"document.getElementById('login-password').value = {json.dumps(password_of('operator'))};"
        "document.getElementById('login-go').click(); true"
    )
    browser.until("document.body.dataset.admin === 'acting'")


def _browse_orders(browser: Browser, acted: int) -> None:
    browser.evaluate(
        "document.getElementById('act-queue').value = 'ORDERS';"
        "document.getElementById('act-browse').click(); true"
    )
    browser.until(f"document.body.dataset.acted === '{acted}'")


def test_a_page_whose_login_ended_shows_the_login_form_again(secure_group_page) -> None:
    """The operator's login ends while the page is open (logged out in another tab; or
    its 8 hours over, a wall screen left on). The next click was answered "log in
    first" under the Act panel, with the login form kept hidden: nothing on the page
    let the operator log in again short of a reload. The page now shows the login form
    and says that nothing was done; logged in again, the same click acts."""
    _, url = secure_group_page
    browser = Browser(_chromium())
    try:
        browser.open(url)
        browser.until("document.body.dataset.admin === 'login'")
        _log_in(browser)
        browser.evaluate(  # another tab of the same browser logs out
            "fetch('/api/admin/logout', {method: 'POST', headers: {'X-CSRF-Token': csrf}})"
            ".then(r => r.status)"
        )
        _browse_orders(browser, 1)
        shown = browser.evaluate(
            "({login: !document.getElementById('login').hidden,"
            " said: document.getElementById('login-error').textContent})"
        )
        _log_in(browser)
        _browse_orders(browser, 2)
        result = browser.evaluate("document.getElementById('act-result').textContent")
    finally:
        browser.close()
    assert shown == {"login": True, "said": "log in first: nothing was done; log in again"}
    assert result == "ORDERS (1.10): 1 waiting, 0 unconfirmed"


def test_an_open_page_without_auth_gets_a_new_session_when_its_own_ended(tmp_path: Path) -> None:
    """Without [auth] a page's session ends too (8 hours; or pushed out by 256 newer
    ones: each page load, each `curl` of /api/admin/session starts one). A click was
    then answered "log in first" on a bus with no login to make. The page now starts a
    new session, says nothing was done, and the next click acts."""
    group = GroupProcess(_plain_bus(tmp_path, web_admin=True), 1)
    group.start()
    browser = Browser(_chromium())
    try:
        url = _web_endpoint(group.address)
        browser.open(url)
        browser.until("document.body.dataset.admin === 'acting'")
        for _ in range(257):  # WEB_SESSIONS_MAX newer sessions push this page's out
            urllib.request.urlopen(url + "api/admin/session", timeout=30).close()
        browser.evaluate(
            "document.getElementById('act-queue').value = 'ORDERS1';"
            "document.getElementById('act-browse').click(); true"
        )
        browser.until("document.body.dataset.acted === '1'")
        said = browser.evaluate("document.getElementById('act-result').textContent")
        browser.evaluate("document.getElementById('act-browse').click(); true")
        browser.until("document.body.dataset.browsed === '1.10:0'")
    finally:
        browser.close()
        group.terminate()
    assert said == (
        "log in first: nothing was done; the page has a new session "
        "(no [auth]: actions are journaled as (no auth)): press again"
    )


def test_the_bus_page_forgets_a_password_once_its_login_ended(tmp_path: Path) -> None:
    """docs/operations.md: the bus page keeps a login's password in memory "forgotten
    at logout or after 8 hours". An expired login was only no longer answered: it
    stayed, password and all, until 256 newer logins pushed it out. The login's 8
    hours are run out here by setting its expiry (nobody waits 8 hours); the groups
    that check the password are real."""
    from mrs.config.bus import load_config
    from mrs.ops.web_admin import LOGIN_COOKIE, SESSION_COOKIE
    from mrs.tools.bus_status import targets_from_args
    from mrs.tools.web_actions import BusWebAdmin

    bus = SecureBus(tmp_path / "bus")
    assert bus.config_path is not None
    add_principal(bus.config_path, "operator", ["--manage", "1.1*"])
    bus.start()
    try:
        args = argparse.Namespace(address=None, config=bus.config_path, group=None)
        page = BusWebAdmin(load_config(bus.config_path), targets_from_args(args)[0])
        form = {"name": "operator", "password": password_of("operator"), "csrf": "t"}
        login = Request(
            "POST", "/api/admin/login", "",
            {"cookie": f"{LOGIN_COOKIE}=t", "content-type": "application/json"},
            json.dumps(form).encode(), "127.0.0.1:1",
        )  # fmt: skip
        answer = trio.run(page.login, login)
        assert answer.status == 200, answer.body
        token = dict(answer.headers)["Set-Cookie"].split(";")[0].partition("=")[2]
        assert page.logins[token].password == password_of("operator")
        page.logins[token].expires_s -= 8 * 3600 + 1
        later = Request("GET", "/api/admin/session", "", {"cookie": f"{SESSION_COOKIE}={token}"})
        session = json.loads(trio.run(page.session, later).body)
    finally:
        bus.stop()
    assert session["principal"] is None and session["login_required"] is True
    kept = [one.password for one in page.logins.values()]
    assert password_of("operator") not in kept


def _login_post(url: str, content_type: str, cookie: str) -> tuple[int, dict, str | None]:
    """A login POST as a page of another site could make it: its status, body and
    the session cookie it set (None)."""
    body = json.dumps({"name": "operator", "password": password_of("operator"), "csrf": "x"})
    request = urllib.request.Request(
        url.rstrip("/") + "/api/admin/login",
        data=body.encode(),
        method="POST",
        headers={"Content-Type": content_type, "Cookie": cookie, "Origin": "http://127.0.0.1:9"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read()), answer.headers.get("Set-Cookie")
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read()), refused.headers.get("Set-Cookie")


def test_a_login_posted_by_another_site_is_refused(secure_group_page) -> None:
    """A page of another site that can plant the login form's cookie (`mrs_login`: a
    sibling subdomain, another port of this host) posted a plain-text form with the
    same token, and logged the operator's browser in as the attacker's principal
    (login CSRF): the operator's next actions were the attacker's, journaled so. A
    login must now come as JSON, which a browser sends across sites only after asking
    the server (which never agrees); the page's own JSON login still works."""
    _, url = secure_group_page
    forged = _login_post(url, "text/plain", "mrs_login=x")
    assert forged[0] == 415 and forged[2] is None, forged
    assert forged[1] == {"error": "send the login as application/json"}
    own = _login_post(url, "application/json", "mrs_login=x")
    assert own[0] == 200 and own[2] is not None and own[2].startswith("mrs_session="), own


def test_a_queue_name_past_the_basic_plane_is_refused_in_one_line(tmp_path: Path) -> None:
    """An add-queue whose name holds a character past U+FFFF (an emoji) wrote the bus
    file with two surrogate escapes TOML refuses: the bus page and `mrs admin` were
    answered SERVER_ERROR ("TOMLDecodeError") with a traceback in the group's log. The
    name now reaches the config's own check, which refuses it in one line (BADPARAM)
    naming the rule, and the file is left as it was."""
    config = _plain_bus(tmp_path)
    before = config.read_text(encoding="utf-8")
    groups = [GroupProcess(config, group_id) for group_id in (1, 2)]
    for group in groups:
        group.start()
    web, url = start_web(config, "--admin")
    try:
        added = WebSession(url).act("add_queue", group=1, id=32, name="orders🙂")
    finally:
        stop_web(web)
        for group in groups:
            group.terminate()
    assert added[0] == 400 and added[1]["status"] == -1002, added
    assert "must be a name" in added[1]["error"] and "orders🙂" in added[1]["error"]
    assert config.read_text(encoding="utf-8") == before
    assert "Traceback" not in (tmp_path / "group1.log").read_text(errors="replace")
