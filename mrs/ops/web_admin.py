"""The web view's actions: browse, purge, move, connections, behind a login.

Why apart from the read-only page (mrs.ops.web): acting needs who is acting. Served by
the group itself when `[group.ops] web_admin = true` (off by default: the page stays
read-only). Each action is the same AdminRequest `mrs admin` sends, answered by the
same `mrs.ops.admin_actions` with the same rights and journaled with the principal.

Under [auth] the operator logs in with a principal of the bus's credentials file:
the password is posted once and checked here against the principal's SCRAM verifier
(an unknown name costs the same: its decoy verifier), off the event loop, a failure
answered WEB_LOGIN_FAILURE_DELAY_S late. The session is a random token in a cookie
(HttpOnly, SameSite=Strict, Path=/, Secure when the page is reached over TLS through
a proxy that says `X-Forwarded-Proto: https`), forgotten after WEB_SESSION_S. Every
POST carries the session's CSRF token in the `X-CSRF-Token` header; the login form,
before there is a session, carries the token of a `mrs_login` cookie (double submit).
Without [auth] no login is asked, the CSRF token still is, and the journal says
"(no auth)" as for `mrs admin`.
"""

from __future__ import annotations

import collections
import hmac
import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from mrs import protocol as wire
from mrs.core.delivery import Refused
from mrs.limits import (
    ADMIN_REQUEST_WAIT_S,
    HTTP_REQUEST_DEADLINE_S,
    WEB_LOGIN_FAILURE_DELAY_S,
    WEB_PASSWORD_CHECKS_MAX,
    WEB_SESSION_S,
    WEB_SESSIONS_MAX,
)
from mrs.model import Status
from mrs.ops.http_endpoint import Handler, Request, Response
from mrs.security import scram
from mrs.security.creds import LINK_PREFIX

if TYPE_CHECKING:
    from mrs.ops.admin_actions import AdminActions
    from mrs.security.authority import Authority

log = logging.getLogger("mrs.web")

SESSION_COOKIE = "mrs_session"
LOGIN_COOKIE = "mrs_login"
_JSON = "application/json"
CSRF_HEADER = "x-csrf-token"
WEB_ACTIONS = frozenset(
    {"browse", "purge", "move", "connections", "journal", "set_limits", "add_queue", "grant"}
)
"""What the page may ask: the actions of `mrs admin`, run-time config changes included
(the same AdminRequests, so the same rights and the same admin journal)."""


@dataclass
class WebLogin:
    principal: str | None
    csrf: str
    expires_s: float
    password: str | None = None
    """Kept only by the bus-wide page (mrs.tools.web_actions), which acts on each group
    over the client protocol as this principal; forgotten with the login."""


@dataclass
class _WebSession:
    """What an admin action reads of its asker (mrs.ops.admin_actions.AdminSession):
    the principal and where it asked from; its answer is kept for the request."""

    principal: str | None
    peer: str
    answer: object = None
    answered: trio.Event | None = None

    def send(self, event: object) -> None:
        self.answer = event
        if self.answered is not None:
            self.answered.set()


