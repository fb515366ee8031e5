"""How long the calls the server answers without a timeout of its own wait for their
answer: `confirm`, `confirm_many`, `status`, `locate`, `pending`.

A get and a put carry their timeout to the server, which answers TIMEOUT in time,
and the client waits that long plus REPLY_GRACE_S. These calls carry none: the
server answers a confirm once its commit is durable, and answers heartbeats all the
while, so a confirm behind a commit on a stalled disk (a full controller cache, a
hung NFS mount, a writer stopped) waited for ever, and so did the application. Each
now waits at most its own `timeout=`, else the connection's `request_timeout_s`
(`connect`; CLIENT_REQUEST_WAIT_S_DEFAULT, 60 s), and then raises `ReplyTimeout`
with one line saying what the request may still do on the server.
"""

from __future__ import annotations

import math
from typing import Any

from clients.errors import FieldRefused, ReplyTimeout
from mrs.model import Status


def answer_wait_s(timeout_s: Any, default_s: float, what: str) -> float:
    """The wait of a call: its `timeout` (seconds, finite, above 0), or `default_s`
    (the connection's) for None; BADPARAM (`FieldRefused`, nothing sent) for anything
    else. Why not 0 for "no wait": these calls have no poll; an answer takes at
    least a round trip, so a wait of 0 would always time out."""
    if timeout_s is None:
        return default_s
    if type(timeout_s) not in (int, float) or not 0 < timeout_s < math.inf:
        raise FieldRefused(
            Status.BADPARAM,
            f"{what}: timeout must be a finite number of seconds > 0 (None: the "
            f"connection's request_timeout_s, {default_s:g} s), got {timeout_s!r}",
        )
    return float(timeout_s)


def not_answered(what: str, address: str, wait_s: float, outcome: str) -> ReplyTimeout:
    """The ReplyTimeout of a call whose answer did not come within `wait_s`: one line,
    what was asked, of whom, how long, and `outcome`, what the request may still do."""
    return ReplyTimeout(
        Status.TIMEOUT, f"{what}: no answer from {address} within {wait_s:g} s; {outcome}"
    )


CONFIRM_OUTCOME = (
    "the confirm may still be recorded: confirming it again answers BADSEQ "
    "('confirmed already') once the group has it; a message left unconfirmed comes "
    "again, marked POSSDUPL, after a reconnect"
)
"""What a confirm that timed out may still do: the client never pretends it did not."""

QUERY_OUTCOME = "it changed nothing on the group: ask again"
"""What a `status`, `locate` or `pending` that timed out leaves: nothing."""
