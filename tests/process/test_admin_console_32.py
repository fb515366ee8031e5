"""The operator's console when an action's answer does not come: `mrs admin`, the
group's own web page and the bus page (`mrs web --admin`), against servers scripted
to hold an answer (as a replicated group holds every answer while no replica in sync
is linked) or to drop the connection once the request is in.

What an operator depends on: an action that changes the group (purge, move, a limit)
and got no answer is said to be possibly done, so nobody presses Purge again
believing nothing happened, nor stops looking; a look (browse) that got none is said
to have changed nothing.
"""

from __future__ import annotations

import argparse
import math
import queue
import threading
from pathlib import Path

import pytest
import trio

from clients import ReplyTimeout, connect
from mrs import protocol as wire
from mrs.model import Status
from mrs.ops.http_endpoint import Request
from mrs.ops.web_admin import WebAdmin, WebLogin
from tests.client_helpers import CLOSE, scripted_server, silent_server

WAIT_S = 0.3
"""The admin wait the tests give instead of ADMIN_REQUEST_WAIT_S's 60 s."""
MAY_BE_DONE = "it may or may not be done"
CHANGED_NOTHING = "it changed nothing on the group"


def _request() -> Request:
    return Request("POST", "/api/admin/act", "", {}, b"", "127.0.0.1:1")


async def test_an_unanswered_admin_change_may_be_done_and_a_look_changed_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`Client.admin` (what `mrs admin` and the bus page send) past its wait. Before:
    "AdminRequest: no answer from HOST within 60 s" for a purge that the replicated
    group's active had done and was holding its answer for (both replicas down)."""
    monkeypatch.setattr("clients.connection.ADMIN_REQUEST_WAIT_S", WAIT_S)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(silent_server)
        async with connect(f"127.0.0.1:{port}", queue=None, reconnect=None) as client:
            with trio.fail_after(10), pytest.raises(ReplyTimeout) as purge:
                await client.admin("purge", queue="ORDERS")
            with trio.fail_after(10), pytest.raises(ReplyTimeout) as browse:
                await client.admin("browse", queue="ORDERS")
        nursery.cancel_scope.cancel()
    assert f"purge: no answer from 127.0.0.1:{port} within {WAIT_S:g} s" in str(purge.value)
    assert MAY_BE_DONE in str(purge.value) and "ANSWERS HELD" in str(purge.value)
    assert CHANGED_NOTHING in str(browse.value)


def _silent_server_thread() -> int:
    """A silent server (handshake answered, requests never) in a thread of its own,
    for a command that runs its own event loop; its port."""
    ports: queue.Queue[int] = queue.Queue()

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            ports.put(await nursery.start(silent_server))

    threading.Thread(target=trio.run, args=(serve,), daemon=True).start()
    return ports.get(timeout=10)


