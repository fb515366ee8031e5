"""The thirty-first session's changes reviewed as a hostile tester would (session 31,
reviewer): a leaked password's sessions cut off by `remove` + `add` while a login
with it is under way (a client connection, a web console login). Real `mrs serve`
processes where the group's behaviour is the point. Each test names the defect it
found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, NoMoreMessages, NotAuthorized, connect
from mrs.ops.http_endpoint import Request
from mrs.ops.web_admin import LOGIN_COOKIE, WebAdmin
from tests.auth_helpers import PRINCIPALS, SecureBus, creds
from tests.process.test_auth_lifecycle import wait_for_log
from tests.process.test_security_probe_31 import readd

WAIT_S = 20.0


class _ProofHeld(trio.abc.Stream):
    """A client's stream whose second write (the SCRAM proof, after the hello) waits
    for `release`: a login whose proof is on its way while the group reloads."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.writes = 0
        self.proof_ready = trio.Event()
        self.release = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes += 1
        if self.writes == 2:
            self.proof_ready.set()
            await self.release.wait()
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.stream.aclose()


def _reloads(log: Path) -> int:
    return log.read_text(errors="replace").count("credentials reloaded")


async def test_a_login_under_way_when_its_principal_is_added_again_is_refused(
    tmp_path: Path,
) -> None:
    """Defect: a connection that had proved the leaked password's principal when the
    group read `remove` + `add` (its proof on its way, or its answer being sent)
    was admitted with the old incarnation and never checked again: the leaked
    password kept a live session that the docs' cut-off was meant to end, until the
    next change of the file. Now the group checks the incarnation once the exchange
    is over and ends such a connection NOTAUTHORIZED."""
    bus = SecureBus(tmp_path / "bus", group_ids=(1,))
    assert bus.config_path is not None
    text = bus.config_path.read_text().replace("handshake_s_max = 2.0", "handshake_s_max = 15.0")
    bus.config_path.write_text(text)
    bus.start()
    log = tmp_path / "bus" / "group1.log"
    new_password = tmp_path / "new.pw"
    new_password.write_text("a brand new password\n")
    held: list[_ProofHeld] = []

    async def open_held(host: str, port: int) -> trio.abc.Stream:
        held.append(_ProofHeld(await trio.open_tcp_stream(host, port)))
        return held[-1]

    async def leaked_session() -> None:
        async with connect(
            bus.address(1), "1.13", credentials=creds("producer"), open_stream=open_held,
            reconnect=None,
        ) as leaked:  # fmt: skip
            await leaked.put(b"leaked", target="1.10", delivery=DeliveryMode.WF_DQF)

    try:
        async with trio.open_nursery() as nursery:
            failures: list[BaseException] = []

            async def run() -> None:
                try:
                    await leaked_session()
                except NotAuthorized as error:
                    failures.append(error)

            nursery.start_soon(run)
            with trio.fail_after(WAIT_S):
                while not held:
                    await trio.sleep(0.01)
                await held[0].proof_ready.wait()
                before = _reloads(log)
                readd(bus.config_path, "producer", PRINCIPALS["producer"], new_password)
                while _reloads(log) == before:
                    await trio.sleep(0.02)
            held[0].release.set()
        assert failures and "removed and added again" in str(failures[0]), failures
        async with connect(bus.address(1), "1.10", credentials=creds("consumer")) as reader:
            with pytest.raises(NoMoreMessages):
                await reader.get(timeout=0)  # nothing the leaked password put
        await wait_for_log(log, "removed and added again")
    finally:
        bus.stop()


class _Principal:
    def __init__(self, incarnation: str) -> None:
        self.incarnation = incarnation


class _Authority:
    """The group's credentials as the page reads them: `operator`, whose incarnation
    a `remove` + `add` changes (`readd`)."""

    def __init__(self) -> None:
        self.creds = {"operator": _Principal("old")}

    def readd(self) -> None:
        self.creds = {"operator": _Principal("new")}

    def revoked(self, name: str, incarnation: str) -> str | None:
        known = self.creds.get(name)
        return None if known is not None and known.incarnation == incarnation else "re-added"


async def test_a_web_login_checked_while_its_principal_is_added_again_ends() -> None:
    """Defect: the group page's login checks the password off the event loop, then
    took the principal's incarnation as of the answer. A `remove` + `add` read
    during the check gave the login made with the leaked (old) password the new
    addition's incarnation, so it was never ended: it went on acting. Now such a
    login is answered 503 (log in again) and holds nothing. The check is the page's
    own `password_ok`, during which the credentials are reloaded."""
    authority = _Authority()
    page = WebAdmin(None, authority)  # type: ignore[arg-type]

    async def checked_while_readded(name: str, password: str) -> bool:
        authority.readd()  # the group reads the file while the PBKDF2 runs
        return password == "the leaked password"

    page.password_ok = checked_while_readded  # type: ignore[method-assign]
    csrf = "t" * 32
    request = Request(
        "POST", "/api/admin/login", "",
        headers={"content-type": "application/json", "cookie": f"{LOGIN_COOKIE}={csrf}"},
        body=json.dumps({"name": "operator", "password": "the leaked password",
                         "csrf": csrf}).encode(),
    )  # fmt: skip
    answer = await page.login(request)
    assert answer.status == 503, answer
    assert b"log in again" in answer.body
    assert not page.logins
