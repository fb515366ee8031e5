"""The bus-wide web view's actions (`mrs web --admin`): the group page's browse, purge,
move, connections and run-time changes, for any group of the bus.

Why through the client protocol: `mrs web` runs beside the groups, not in one, so each
action is the same AdminRequest `mrs admin` sends (tags 70/71), to the group that owns
the queue, answered by that group's mrs.ops.admin_actions with the same rights and
written in that group's admin journal. The login, the session cookie and the CSRF rules
are the group page's (mrs.ops.web_admin.WebAdmin); what differs is who checks the
password and who acts:

- Under [auth] the password is checked by a group of the bus (a connection made with
  it: the group checks its SCRAM verifier), and kept with the login, in this process's
  memory only, so each action connects to its group as that principal (and is
  journaled with it). It is forgotten at logout or after WEB_SESSION_S.
- Without [auth] no login is asked; the groups journal "(no auth)".

Read-only stays the default: without `--admin` the bus page has no action endpoints.
"""

from __future__ import annotations

import logging
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from mrs.errors import ConnectionLost
from mrs.limits import ADMIN_REQUEST_WAIT_S
from mrs.model import Status
from mrs.ops.http_endpoint import Request, Response
from mrs.ops.web_admin import (
    WebAdmin,
    WebLogin,
    json_answer,
    refused_answer,
    unanswered_line,
)
from mrs.protocol.admin_events import ADMIN_LOOKS

if TYPE_CHECKING:
    from mrs.config.bus import BusConfig
    from mrs.tools.group_view import GroupView

log = logging.getLogger("mrs.web")

CONNECT_TIMEOUT_S = 5.0
"""Seconds to reach a group for one action or a password check."""
CONNECT_ACTIVE_WAIT_S = 10.0
"""Seconds an action waits for a replicated group's active while none answers (a
failover: the lease's TTL and a second), within ADMIN_REQUEST_WAIT_S."""
PASSWORD_ASK_STAGGER_S = 1.0
"""A login asks the next group of the bus when the last has not answered by then."""


