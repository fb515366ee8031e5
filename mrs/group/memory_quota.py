"""What a nonrecoverable message may make a queue and its sender's connection hold in
memory: the byte quotas beside messages_max.

Why a module of its own: the check is the server's (guards, refusal log), the queue
only holds what passes it (mrs.group.queues).
"""

from __future__ import annotations

import logging

from mrs.config.guards import Guards
from mrs.core.refusals import RefusalLog
from mrs.group.queues import TargetQueue
from mrs.group.shapes import Entry

_refusals = RefusalLog(logging.getLogger("mrs.queues"))


def memory_quota_problem(queue: TargetQueue, entry: Entry, guards: Guards) -> str | None:
    """Why a nonrecoverable entry may not wait in `queue`'s memory, or None.

    Counts alone (messages_max) let 2,000 puts of 512 KiB hold a gigabyte; these two
    byte quotas bound what one queue and one connection can make the server hold.
    Only an entry that would wait is charged: one handed straight to a parked get
    costs nothing.
    """
    if queue.waiters and not queue.selective_waiters and not queue.pending and queue.can_deliver():
        return None  # (a selective get may not take it: then it waits, and is charged)
    size = len(entry.body or b"")
    account = entry.account
    if queue.memory_bytes + size > guards.queue_bytes_max:
        limit = "queue_bytes_max"
        problem = (
            f"queue {queue.address} holds {queue.memory_bytes} bytes in memory "
            f"(queue_bytes_max={guards.queue_bytes_max})"
        )
    elif account is not None and account.held_bytes + size > guards.connection_bytes_max:
        limit = "connection_bytes_max"
        problem = (
            f"the sending connection has {account.held_bytes} bytes waiting in queues "
            f"(connection_bytes_max={guards.connection_bytes_max})"
        )
    else:
        return None
    _refusals.refused(limit, f"queue {queue.address}", f"EXCEEDQUOTA: {problem}")
    return problem


def over_bound(queue: TargetQueue, guards: Guards) -> str | None:
    """Why `queue` holds more nonrecoverable messages than its bounds allow, or None.

    A queue can be over: messages a client gives back when it closes with read-ahead
    it never handed to a get (GiveBack) wait again whatever the queue holds, since
    they were accepted once and dropping them would lose them; a producer may have
    filled the queue while they were lent. The bound then holds by refusing every
    new put (EXCEEDQUOTA, `enqueue_in_memory`) until gets take it back under, and
    `mrs status` says so on the queue's row."""
    messages_max = queue.config.messages_max
    if queue.memory_count > messages_max:
        held = f"{queue.memory_count} messages, messages_max={messages_max}"
    elif queue.memory_bytes > guards.queue_bytes_max:
        held = f"{queue.memory_bytes} bytes, queue_bytes_max={guards.queue_bytes_max}"
    else:
        return None
    return f"holds {held} (messages given back): new puts refused EXCEEDQUOTA until under"
