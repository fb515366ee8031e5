"""The acting web console probed as an operator at 3 a.m. meets it: a group or queue
typed with digits that are not ASCII, a login name no principal can have, a form
holding text that is not text. Real `mrs serve` and `mrs web` processes over real
TCP and HTTP; a real Chromium where what a browser does with cookies is the point.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

from clients import connect_sync
from mrs.model import DeliveryMode
from sim.processes import GroupProcess
from tests.auth_helpers import SecureBus, add_principal, mrs, password_of
from tests.browser_cdp import Browser
from tests.process.test_web_bus_admin import (
    WebSession,
    _plain_bus,
    _web_endpoint,
    start_web,
    stop_web,
)
from tests.process.test_web_probes import _chromium, raw_http


def _post_raw(page: WebSession, text: str) -> tuple[int, dict]:
    """POST `text` as it is (JSON a browser's script could send, lone surrogate
    escapes included) to the action endpoint with the page's cookie and CSRF token."""
    request = urllib.request.Request(
        page.url + "api/admin/act",
        text.encode("ascii"),
        {"Content-Type": "application/json", "X-CSRF-Token": page.csrf},
        method="POST",
    )
    return page._send(request)


def test_the_bus_page_answers_a_group_typed_in_other_digits_in_one_line(tmp_path: Path) -> None:
    """`mrs web --admin` took a group (the form's, or the head of a `G.Q` queue) whose
    characters pass str.isdigit as a number: '²' and a 5,000-digit string pass it,
    and int() refuses both, so the answer was "internal error (see the group's log)"
    with a traceback in `mrs web`'s log. Each is now a one-line mistake."""
    config = _plain_bus(tmp_path)  # no group runs: the page decides before it connects
    web, url = start_web(config, "--admin")
    try:
        page = WebSession(url)
        by_group = page.act("browse", group="\u00b2", queue="1.10")  # type: ignore[arg-type]
        by_queue = page.act("browse", queue="\u00b2.10")
        by_length = page.act("connections", group="1" * 5000)  # type: ignore[arg-type]
    finally:
        stop_web(web)
    assert web.stderr is not None
    logged = web.stderr.read()
    assert by_group == (400, {"error": f"no group '\u00b2' in {config} (groups: 1, 2)"})
    assert by_queue == (400, {"error": f"no group '\u00b2' in {config} (groups: 1, 2)"})
    assert by_length[0] == 400 and by_length[1]["error"].startswith("no group '1111"), by_length
    assert "Traceback" not in logged, logged[-3000:]


def test_the_bus_page_refuses_a_name_no_principal_has_as_a_wrong_login(tmp_path: Path) -> None:
    """Under [auth] `mrs web --admin` asks a group to check a login. A name the
    credentials file cannot hold (`ops@corp`, `john smith`) failed in the page's own
    client before any group was asked, and was answered 503 "cannot check the
    password now: group 2 did not answer" while every group was up: the operator
    looked for an outage. A group's link credential (`group:1` with its secret)
    logged in and acted as the link, which the group's own page refuses. Each is now
    the plain "wrong name or password"; a real principal still logs in."""
    bus = SecureBus(tmp_path / "bus")
    assert bus.config_path is not None
    add_principal(bus.config_path, "operator", ["--manage", "1.1*"])
    bus.start()
    web, url = start_web(bus.config_path, "--admin")
    try:
        link_secret = (tmp_path / "bus" / "secrets" / "group-1.secret").read_text().strip()
        answers = [
            WebSession(url).login(name, password)
            for name, password in (
                ("ops@corp", password_of("operator")),
                ("john smith", "x"),
                ("group:1", link_secret),
            )
        ]
        operator = WebSession(url)
        logged_in = operator.login("operator", password_of("operator"))
    finally:
        stop_web(web)
        bus.stop()
    assert answers == [(403, {"error": "wrong name or password"})] * 3
    assert logged_in[0] == 200 and logged_in[1]["principal"] == "operator", logged_in