class BusWebAdmin(WebAdmin):
    """The login and the action endpoints of `mrs web --admin`."""

    def __init__(self, bus: BusConfig, views: list[GroupView]) -> None:
        super().__init__(None, None)
        self.bus = bus
        self.views = {view.group: view for view in views if view.group is not None}
        self.login_required = bus.auth is not None
        self._bus_file = _file_key(Path(bus.path))
        """The bus file's identity when `bus` was read (`bus_now`)."""

    def _current(self, request: Request) -> WebLogin | None:
        self.forget_expired()
        return super()._current(request)

    def forget_expired(self) -> None:
        """Drop the logins past WEB_SESSION_S, with the passwords they hold (called
        for each request and once a second by `mrs web`). Why: the base class only
        stops answering to an expired login, so the principal's password stayed in
        this process's memory until 256 newer logins pushed it out, not "forgotten
        after 8 hours" as docs/operations.md promises."""
        now_s = time.monotonic()
        for token in [t for t, login in self.logins.items() if login.expires_s < now_s]:
            del self.logins[token]

    def bus_now(self) -> BusConfig:
        """The bus file as it is now, read again whenever it changed (else the last
        good reading, a file that does not parse now included). Why: the queues a
        group has change at run time (add-queue, from this page too), and a queue
        added a moment ago was answered "no queue 'NAME' in any group"."""
        from mrs.config.bus import ConfigError, load_config

        path = Path(self.bus.path)
        key = _file_key(path)
        if key is not None and key != self._bus_file:
            self._bus_file = key
            try:
                self.bus = load_config(path)
            except (ConfigError, OSError, ValueError) as error:  # mid-edit: the last good one
                log.warning("%s: not read again (%s): its last good reading serves", path, error)
        return self.bus

    def session_extra(self) -> dict:
        return {
            "groups": [
                {"group": group.id, "name": group.name}
                for group in self.bus_now().groups.values()
                if group.id in self.views
            ]
        }

    def kept_password(self, password: str) -> str | None:
        return password

    async def password_ok(self, name: str, password: str) -> bool | str:
        """Asked of the groups, the next one PASSWORD_ASK_STAGGER_S after the last
        (or as soon as it fails): the first that answers says yes or no. Why staggered
        and not in turn: a group whose host hangs (no answer, not even a refusal) took
        the whole login deadline, and while group 1 hung nobody could log in to act on
        the others; all at once would have every wrong password refused by every group.
        A name no principal can have (`ops@corp`, `john smith`, a link's `group:N`) is
        wrong at once, as on the group's own page: it was sent to no group and answered
        503 "cannot check the password now: group 2 did not answer"."""
        if not _could_log_in(name, password):
            return False
        verdict: list[bool] = []
        failures: list[str] = []
        async with self.password_checks, trio.open_nursery() as nursery:
            for group_id in self.views:  # the first verdict cancels the rest (and this loop)
                asked = trio.Event()
                answer = _Answer(verdict, failures, asked, nursery.cancel_scope)
                nursery.start_soon(self._ask, group_id, name, password, answer)
                with trio.move_on_after(PASSWORD_ASK_STAGGER_S):
                    await asked.wait()
        if verdict:
            return verdict[0]
        last = failures[-1] if failures else "no group of the bus answered"
        return f"cannot check the password now: {last}"

    async def _ask(self, group_id: int, name: str, password: str, answer: _Answer) -> None:
        """One group's word on the password, into `answer`."""
        from mrs.errors import NotAuthorized

        try:
            async with self._connect(group_id, name, password):
                answer.verdict.append(True)
        except NotAuthorized:
            answer.verdict.append(False)
        except Exception as error:  # noqa: BLE001 - a group down: ask the next one
            reason = getattr(error, "message", error)
            answer.failures.append(f"group {group_id} did not answer ({reason})")
        finally:
            answer.asked.set()
        if answer.verdict:
            answer.all_asks.cancel()

    def _connect(self, group_id: int, name: str | None, password: str | None):
        from clients import ClientCredentials, connect
        from mrs.tools.reach_active import handshake_wait_s

        view = self.views[group_id]
        credentials = ClientCredentials(name, password) if name and password else None
        instances = len(view.address.split(","))
        return connect(
            view.address,
            queue=None,
            program="mrs web",
            connect_timeout_s=min(
                CONNECT_TIMEOUT_S, handshake_wait_s(CONNECT_ACTIVE_WAIT_S, instances)
            ),
            reconnect=None,
            heartbeat_s=None,
            credentials=credentials,
            **view.connect_options,
        )

    async def perform(
        self, login: WebLogin, request: Request, form: dict, action: str, args: dict
    ) -> Response:
        """The action sent to its group as the login's principal; that group's answer."""
        group_id = self.group_of(form.get("group"), args, action)
        if isinstance(group_id, str):
            return json_answer(400, {"error": group_id})
        try:
            with trio.fail_after(ADMIN_REQUEST_WAIT_S):
                async with AsyncExitStack() as stack:
                    client = await self._open_active(stack, group_id, login)
                    result = await client.admin(action, **args)
        except trio.TooSlowError:
            line = unanswered_line(action, ADMIN_REQUEST_WAIT_S)
            return json_answer(504, {"error": f"group {group_id}: {line}"})
        except ConnectionLost as lost:  # sent (a connect's is _Unreachable): done or not
            return json_answer(502, {"error": f"group {group_id}: {_lost_line(action, lost)}"})
        except _Unreachable as unreachable:
            return json_answer(502, {"error": f"group {group_id}: {unreachable}"})
        except _LoginRefused as refused:
            # The page's login is over: no `status`, so the page shows its login form.
            found = self._current_token(request)
            if found is not None:
                del self.logins[found[0]]  # and the password it kept with it
            return json_answer(403, {"error": f"group {group_id}: {refused}"})
        except Exception as error:  # noqa: BLE001 - the group's answer, as one line
            status = getattr(error, "status", None)
            message = getattr(error, "message", None) or str(error)
            if status is None or status in (Status.LINK_DOWN, Status.TIMEOUT):
                return json_answer(502, {"error": f"group {group_id}: {message}"})
            return refused_answer(int(status), f"group {group_id}: {message}")
        return json_answer(200, {"group": group_id, **result})

    async def _open_active(self, stack: AsyncExitStack, group_id: int, login: WebLogin) -> Any:
        """The client connected to the group as the login's principal: a replicated
        group's active, waited for up to CONNECT_ACTIVE_WAIT_S during a failover (before,
        an action then was answered at once `all attempts to connect ... failed`);
        _Unreachable with `mrs status`'s words when none answers."""
        from mrs.errors import NotAuthorized
        from mrs.tools.reach_active import open_active, unreachable_line

        view = self.views[group_id]
        instances = max(len(view.instances), len(view.address.split(",")))
        try:
            return await open_active(
                stack,
                lambda: self._connect(group_id, login.principal, login.password),
                instances,
                CONNECT_ACTIVE_WAIT_S,
            )
        except NotAuthorized as refused:
            # Why: the principal's password was rotated or the principal removed since
            # the login. The page said "logged in as NAME" and answered each action
            # "authentication failed" with no way on but finding Log out.
            why = getattr(refused, "message", refused)
            raise _LoginRefused(
                f"{why} (its password changed, or it was removed, since this login)"
            ) from None
        except ConnectionLost as lost:
            line = await unreachable_line(
                lost,
                view.address,
                view.coordinator,
                view.group,
                CONNECT_ACTIVE_WAIT_S,
                view.config_path,
            )
            raise _Unreachable(line) from None

    def group_of(self, chosen: Any, args: dict, action: str = "") -> int | str:
        """The group to act on: the one the form names, else the one a `G.Q` or
        `GROUP.NAME` queue names, else the group with a queue of that name, else the
        bus's only group (for a grant, its first: the credentials file is the bus's,
        every group reloads it); or a one-line mistake. `mrs admin --config` reads a
        queue so (mrs.tools.admin `_group_of`): before, `LDN.REPLAY`, which its refusal
        of a name two groups have tells the operator to write, was answered "say which
        group" here. Only the groups this page reaches (those of the file when it
        started: a group added since needs a restart of `mrs web`)."""
        bus = self.bus_now()
        groups = {gid: group for gid, group in bus.groups.items() if gid in self.views}
        if chosen not in (None, "") or "." in str(args.get("queue") or ""):
            named = chosen if chosen not in (None, "") else str(args["queue"]).split(".")[0]
            found = _group_named(named, groups)
            if found is not None:
                return found
            return f"no group {str(named)[:64]!r} in {bus.path} (groups: {_ids(groups)})"
        queue = str(args.get("queue") or "")
        owners = [g for g in groups.values() if any(q.name == queue for q in g.queues.values())]
        if len(owners) == 1:
            return owners[0].id
        if len(groups) == 1 or (action == "grant" and groups):
            return next(iter(groups))
        if len(owners) > 1:  # `mrs admin`'s words: which groups, and how to say one
            named = " and ".join(f"{g.id} ({g.name})" for g in owners)
            return (
                f"queue {queue[:64]!r} is in groups {named}: say which, e.g. "
                f"{owners[0].name}.{queue[:64]} or its group"
            )
        if queue:
            return f"no queue {queue[:64]!r} in any group (groups: {_ids(groups)})"
        return f"say which group (groups: {_ids(groups)})"


