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
from mrs.config.schema import QUEUE_FORMS, queue_shape_problem
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
from mrs.ops.admin_terms import rendered
from mrs.ops.http_endpoint import Handler, Request, Response
from mrs.protocol.admin_events import admin_outcome
from mrs.security import scram
from mrs.security.creds import LINK_PREFIX

if TYPE_CHECKING:
    from mrs.ops.admin_actions import AdminActions
    from mrs.security.authority import Authority

log = logging.getLogger("mrs.web")

SESSION_COOKIE = "mrs_session"
LOGIN_COOKIE = "mrs_login"
COOKIE_TOKENS_MAX = 8
"""Tokens one of the page's cookies carries at most: this console's and those of other
consoles on the same host (`_tokens`)."""
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
    incarnation: str = ""
    """The group page's: which addition of the principal logged in (mrs.security.creds
    `Principal`); the login ends once it is removed, or removed and added again."""


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
        """This console's login, if it holds. Under the group's [auth], one whose
        principal was removed (or removed and added again: a leaked password's login
        otherwise acted on with the new principal's grants) is ended here."""
        found = self._current_token(request)
        if found is None:
            return None
        token, login = found
        authority, name = self.authority, login.principal
        if authority is not None and name is not None and authority.revoked(
            name, login.incarnation
        ):
            del self.logins[token]
            return None
        return login

    def _current_token(self, request: Request) -> tuple[str, WebLogin] | None:
        """This console's login among the session cookie's tokens (the newest), and
        its token."""
        now_s = time.monotonic()
        for token in reversed(_tokens(request, SESSION_COOKIE)):
            login = self.logins.get(token)
            if login is not None and login.expires_s >= now_s:
                return token, login
        return None

    def _start(
        self, principal: str | None, request: Request, password: str | None = None
    ) -> tuple[WebLogin, str]:
        """A new login and its Set-Cookie header value: its token after the other
        consoles' (this console's older ones dropped)."""
        others = [one for one in _tokens(request, SESSION_COOKIE) if one not in self.logins]
        token = secrets.token_urlsafe(32)
        expires_s = time.monotonic() + WEB_SESSION_S
        login = WebLogin(principal, secrets.token_urlsafe(32), expires_s, password)
        self.logins[token] = login
        while len(self.logins) > WEB_SESSIONS_MAX:
            self.logins.popitem(last=False)
        value = ".".join([*others, token][-COOKIE_TOKENS_MAX:])
        return login, _cookie(SESSION_COOKIE, value, request, int(WEB_SESSION_S))

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
            value = ".".join([*_tokens(request, LOGIN_COOKIE), token][-COOKIE_TOKENS_MAX:])
            headers.append(("Set-Cookie", _cookie(LOGIN_COOKIE, value, request, 600)))
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
        sent = str(form.get("csrf", ""))
        if not any(_same_token(sent, one) for one in _tokens(request, LOGIN_COOKIE)):
            return json_answer(403, {"error": "login form expired: reload the page"})
        name, password = str(form.get("name", "")), str(form.get("password", ""))
        if not self.login_required:
            return json_answer(400, {"error": "no [auth] on this bus: no login needed"})
        checked: bool | str = (
            f"the password check took over {HTTP_REQUEST_DEADLINE_S:.0f} s "
            "(other logins, or groups slow to answer): try again"
        )
        incarnation = self._incarnation(name)
        with trio.move_on_after(HTTP_REQUEST_DEADLINE_S):  # no login holds a slot longer
            checked = await self.password_ok(name, password)
        if checked is True and self._incarnation(name) != incarnation:
            checked = "the credentials changed while the password was checked: log in again"
        if isinstance(checked, str):
            return json_answer(503, {"error": checked})
        if not checked:
            log.warning("web login refused for %r from %s", name, request.peer)
            await trio.sleep(WEB_LOGIN_FAILURE_DELAY_S)
            return json_answer(403, {"error": "wrong name or password"})
        login, cookie = self._start(name, request, self.kept_password(password))
        login.incarnation = incarnation
        log.info("web login of %r from %s", name, request.peer)
        return json_answer(200, {"principal": name, "csrf": login.csrf}, (("Set-Cookie", cookie),))

    def _incarnation(self, name: str) -> str:
        """Which addition of principal `name` is in force ("" for none, or without
        [auth]). Read before and after a login's password check. Why: the check runs
        off the event loop, and a `remove` + `add` read meanwhile gave the login made
        with the leaked password the new addition's incarnation: it never ended."""
        known = None if self.authority is None else self.authority.creds.get(name)
        return "" if known is None else known.incarnation

    async def logout(self, request: Request) -> Response:
        login = self._current(request)  # (the bus page forgets expired logins here)
        found = self._current_token(request)
        if request.method != "POST" or login is None or found is None:
            return json_answer(403, {"error": "not logged in"})
        if not _csrf_ok(request, login):
            return json_answer(403, {"error": "missing or wrong CSRF token: reload the page"})
        self.logins.pop(found[0], None)
        others = [one for one in _tokens(request, SESSION_COOKIE) if one != found[0]]
        max_age_s = int(WEB_SESSION_S) if others else 0  # the other consoles' stay
        cookie = _cookie(SESSION_COOKIE, ".".join(others), request, max_age_s)
        return json_answer(200, {"principal": None}, (("Set-Cookie", cookie),))

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
        if not isinstance(action, str) or action not in WEB_ACTIONS:
            # Why the str test first: a list or an object posted as the action
            # ({"action": ["purge"]}) is unhashable, and the set's `in` raised
            # TypeError: "internal error" and a traceback in the group's log.
            return json_answer(400, {"error": f"unknown action {repr(action)[:64]}"})
        if not isinstance(args, dict):
            kind = type(args).__name__
            return json_answer(400, {"error": f"args must be a JSON object, got {kind}"})
        problem = _not_text(form)
        if problem is not None:
            return json_answer(400, {"error": f"{action}: {problem}: nothing was done"})
        problem = _queue_shape(args)
        if problem is not None:
            return json_answer(400, {"error": f"{action}: {problem}"})
        if action == "grant":  # a field left empty gives no right (the group's rule)
            args = {key: value for key, value in args.items() if value != []}
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
        return json_answer(500, {"error": unanswered_line(action, ADMIN_REQUEST_WAIT_S)})


