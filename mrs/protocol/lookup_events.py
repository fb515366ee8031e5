"""Lookup events: a queue's address by its name and the messages waiting on queues
(MessageQ's pams_locate_q and putil_show_pending), asked by an application.

Apart from `events` because they are one concept of their own, answered from the
bus file and, for another group's counts, over a link (`link_events`'
LinkPendingQuery); the connection's tables list them beside the others.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from mrs.limits import PENDING_QUEUES_MAX, QUEUE_NAME_CHARS_MAX
from mrs.protocol.base import EventStruct, finish
from mrs.protocol.fields import I64, RequestId

QueueText = Annotated[str, Meta(min_length=1, max_length=QUEUE_NAME_CHARS_MAX)]
"""A queue as people write it: `G.Q`, a name, `GROUP.NAME` (mrs.config.bus.resolve)."""
PendingQueues = Annotated[list[QueueText], Meta(min_length=1, max_length=PENDING_QUEUES_MAX)]
"""The queues of a ShowPending: 1..PENDING_QUEUES_MAX."""
PendingCountList = Annotated[list[I64], Meta(max_length=PENDING_QUEUES_MAX)]
"""One count per queue asked, in the order asked."""


class Locate(EventStruct, tag=27):
    """MessageQ's pams_locate_q: the address of the queue `name` names. A bare name is
    looked up in the group's own queues first, then in every group of the bus (the
    bus's name space: each group loads the whole bus file); `GROUP.NAME` names one
    group's queue. Answered by Located, or Failure(NOSUCHQUEUE / BADPARAM). No
    attachment needed."""

    request_id: RequestId
    name: QueueText


class ShowPending(EventStruct, tag=32):
    """MessageQ's putil_show_pending: how many messages wait to be got on each queue
    (the queue's memory window and its cold backlog; delivered and unconfirmed ones
    are not pending). A queue of another group is asked over the link to that group.
    Answered by PendingCounts, or Failure (NOSUCHQUEUE naming the queue, LINK_DOWN
    when a group asked is not reachable). No attachment needed."""

    request_id: RequestId
    queues: PendingQueues


class Located(EventStruct, tag=28):
    """The answer to a Locate: the queue's address."""

    request_id: RequestId
    group: I64
    queue: I64


class PendingCounts(EventStruct, tag=33):
    """The answer to a ShowPending: one count per queue, in the order asked."""

    request_id: RequestId
    counts: PendingCountList


finish(Locate, ShowPending, Located, PendingCounts)