def test_a_purge_whose_reason_is_not_text_keeps_the_queue(tmp_path: Path) -> None:
    """The group's own page handed the posted args to the action as JSON decoded them,
    half surrogate pairs included (`"\\udc80"`: no UTF-8 text holds one; `mrs admin`
    and the bus page refuse it when encoding the request). A purge with such a reason
    took the waiting messages, failed to encode their DLJ records and was answered
    with a Python codec error: the three messages were gone from the running queue
    (browse showed 0 waiting, a get timed out) though still in the DQF. The form is
    now refused in one line before anything is done, and the queue keeps them."""
    group = GroupProcess(_plain_bus(tmp_path, web_admin=True), 1)
    group.start()
    try:
        with connect_sync(group.address, "ORDERS1") as client:
            for i in range(3):
                client.put(b"order %d" % i, "1.10", delivery=DeliveryMode.WF_DQF)
        page = WebSession(_web_endpoint(group.address))
        purge = '{"action": "purge", "args": {"queue": "1.10", "reason": "\\udc80"}}'
        refused = _post_raw(page, purge)
        select = {"queue": "1.10", "select": {"contains": "HALF"}}
        browse = json.dumps({"action": "browse", "args": select}).replace("HALF", "\\ud800")
        refused_browse = _post_raw(page, browse)
        status, browsed = page.act("browse", queue="1.10")
        with connect_sync(group.address, "ORDERS1") as client:
            first = client.get(timeout=10.0)
    finally:
        group.terminate()
    said = "'\\udc80' is half of a surrogate pair, not text (a bad paste?): nothing was done"
    assert refused == (400, {"error": f"purge: {said}"}), refused
    assert refused_browse[0] == 400 and "surrogate pair" in refused_browse[1]["error"]
    assert status == 200 and browsed["waiting"] == 3, browsed
    assert first.body == b"order 0"
    log = (tmp_path / "group1.log").read_text(errors="replace")
    assert "Traceback" not in log and "Logging error" not in log
    journal = tmp_path / "g1" / "admin-journal.jsonl"
    lines = journal.read_text().splitlines() if journal.exists() else []
    assert lines == []  # the refused forms reached no action (the browse done: logged only)