class WebAdmin:
    """The login and the action endpoints of one group's web view."""

    def __init__(self, actions: AdminActions | None, authority: Authority | None) -> None:
        self.actions = actions
        self.authority = authority
        self.login_required = authority is not None
        """Under [auth]: act only after a login (the bus-wide page sets it itself)."""
        self.logins: collections.OrderedDict[str, WebLogin] = collections.OrderedDict()
        self.password_checks = trio.CapacityLimiter(WEB_PASSWORD_CHECKS_MAX)
        """PBKDF2 runs at a time: a flood of logins costs the group at most this much CPU."""

    def handlers(self) -> dict[str, Handler]:
        return {
            "/api/admin/session": self.session,
            "/api/admin/login": self.login,
            "/api/admin/logout": self.logout,
            "/api/admin/act": self.act,
        }

    # -- sessions ---------------------------------------------------------------------

    def _current(self, request: Request) -> WebLogin | None:
        token = request.cookie(SESSION_COOKIE)
        login = self.logins.get(token or "")
        if login is None or login.expires_s < time.monotonic():
            return None
        return login

    def _start(
        self, principal: str | None, request: Request, password: str | None = None
    ) -> tuple[WebLogin, str]:
        """A new login and its Set-Cookie header value."""
        token = secrets.token_urlsafe(32)
        expires_s = time.monotonic() + WEB_SESSION_S
        login = WebLogin(principal, secrets.token_urlsafe(32), expires_s, password)
        self.logins[token] = login
        while len(self.logins) > WEB_SESSIONS_MAX:
            self.logins.popitem(last=False)
        return login, _cookie(SESSION_COOKIE, token, request, int(WEB_SESSION_S))

    async def session(self, request: Request) -> Response:
        """GET: who is logged in, and the CSRF token for the next POST. Without
        [auth] a session (no principal) starts here; with it, a login token."""
        login = self._current(request)
        headers: list[tuple[str, str]] = []
        if login is None and not self.login_required:
            login, cookie = self._start(None, request)
            headers.append(("Set-Cookie", cookie))
        if login is None:
            token = secrets.token_urlsafe(32)
            headers.append(("Set-Cookie", _cookie(LOGIN_COOKIE, token, request, 600)))
            body = {"admin": True, "login_required": True, "principal": None, "csrf": token}
        else:
            body = {
                "admin": True,
                "login_required": self.login_required,
                "principal": login.principal,
                "csrf": login.csrf,
            }
        return json_answer(200, {**body, **self.session_extra()}, tuple(headers))

    def session_extra(self) -> dict:
        """What the page learns with its session beyond the login (the bus-wide page:
        its groups, to pick the one to act on)."""
        return {}

    async def password_ok(self, name: str, password: str) -> bool | str:
        """True if `password` is `name`'s; False, or a one-line reason the check could
        not be made. Here: the principal's SCRAM verifier, off the event loop."""
        if self.authority is None:
            return False
        return await trio.to_thread.run_sync(
            _password_ok, self.authority, name, password, limiter=self.password_checks
        )

    async def login(self, request: Request) -> Response:
        """POST {name, password, csrf}: checks the password against the verifier."""
        if request.method != "POST":
            return json_answer(405, {"error": "POST only"})
        if request.headers.get("content-type", "").partition(";")[0].strip().lower() != _JSON:
            # Why: a page of another site that can plant the login cookie (a sibling
            # subdomain, another port of this host) could post a form (text/plain)
            # logging the operator in as its own principal. A JSON body is a request a
            # browser sends across sites only after asking this server, which never agrees.
            return json_answer(415, {"error": f"send the login as {_JSON}"})
        form = _body(request)
        expected = request.cookie(LOGIN_COOKIE) or ""
        if not expected or not hmac.compare_digest(str(form.get("csrf", "")), expected):
            return json_answer(403, {"error": "login form expired: reload the page"})
        name, password = str(form.get("name", "")), str(form.get("password", ""))
        if not self.login_required:
            return json_answer(400, {"error": "no [auth] on this bus: no login needed"})
        checked: bool | str = (
            f"the password check took over {HTTP_REQUEST_DEADLINE_S:.0f} s "
            "(other logins, or groups slow to answer): try again"
        )
        with trio.move_on_after(HTTP_REQUEST_DEADLINE_S):  # no login holds a slot longer
            checked = await self.password_ok(name, password)
        if isinstance(checked, str):
            return json_answer(503, {"error": checked})
        if not checked:
            log.warning("web login refused for %r from %s", name, request.peer)
            await trio.sleep(WEB_LOGIN_FAILURE_DELAY_S)
            return json_answer(403, {"error": "wrong name or password"})
        login, cookie = self._start(name, request, self.kept_password(password))
        log.info("web login of %r from %s", name, request.peer)
        return json_answer(200, {"principal": name, "csrf": login.csrf}, (("Set-Cookie", cookie),))

    async def logout(self, request: Request) -> Response:
        login = self._current(request)
        if request.method != "POST" or login is None or not _csrf_ok(request, login):
            return json_answer(403, {"error": "not logged in"})
        self.logins.pop(request.cookie(SESSION_COOKIE) or "", None)
        return json_answer(
            200, {"principal": None}, (("Set-Cookie", _cookie(SESSION_COOKIE, "", request, 0)),)
        )

    # -- actions ----------------------------------------------------------------------

    async def act(self, request: Request) -> Response:
        """POST {action, args} with the CSRF header: the action's answer as JSON, or
        {"error": one line} with 400 (a mistake) or 403 (no login, no right)."""
        if request.method != "POST":
            return json_answer(405, {"error": "POST only"})
        login = self._current(request)
        if login is None:
            return json_answer(403, {"error": "log in first"})
        if not _csrf_ok(request, login):
            return json_answer(403, {"error": "missing or wrong CSRF token: reload the page"})
        form = _body(request)
        action, args = form.get("action"), form.get("args", {})
        if action not in WEB_ACTIONS:
            return json_answer(400, {"error": f"unknown action {action!r}"})
        if not isinstance(args, dict):
            kind = type(args).__name__
            return json_answer(400, {"error": f"args must be a JSON object, got {kind}"})
        return await self.perform(login, request, form, str(action), args)

    def kept_password(self, password: str) -> str | None:
        """What the login keeps of the password: nothing here (the group checks its
        verifier); the bus-wide page keeps it to act as the principal on each group."""
        return None

    async def perform(
        self, login: WebLogin, request: Request, form: dict, action: str, args: dict
    ) -> Response:
        """The checked action, done by this group's AdminActions as the login's
        principal: its answer as JSON, or {"error"} with 400/403."""
        assert self.actions is not None  # the group's own page always has them
        answered = trio.Event()
        asker = _WebSession(login.principal, f"web {request.peer}", answered=answered)
        try:
            self.actions(asker, wire.AdminRequest(1, action, args))
        except Refused as refused:
            return refused_answer(refused.status, refused.message)
        except (ValueError, wire.ProtocolError) as error:
            return json_answer(400, {"error": str(error)})
        with trio.move_on_after(ADMIN_REQUEST_WAIT_S):
            await answered.wait()
        answer = asker.answer
        if isinstance(answer, wire.AdminReply):
            return json_answer(200, answer.result)
        if isinstance(answer, wire.Failure):
            return refused_answer(answer.status, answer.message)
        return json_answer(500, {"error": "no answer from the group in time"})


