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


ADMIN_REQUESTS = (AdminRequest,)
ADMIN_REPLIES = (AdminReply,)

finish(AdminRequest, AdminReply)
