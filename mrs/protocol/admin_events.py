"""Admin events: an operator's run-time actions on a group (browse, purge, move,
connections, queue changes), asked by `mrs admin`, the web view or a client.

Apart from `events` because they are one concept of their own: a request names an
action and its arguments as plain data, checked by the group's operator side
(mrs.ops.admin_actions), which answers with an AdminReply of plain data or a
Failure (one line: NOSUCHQUEUE, NOTAUTHORIZED, BADPARAM). One pair of events for
every action, so a new action needs no new wire code.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from mrs.limits import ADMIN_ACTION_CHARS_MAX
from mrs.protocol.base import EventStruct, finish
from mrs.protocol.fields import RequestId

AdminAction = Annotated[str, Meta(min_length=1, max_length=ADMIN_ACTION_CHARS_MAX)]
"""The action's name: browse, purge, move, connections, set_limits, add_queue, journal."""


class AdminRequest(EventStruct, tag=70):
    """An operator's action on the group, with its arguments (queue names, limits) as
    plain data. Answered by AdminReply, or Failure. No attachment needed; under
    [auth] each action needs its right (mrs.security.permissions.may_manage)."""

    request_id: RequestId
    action: AdminAction
    args: dict


class AdminReply(EventStruct, tag=71):
    """The answer to an AdminRequest: what the action found or did, as plain data."""

    request_id: RequestId
    result: dict


ADMIN_LOOK_OUTCOME = "it changed nothing on the group: ask again"
"""What a look (browse, connections, journal) that got no answer leaves: nothing."""

ADMIN_LOOKS = frozenset({"browse", "connections", "journal"})
"""The admin actions that change nothing: an unanswered one is only a look to make again."""

ADMIN_CHANGE_OUTCOME = (
    "it may or may not be done: a replicated group answers once an in-sync replica "
    "holds the change (`mrs status` says ANSWERS HELD while none is linked), and the "
    "action stays done on the active meanwhile; look at the queue and the admin "
    "journal before asking again"
)
"""What an admin action that changes the group (purge, move, set_limits, ...) and timed
out may have done."""


def admin_outcome(action: str) -> str:
    """What an AdminRequest `action` that got no answer in time may have done. Why:
    `mrs admin purge` on a replicated group whose replicas were both down said
    "AdminRequest: no answer from ... within 60 s" after its wait, and the operator
    read that nothing was purged: the purge was done on the active, which holds every
    answer until a replica in sync has the change."""
    return ADMIN_LOOK_OUTCOME if action in ADMIN_LOOKS else ADMIN_CHANGE_OUTCOME


ADMIN_REQUESTS = (AdminRequest,)
ADMIN_REPLIES = (AdminReply,)

finish(AdminRequest, AdminReply)
