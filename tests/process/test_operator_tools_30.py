"""The operator's tools other than `mrs admin`, used from a shell at 3 a.m.: a wait
that never ends (`mrs status`/`mrs web --timeout 1e308`), the bus page's admin boxes
given a queue of no queue's shape, `mrs jplay --timeout 1e308`, and a `mrs
dlq-handler --window` larger than a connection's gets. Each mistake is one line and an
exit status (or the page's 400), before any group is asked."""

from __future__ import annotations

import pytest

from clients import connect_sync
from sim.ports import free_port
from tests.cli_helpers import one_line, run_mrs
from tests.process.test_admin_console_25b import _bus_file, two_groups  # noqa: F401
from tests.process.test_web_bus_admin import WebSession, start_web, stop_web

pytestmark = pytest.mark.xdist_group("admin")


@pytest.mark.parametrize("command", ["status", "web"])
@pytest.mark.parametrize("value", ["1e308", "1e-300"])
def test_a_wait_for_each_group_out_of_range_is_refused_at_parse_time(
    tmp_path, command: str, value: str
) -> None:
    """`--timeout 1e308` was taken (only inf was not): a group that accepted the
    connection and never answered held `mrs status` and each poll of `mrs web` for
    good; 1e-300 showed every serving group DOWN, as 0 did. Now exit 2, one line
    naming the range, before anything is asked or served."""
    config = _bus_file(tmp_path)
    where = ["--listen", "127.0.0.1:0"] if command == "web" else []
    result = run_mrs(command, "--config", str(config), *where, "--timeout", value, timeout_s=30)
    one_line(result, 2, "--timeout", "must be a number of seconds 0.01..600", value)
    assert result.stdout == ""


def test_the_bus_page_refuses_a_queue_of_no_queue_shape_in_mrs_admin_words(
    two_groups,  # noqa: F811
) -> None:
    """`mrs admin browse .` says what is wrong with the text; the bus page answered `.`
    and `.ORDERS1` "no group ''" and sent `1.` to group 1 ("no queue '1.'"). Now the
    page refuses each in `mrs admin`'s words before a group is asked, a move's `to`
    too, and nothing is moved."""
    config, groups = two_groups
    with connect_sync(groups[1].address, "ORDERS1") as client:
        client.put(b"kept", "ORDERS1")
    web, url = start_web(config, "--admin")
    try:
        page = WebSession(url)
        answers = {
            queue: page.act("browse", queue=queue) for queue in (".", ".ORDERS1", "1.", "LDN.")
        }
        move_to = page.act("move", queue="ORDERS1", to="1.")
        purge = page.act("purge", queue=".ORDERS1")
    finally:
        stop_web(web)
    for queue, (status, body) in answers.items():
        cli = run_mrs("admin", "browse", queue, "--config", str(config))
        words = one_line(cli, 2).removeprefix("mrs: admin: ")
        assert (status, body) == (400, {"error": f"browse: {words}"}), (queue, body)
    assert move_to[0] == 400, move_to
    assert move_to[1]["error"].startswith("move: to '1.' has nothing after its dot"), move_to
    assert purge[0] == 400 and "has nothing before its dot" in purge[1]["error"], purge
    with connect_sync(groups[1].address, "ORDERS1") as client:
        assert client.get(timeout=10).body == b"kept"


def test_jplay_takes_a_put_timeout_longer_than_the_wire_carries(two_groups) -> None:  # noqa: F811
    """`mrs jplay --timeout 1e308` ended "mrs: unexpected error: OverflowError"
    (1e308 s in ms is inf, and round(inf) raised in the client's put); a longer
    timeout than the wire carries is that long, as the docs say of any put."""
    config, groups = two_groups
    with connect_sync(groups[1].address, "ORDERS1") as client:
        client.put(b"dead letter", "ORDERS1")
    assert run_mrs("admin", "purge", "ORDERS1", "--config", str(config)).returncode == 0
    replay = run_mrs(
        "jplay", "--config", str(config), "--group", "1", "dlj", "--to", "ORDERS1",
        "--timeout", "1e308",
    )  # fmt: skip
    assert replay.returncode == 0, replay.stderr
    assert "sent 1," in replay.stderr and "unexpected error" not in replay.stderr
    with connect_sync(groups[1].address, "ORDERS1") as client:
        assert client.get(timeout=10).body == b"dead letter"


@pytest.mark.parametrize("window", ["1025", "99999999999"])
def test_a_dlq_handler_window_beyond_a_connections_gets_is_refused(tmp_path, window) -> None:
    """Each of `--window`'s takers keeps a get waiting, and a connection holds at most
    1024 messages got or coming: `--window 3000` was refused mid-run "group 1
    refused: EXCEEDQUOTA", exit 3, as if the group were at fault, and 99999999999
    started takers until the kernel killed the handler. `--check` says so too, as it
    makes every check the handler makes."""
    rules = tmp_path / "t.rules"
    rules.write_text("ACTION(IGNORE)\n")
    for mode in (["--check"], ["--once", "--address", f"127.0.0.1:{free_port()}"]):
        result = run_mrs("dlq-handler", *mode, "--window", window, str(rules), timeout_s=30)
        one_line(result, 2, "--window must be from 1 to 1024", f"not {window}")