def _group_named(value: Any, groups: dict) -> int | None:
    """The group of `groups` that `value` names by its number or its name, or None."""
    number = _group_number(value)
    if number is not None and number in groups:
        return number
    named = [g.id for g in groups.values() if isinstance(value, str) and g.name == value]
    return named[0] if named else None


def _lost_line(action: str, lost: Exception) -> str:
    """The line for an action whose connection was lost after it was sent, and what
    it may have done. Why: a purge whose active was killed under it was answered
    "group 2: server closed the connection", and the page read "then stopped: ..."
    as if the request under way had done nothing (`mrs admin` says it may be done)."""
    message = getattr(lost, "message", None) or str(lost)
    if action in ADMIN_LOOKS:
        return message
    return (
        f"{action}: the connection to the group was lost before its answer ({message}): "
        "it may or may not be done; look at the queue and the admin journal before "
        "pressing again"
    )


class _Unreachable(Exception):
    """No instance of the group answered: the line saying why and what to do."""


class _LoginRefused(Exception):
    """The group no longer takes the login's password: the login is ended."""


@dataclass(frozen=True, slots=True)
class _Answer:
    """Where the groups asked about one password put their word."""

    verdict: list[bool]
    failures: list[str]
    asked: trio.Event
    """Set when this group has answered or failed: ask the next one now."""
    all_asks: trio.CancelScope
    """Cancelled by the first verdict: the other groups need not answer."""


def _could_log_in(name: str, password: str) -> bool:
    """Whether `name` and `password` could be a principal's login to the page: a name
    the credentials file allows (not a group's link credential: links never log in
    to the page) and a password that is text."""
    from mrs.security.creds import LINK_PREFIX, CredsError
    from mrs.security.handshake import ClientCredentials

    if not name or not password or name.startswith(LINK_PREFIX):
        return False
    try:
        ClientCredentials(name, password)
    except CredsError:
        return False
    return True


def _file_key(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file is written (an atomic rename: a new inode)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


GROUP_DIGITS_MAX = 9
"""Digits a group number may have on the page: more names no group of any bus."""


def _group_number(value: Any) -> int | None:
    """`value` as a group number when it is one (an int, or ASCII digits), else None.
    Why not str.isdigit and int(): '²' passes isdigit and int() refuses it,
    as it refuses a string of 5,000 digits; such a group or queue (`².10`) was
    answered "internal error" with a traceback in `mrs web`'s log."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str) or not 0 < len(value) <= GROUP_DIGITS_MAX:
        return None
    return int(value) if all("0" <= char <= "9" for char in value) else None


def _ids(groups: dict) -> str:
    return ", ".join(str(group_id) for group_id in groups)