def test_a_token_that_is_not_ascii_is_a_plain_refusal(tmp_path: Path) -> None:
    """The CSRF header and the login form's token were compared with
    hmac.compare_digest, which raises TypeError for a str that is not ASCII: a header
    `X-CSRF-Token: \xe9` (a script's typo, a hostile local client) or a login form
    with such a token was answered "internal error" with a traceback in the group's
    log. Both are now the refusals a wrong token gets."""
    group = GroupProcess(_plain_bus(tmp_path, web_admin=True), 1)
    group.start()
    try:
        url = _web_endpoint(group.address)
        page = WebSession(url)
        cookie = "; ".join(f"{name}={value}" for name, value in page.cookies.items())
        body = b'{"action": "browse", "args": {"queue": "1.10"}}'
        act = raw_http(url, b"POST /api/admin/act HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       b"Cookie: " + cookie.encode() + b"\r\nX-CSRF-Token: \xe9\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(body) + body)  # fmt: skip
        form = json.dumps({"name": "x", "password": "y", "csrf": "\u00e9"}).encode()
        login = raw_http(url, b"POST /api/admin/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Cookie: mrs_login=x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(form) + form)  # fmt: skip
    finally:
        group.terminate()
    assert act.startswith(b"HTTP/1.1 403 "), act
    assert act.endswith(b'{"error": "missing or wrong CSRF token: reload the page"}')
    assert login.startswith(b"HTTP/1.1 403 "), login
    assert login.endswith(b'{"error": "login form expired: reload the page"}')
    assert "Traceback" not in (tmp_path / "group1.log").read_text(errors="replace")


def _log_in(browser: Browser, page: str) -> None:
    """Open `page` in the browser and log in as operator there."""
    browser.open(page)
    browser.until("document.body.dataset.admin === 'login'")
    browser.evaluate(
        "document.getElementById('login-name').value = 'operator';"
        f"document.getElementById('login-password').value = {json.dumps(password_of('operator'))};"
        "document.getElementById('login-go').click(); true"
    )
    browser.until("document.body.dataset.admin === 'acting'")


def test_logging_in_to_the_bus_page_keeps_the_group_page_logged_in(tmp_path: Path) -> None:
    """docs/operations.md has both consoles on one host: `mrs web` on :8100 and a
    group's own page on :8101. A browser keeps one cookie per host name whatever the
    port, so both set the one `mrs_session`: logging in to the bus page logged the
    operator out of the group's page (its next click showed the login form), and back.
    Each console now keeps the other's token in the cookie beside its own; a logout
    ends only its own login."""
    bus = SecureBus(tmp_path / "bus")
    assert bus.config_path is not None
    ops = 'pcj_default = true\n[group.ops]\nweb_listen = "127.0.0.1:0"\nweb_admin = true\n'
    bus.config_path.write_text(bus.config_path.read_text().replace("pcj_default = true\n", ops, 1))
    add_principal(bus.config_path, "operator", ["--manage", "1.1*", "--admin", "status"])
    bus.start()
    web, bus_page = start_web(bus.config_path, "--admin")
    browser = Browser(_chromium())
    try:
        found = re.search(r"web view on (http://\S+)", bus.log(1))
        assert found is not None, bus.log(1)[-2000:]
        group_page = found.group(1)
        _log_in(browser, group_page)
        _log_in(browser, bus_page)
        browser.open(group_page)
        browser.until("document.body.dataset.admin !== undefined")
        on_group_page = browser.evaluate("document.body.dataset.admin")
        browser.evaluate(  # the group page's Log out: the bus page's login stays
            "document.getElementById('logout').click(); true"
        )
        browser.until("document.body.dataset.admin === 'login'")
        browser.open(bus_page)
        browser.until("document.body.dataset.admin !== undefined")
        on_bus_page = browser.evaluate("document.body.dataset.admin")
    finally:
        browser.close()
        stop_web(web)
        bus.stop()
    assert (on_group_page, on_bus_page) == ("acting", "acting")


def test_the_bus_page_ends_a_login_whose_password_was_rotated(tmp_path: Path) -> None:
    """The bus page keeps a login's password to act on each group as the principal.
    After `mrs creds rotate` (a leaked password, at 3 a.m.) the page still said
    "logged in as operator" and answered every click "authentication failed", the old
    password kept in memory, with nothing but Log out as a way on. The group's refusal
    now ends that login (no `status` in the answer: the page shows its login form,
    as for an expired login), and the new password logs in and acts."""
    bus = SecureBus(tmp_path / "bus")
    assert bus.config_path is not None
    add_principal(bus.config_path, "operator", ["--manage", "1.1*"])
    bus.start()
    web, url = start_web(bus.config_path, "--admin")
    try:
        page = WebSession(url)
        assert page.login("operator", password_of("operator"))[0] == 200
        assert page.act("browse", queue="1.10")[0] == 200
        (tmp_path / "new.pw").write_text("rotated at 3 a.m.")
        mrs("creds", "rotate", "operator", "--config", str(bus.config_path),
            "--password-file", str(tmp_path / "new.pw"), "--iterations", "1000")  # fmt: skip
        give_up_s = time.monotonic() + 30  # group 1 reads the file again within 0.5 s
        refused = page.act("browse", queue="1.10")
        while refused[0] == 200 and time.monotonic() < give_up_s:
            refused = page.act("browse", queue="1.10")
        session = page.get_session()
        again = page.login("operator", "rotated at 3 a.m.")
        browsed = page.act("browse", queue="1.10")
    finally:
        stop_web(web)
        bus.stop()
    assert refused == (403, {"error": "group 1: authentication failed for 'operator' "
                                      "(its password changed, or it was removed, since "
                                      "this login)"}), refused  # fmt: skip
    assert session["principal"] is None and session["login_required"] is True
    assert again[0] == 200 and browsed[0] == 200, (again, browsed)