def test_mrs_admin_says_an_unanswered_purge_may_be_done(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The line `mrs admin purge` prints, exit 1: it names the wait and that the
    purge may be done, and where to look."""
    from mrs.tools.cli import main

    monkeypatch.setattr("clients.connection.ADMIN_REQUEST_WAIT_S", WAIT_S)
    port = _silent_server_thread()
    assert main(["admin", "purge", "ORDERS", "--address", f"127.0.0.1:{port}"]) == 1
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and MAY_BE_DONE in line and "admin journal" in line, line


async def test_the_group_page_says_an_unanswered_action_may_be_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The group's own page (`web_admin = true`) when its action is not answered in
    time: before, 500 "no answer from the group in time" for a limit set (and kept)."""
    monkeypatch.setattr("mrs.ops.web_admin.ADMIN_REQUEST_WAIT_S", WAIT_S)
    page = WebAdmin(lambda asker, request: None, None)  # type: ignore[arg-type]
    login = WebLogin(None, "csrf", math.inf)
    args = {"queue": "ORDERS", "unconfirmed_max": 5}
    with trio.fail_after(10):
        changed = await page.perform(login, _request(), {}, "set_limits", args)
        looked = await page.perform(login, _request(), {}, "browse", {"queue": "ORDERS"})
    assert changed.status == 500 and MAY_BE_DONE.encode() in changed.body, changed
    assert CHANGED_NOTHING.encode() in looked.body, looked


async def _closing_server(task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Answers the handshake, then closes the connection on the first AdminRequest (an
    active killed while it acts)."""
    await scripted_server(
        lambda event: [CLOSE] if isinstance(event, wire.AdminRequest) else [],
        task_status=task_status,
    )


def _bus_page(directory: Path, port: int):
    """`mrs web --admin`'s action endpoints for a one-group bus served at `port`."""
    from mrs.config.bus import load_config
    from mrs.tools.bus_status import targets_from_args
    from mrs.tools.web_actions import BusWebAdmin

    config = directory / "bus.toml"
    config.write_text(
        f'[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:{port}"\ndata_dir = "g1"\n'
        '[[group.queue]]\nid = 10\nname = "ORDERS"\n'
    )
    args = argparse.Namespace(address=None, config=config, group=None)
    return BusWebAdmin(load_config(config), targets_from_args(args)[0])


async def test_the_bus_page_says_a_purge_lost_or_unanswered_may_be_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bus page's purge whose connection is lost once it is sent (its active
    killed under it) and one whose answer does not come. Before: "group 1: server
    closed the connection" (the page: "then stopped: ...", read as nothing done by the
    request under way) and "group 1: no answer in time"."""
    monkeypatch.setattr("mrs.tools.web_actions.ADMIN_REQUEST_WAIT_S", WAIT_S)
    login = WebLogin(None, "csrf", math.inf)
    purge = {"queue": "1.10"}
    async with trio.open_nursery() as nursery:
        closing = await nursery.start(_closing_server)
        silent = await nursery.start(silent_server)
        with trio.fail_after(20):
            lost = await _bus_page(tmp_path, closing).perform(login, _request(), {}, "purge", purge)
            (tmp_path / "silent").mkdir()
            held = await _bus_page(tmp_path / "silent", silent).perform(
                login, _request(), {}, "purge", purge
            )
        nursery.cancel_scope.cancel()
    assert lost.status == 502 and MAY_BE_DONE.encode() in lost.body, lost
    assert held.status == 504 and MAY_BE_DONE.encode() in held.body, held


def _refusing_server_thread() -> int:
    """A server that refuses every connection as a group under [auth] refuses one
    without credentials, in a thread of its own; its port."""
    ports: queue.Queue[int] = queue.Queue()

    async def refuse(stream: trio.SocketStream) -> None:
        connection = wire.Connection("server")
        while data := await stream.receive_some(65536):
            connection.receive_data(data)
            for _event in connection.events():
                line = "group 1 requires authentication: connect with credentials"
                await stream.send_all(connection.send(wire.Fatal(Status.NOTAUTHORIZED, line)))
                await stream.aclose()
                return

    async def serve() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        ports.put(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(refuse, listeners)

    threading.Thread(target=trio.run, args=(serve,), daemon=True).start()
    return ports.get(timeout=10)


def test_mrs_admin_refused_without_credentials_says_how_to_give_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: "mrs: admin: group 1 requires authentication: connect with
    credentials", and `mrs admin` has no option for them: they are read from
    MRS_AUTH_NAME and MRS_AUTH_PASSWORD_FILE."""
    from mrs.tools.cli import main

    monkeypatch.delenv("MRS_AUTH_NAME", raising=False)
    port = _refusing_server_thread()
    assert main(["admin", "purge", "ORDERS", "--address", f"127.0.0.1:{port}"]) == 1
    line = capsys.readouterr().err.strip()
    assert "requires authentication" in line and "MRS_AUTH_NAME" in line, line
