"""The operator's console (`mrs admin`, the web pages' actions) used as an operator at
3 a.m. uses it, on real `mrs serve` and `mrs web` processes over real TCP and HTTP:
a queue deeper than one browse page, an admin journal watched by a script, the web
page's refusals and its grant rule, a value of the wrong type, and the web page's
"Next page" in a real Chromium on a group whose seqs pass 2**53."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from clients import PutItem, connect_sync
from mrs.errors import BadParameter
from mrs.ops.admin_actions import JOURNAL_FILE_NAME
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.auth_helpers import SecureBus, add_principal, creds, password_of
from tests.cli_helpers import run_mrs
from tests.process.test_web_bus_admin import WebSession, _web_endpoint, start_web, stop_web
from tests.process.test_web_probes import _chromium

pytestmark = pytest.mark.xdist_group("admin")

DEEP = 1_200
"""Messages on the deep queue: more than one browse may show (1,000)."""


def _admin(address: str, *argv: str) -> subprocess.CompletedProcess:
    return run_mrs("admin", *argv, "--address", address)


def _put_orders(address: str, first: int, count: int, target: str = "ORDERS") -> None:
    items = [PutItem(b"order %d" % i, target) for i in range(first, first + count)]
    with connect_sync(address, "SENDER") as client:
        assert all(not isinstance(psb, Exception) for psb in client.put_many(items))


def _journal_actions(data_dir: Path) -> list[str]:
    path = data_dir / JOURNAL_FILE_NAME
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line)["action"] for line in lines]


def test_browse_pages_past_the_first_thousand_while_messages_come_and_go(make_bus) -> None:
    """`mrs admin browse` showed at most the first 1,000 waiting messages and had no
    way on: message 1,001 of a deep queue could not be seen. A page now ends with
    where the next starts (`next page: --after SEQ`, `next_after`), and the next page
    is the messages after that one, whatever arrived or was taken meanwhile."""
    bus = make_bus(limits="dqf_messages_max = 5000")
    _put_orders(bus.address, 0, DEEP)
    first = _admin(bus.address, "browse", "ORDERS", "--limit", "1000", "--json")
    assert first.returncode == 0, first.stderr
    page = json.loads(first.stdout)
    assert [m["preview"] for m in page["messages"]] == [f"order {i}" for i in range(1000)]
    assert page["next_after"] == page["messages"][-1]["seq"], page["next_after"]
    _put_orders(bus.address, DEEP, 5)  # more arrive between the pages...
    with connect_sync(bus.address, "ORDERS") as consumer:  # ...and the first three leave
        for _ in range(3):
            consumer.confirm(consumer.get(timeout=10.0).seq)
    after = str(page["next_after"])
    second = _admin(bus.address, "browse", "ORDERS", "--limit", "1000", "--after", after, "--json")
    assert second.returncode == 0, second.stderr
    rest = json.loads(second.stdout)
    wanted = [f"order {i}" for i in range(1000, DEEP + 5)]
    assert [m["preview"] for m in rest["messages"]] == wanted
    assert rest["next_after"] is None and rest["waiting"] == DEEP + 2
    table = _admin(bus.address, "browse", "ORDERS", "--limit", "2", "--after", after)
    assert table.returncode == 0, table.stderr
    assert "order 1000" in table.stdout and "order 1001" in table.stdout, table.stdout
    assert f"next page: --after {rest['messages'][1]['seq']}" in table.stdout, table.stdout
    picked = _admin(bus.address, "browse", "ORDERS", "--contains", "order 11", "--limit", "3",
                    "--after", after, "--json")  # fmt: skip
    assert [m["preview"] for m in json.loads(picked.stdout)["messages"]] == [
        "order 1100", "order 1101", "order 1102"
    ]  # fmt: skip
    gone = _admin(bus.address, "browse", "ORDERS", "--limit", "1", "--after",
                  str(page["messages"][0]["seq"]), "--json")  # fmt: skip
    answer = json.loads(gone.stdout)  # the message after which to go on was taken
    assert answer["after_gone"] and answer["messages"][0]["preview"] == "order 3", answer
    assert "Traceback" not in bus.log_text()


def test_a_look_is_logged_and_a_change_or_a_refusal_is_journaled(bus) -> None:
    """Every browse and connections was appended to the admin journal and synced, and
    committed to the group's journals: a script watching `mrs admin connections`
    cost a synced write per look, grew the file without end, and pushed the last
    purge out of the 10,000 lines `mrs admin journal` shows. A look done is now its
    log line only; a change, and a refused look, are journaled."""
    _put_orders(bus.address, 0, 3)
    for argv in (("browse", "ORDERS"), ("connections",), ("journal",)) * 3:
        assert _admin(bus.address, *argv).returncode == 0
    refused = _admin(bus.address, "browse", "NOPE")
    assert refused.returncode == 1, refused
    purged = _admin(bus.address, "purge", "ORDERS", "--reason", "bad feed")
    assert purged.returncode == 0, purged.stderr
    assert _journal_actions(bus.data_dir) == ["browse", "purge"]  # the refused look; the purge
    shown = json.loads(_admin(bus.address, "journal", "--json").stdout)["records"]
    assert [(r["action"], "refused" in r["result"]) for r in shown] == [
        ("browse", True), ("purge", False)
    ]  # fmt: skip
    log = bus.log_text()
    # the three looks are one line (throttled, test_ops_edges_26), the refused one its
    # own; on a slow host the throttle's count of the other two may follow in a line
    browses = [
        line
        for line in log.splitlines()
        if "admin browse by (no auth)" in line and "more since the last such line" not in line
    ]
    assert len(browses) == 2 and "admin connections by" in log
    assert "admin journal by (no auth)" in log


def test_a_value_of_the_wrong_type_is_named_by_its_type(bus) -> None:
    """A limit given as 1.5 (or [5]) was written into the bus file as a string and
    refused as "got string '1.5'": the operator looked for quotes they never typed."""
    before = bus.config_path.read_text()
    with connect_sync(bus.address, None) as client:
        for value, words in ((1.5, "got float 1.5"), ([5], "got an array")):
            with pytest.raises(BadParameter) as refused:
                client.admin("set_limits", queue="ORDERS", unconfirmed_max=value)
            assert words in str(refused.value) and "string" not in str(refused.value)
    assert bus.config_path.read_text() == before


@pytest.fixture
def secure_web(tmp_path: Path):
    bus = SecureBus(tmp_path / "bus")
    assert bus.config_path is not None
    add_principal(bus.config_path, "boss", ["--manage", "*", "--admin", "config"])
    add_principal(bus.config_path, "viewer", ["--attach", "1.10"])
    bus.start()
    web, url = start_web(bus.config_path, "--admin")
    page = WebSession(url)
    assert page.login("boss", password_of("boss"))[0] == 200
    yield bus, page
    stop_web(web)
    bus.stop()


def test_the_web_page_keeps_the_grant_rule_and_speaks_its_own_words(secure_web) -> None:
    """The web page's "Replace grants" with every field empty took every grant away
    (`mrs admin grant` refuses that without --none: the rule was the command line's
    alone), and the page's refusals named options it does not have ("move --to").
    Both now follow one rule, in the page's words; a link principal takes no grant
    from the page either."""
    bus, page = secure_web
    text_before = (bus.directory / "creds.toml").read_text()
    status, refused = page.act("grant", principal="viewer")
    assert status == 400 and "ticked" in refused["error"] and "--" not in refused["error"]
    status, both = page.act("grant", principal="viewer", none=True, attach=["1.10"])
    assert status == 400 and "with rights given" in both["error"]
    status, link = page.act("grant", principal="group:1", attach=["1.*"])
    assert status == 400 and "link credential" in link["error"], link
    assert (bus.directory / "creds.toml").read_text() == text_before
    with connect_sync(bus.address(1), "1.10", credentials=creds("viewer")) as client:
        assert str(client.queue) == "1.10"  # the grants it had
    status, moved = page.act("move", queue="1.10", to="NOPE")
    assert status == 400 and moved["error"] == "group 1: move to: no queue 'NOPE'", moved
    boss = {"MRS_AUTH_NAME": "boss", "MRS_AUTH_PASSWORD": password_of("boss")}
    cli = run_mrs("admin", "move", "1.10", "--to", "NOPE", "--address", bus.address(1), env=boss)
    assert cli.returncode == 1 and "move --to: no queue 'NOPE'" in cli.stderr, cli.stderr
    status, taken = page.act("grant", principal="viewer", none=True)
    assert status == 200 and taken["attach"] == [], taken
    assert "viewer" in (bus.directory / "creds.toml").read_text()


def _group_twenty(tmp_path: Path) -> Path:
    """A one-group bus whose group is 20: its seqs are past 2**53 (the group is in a
    seq's top bits), which a JavaScript number cannot hold exactly."""
    config = tmp_path / "bus.toml"
    config.write_text(f"""
[[group]]
id = 20
name = "G20"
listen = "127.0.0.1:{free_port()}"
data_dir = "g20"
[group.ops]
web_listen = "127.0.0.1:0"
web_admin = true
[[group.queue]]
id = 10
name = "ORDERS"
[[group.queue]]
id = 13
name = "SENDER"
""")
    return config


def test_the_web_page_pages_through_a_queue_with_exact_seqs(tmp_path: Path) -> None:
    """The web page's browse showed the first 50 and no more; on a group numbered 16
    or above its seqs (past 2**53) were rounded by the page's JSON parse, so a row
    showed a seq no message has. "Next page" now shows the 50 after, by the exact
    seq of the last row."""
    from tests.browser_cdp import Browser

    group = GroupProcess(_group_twenty(tmp_path), 20)
    group.start()
    try:
        _put_orders(group.address, 0, 60, target="20.10")
        with connect_sync(group.address, None) as client:
            seqs = [m["seq"] for m in client.admin("browse", queue="20.10", limit=60)["messages"]]
        assert seqs[0] > 2**53
        browser = Browser(_chromium())
        try:
            browser.open(_web_endpoint(group.address))
            browser.until("document.body.dataset.admin === 'acting'")
            browser.evaluate("document.getElementById('act-queue').value = 'ORDERS';"
                             "document.getElementById('act-browse').click(); true")  # fmt: skip
            browser.until("document.body.dataset.browsed === '20.10:50'")
            assert browser.evaluate("document.body.dataset.browseNext") == str(seqs[49])
            assert browser.evaluate("document.getElementById('act-next').hidden") is False
            browser.evaluate("document.getElementById('act-next').click(); true")
            browser.until("document.body.dataset.browsed === '20.10:10'")
            shown = browser.evaluate(
                "Array.from(document.querySelectorAll('#act-table tbody tr'))"
                ".map(row => row.cells[0].textContent).join(' ')"
            )
            assert browser.evaluate("document.getElementById('act-next').hidden") is True
        finally:
            browser.close()
    finally:
        group.terminate()
    assert shown == " ".join(str(seq) for seq in seqs[50:]), shown