def _password_ok(authority: Authority, name: str, password: str) -> bool:
    """The password against the principal's SCRAM verifier (a decoy for an unknown
    name, so both cost the same); link principals never log in to the page."""
    principal = None if name.startswith(LINK_PREFIX) else authority.creds.get(name)
    decoy = authority.decoy(name)  # for a known name too (Authority.decoy says why)
    verifier = principal.verifier if principal is not None else decoy
    salted = scram.salted_password(password, verifier.salt, verifier.iterations)
    proof = scram.client_proof(salted, b"mrs web login")
    return principal is not None and scram.proof_valid(verifier, b"mrs web login", proof)


def _csrf_ok(request: Request, login: WebLogin) -> bool:
    return _same_token(request.headers.get(CSRF_HEADER, ""), login.csrf)


def _same_token(sent: str, token: str) -> bool:
    """`sent` is `token` (ours: ASCII), compared in constant time. Why the ASCII test:
    hmac.compare_digest raises TypeError for a str that is not ASCII, so a header
    `X-CSRF-Token: é` (or such a login form) was answered "internal error" with a
    traceback in the group's log."""
    return bool(sent) and sent.isascii() and hmac.compare_digest(sent, token)


def _tokens(request: Request, name: str) -> list[str]:
    """The tokens the browser's cookie `name` carries, oldest first. Why several: a
    browser keeps one cookie per host name whatever the port (RFC 6265, 8.5), so the
    bus page (`mrs web`, :8100) and each group's page (:8101, ...) on one host share
    `mrs_session`; with one token in it, logging in to one console logged the
    operator out of the other, and without [auth] each switch of tab cost a click
    ("press again"). Each console now keeps the others' tokens beside its own."""
    value = request.cookie(name) or ""
    return [token for token in value.split(".") if token][-COOKIE_TOKENS_MAX:]


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


def _not_text(form: dict) -> str | None:
    """Why the posted form holds something that is not text, or None. Why: JSON may
    carry half of a surrogate pair ("\\udc80"), which no UTF-8 text can hold. The bus
    page's client refused it when encoding; the group's own page handed it to the
    action, and a purge with such a `reason` had taken the queue's messages when its
    DLJ record failed to encode: refused with a Python codec error, the messages left
    the running queue (still in the DQF, back only after a restart)."""
    try:
        json.dumps(form, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        bad = error.object[error.start : error.end]
        return f"{bad!r} is half of a surrogate pair, not text (a bad paste?)"
    except RecursionError:  # read by json.loads a frame or two higher up the stack
        return "args are nested too deeply"
    return None


def _queue_shape(args: dict) -> str | None:
    """What is wrong with the shape of the queue (or a move's `to`) the page posted, in
    `mrs admin`'s words (mrs.config.schema `queue_shape_problem`), or None. Why: the
    bus page answered `.` and `.ORDERS` "no group ''" and sent `1.` to group 1,
    answered "no queue '1.'", where `mrs admin` says what is wrong with the text."""
    for name in ("queue", "to"):
        text = args.get(name)
        if isinstance(text, str) and (wrong := queue_shape_problem(text)) is not None:
            return f"{name} {text[:64]!r} {wrong}: {QUEUE_FORMS}"
    return None


def unanswered_line(action: str, waited_s: float) -> str:
    """The page's line for an action whose answer did not come, and what it may have
    done. Why: a purge or a limit set while a replicated group held its answers (no
    replica in sync linked) was answered "no answer from the group in time", and the
    operator read that nothing was done: it was done on the active, its answer held
    until a replica has it."""
    return f"{action}: no answer from the group within {waited_s:g} s; {admin_outcome(action)}"


def refused_answer(status: int, message: str) -> Response:
    """A group's refusal (in the AdminRequest's terms) in the page's words."""
    code = 403 if status == Status.NOTAUTHORIZED else 400
    return json_answer(code, {"error": rendered(message, "web"), "status": int(status)})


def json_answer(status: int, body: dict, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, "application/json", json.dumps(body).encode(), headers)