def _password_ok(authority: Authority, name: str, password: str) -> bool:
    """The password against the principal's SCRAM verifier (a decoy for an unknown
    name, so both cost the same); link principals never log in to the page."""
    creds = authority.creds
    principal = None if name.startswith(LINK_PREFIX) else creds.get(name)
    if principal is not None:
        verifier = principal.verifier
    else:
        rounds = [p.verifier.iterations for p in creds.principals.values()]
        verifier = scram.decoy_verifier(creds.decoy_secret(), name, rounds)
    salted = scram.salted_password(password, verifier.salt, verifier.iterations)
    proof = scram.client_proof(salted, b"mrs web login")
    return principal is not None and scram.proof_valid(verifier, b"mrs web login", proof)


def _csrf_ok(request: Request, login: WebLogin) -> bool:
    return hmac.compare_digest(request.headers.get(CSRF_HEADER, ""), login.csrf)


def _cookie(name: str, value: str, request: Request, max_age_s: int) -> str:
    secure = "; Secure" if request.headers.get("x-forwarded-proto") == "https" else ""
    return f"{name}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age_s}{secure}"


def _body(request: Request) -> dict:
    """The posted JSON object; {} for anything else. RecursionError too: 16 KiB of
    '[' is allowed in, and it used to be answered "internal error" with a traceback
    in the group's log for each such request, logged in or not."""
    try:
        value = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def refused_answer(status: int, message: str) -> Response:
    code = 403 if status == Status.NOTAUTHORIZED else 400
    return json_answer(code, {"error": message, "status": int(status)})


def json_answer(status: int, body: dict, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, "application/json", json.dumps(body).encode(), headers)
