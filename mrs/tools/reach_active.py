"""Reaching a group's server for an operator's command (`mrs admin`, the bus page's
actions): a replicated group's active waited for through a failover, and the line
that says why none answered.

Why a module of its own: the status command reads what it reaches and reports the
rest; an action must reach the one active instance or say, in `mrs status`'s words,
why it could not. Both commands that act share this one path.
"""

from __future__ import annotations

from typing import Any

from mrs.config.instance_types import CoordinatorConfig
from mrs.tools.bus_status import CONNECT_TIMEOUT_S_DEFAULT, down_reason, leadership_note

ACTIVE_RETRY_S = 0.25
"""Seconds between two rounds of dialing a replicated group's instances while none
answers (an operator's command waiting for the new active)."""


HANDSHAKE_SHARE_S_MIN = 1.0
"""The least time one instance is given to answer a command's handshake."""


def handshake_wait_s(wait_s: float, instances: int) -> float:
    """How long one instance of `instances` may take to answer the handshake of a
    command that waits `wait_s` for the active (`open_active`): all of it for one
    address, a share of it for several, so that several rounds fit in the wait. Why:
    a paused or hung active takes the connection and never answers; given the whole
    wait, it took it all, and `mrs admin` failed "no instance of group 1 answered
    within 10 s" though a replica had taken over 4 s in."""
    if instances < 2:
        return wait_s
    return max(HANDSHAKE_SHARE_S_MIN, wait_s / (instances + 1))


REPLICA_NOTE = (
    "; an instance of a replicated group listens for clients only while it is the "
    "active: give --config BUS.TOML, or --address with every instance's HOST:PORT "
    "(comma separated), to reach the active"
)
"""Said when one address alone did not answer (`mrs status --address` says the like).
Why: `mrs admin purge --address` of a running replica read "is it running? (start it
with `mrs serve`)" and nothing else, for an instance that was running."""


async def open_active(stack: Any, dial: Any, instances: int, wait_s: float) -> Any:
    """The client of `dial()` (a `clients.connect(...)` context), entered on `stack`;
    with several instances, dialled again every ACTIVE_RETRY_S while none answers,
    for `wait_s` at most. Why: only the active listens, and a failover leaves none
    listening for the lease's TTL and a second; `mrs admin` and the bus page's actions
    (reconnecting off: an action is never re-sent behind the operator's back) failed
    at once then, where an application waits for the new active (clients.dialing)."""
    import trio

    from mrs.errors import ConnectionLost

    give_up_s = trio.current_time() + wait_s
    while True:
        try:
            return await stack.enter_async_context(dial())
        except ConnectionLost:
            if instances < 2 or trio.current_time() + ACTIVE_RETRY_S > give_up_s:
                raise
            await trio.sleep(ACTIVE_RETRY_S)


async def unreachable_line(
    error: BaseException,
    address: str,
    coordinator: CoordinatorConfig | None,
    group_id: int | None,
    waited_s: float,
    config_path: Any = None,
) -> str:
    """Why an operator's command reached no server, in `mrs status`'s words: the OS
    error's meaning and what to do; for a replicated group, what etcd says of its
    active (a silent etcd named with `config_path`, the bus file, to check). Why:
    `mrs admin` printed `all attempts to connect to HOST:PORT failed`, the reason
    (refused, unreachable, unknown host) lost and no advice given."""
    reason = down_reason(error)
    if reason == " ".join(str(error).split()):  # no OS error: the client's own words
        reason = getattr(error, "message", None) or reason
    reason = reason.removeprefix(f"cannot connect to {address}: ")
    if coordinator is None or group_id is None:
        line = f"cannot connect to {address} ({reason}); is it running? (start it with `mrs serve`)"
        return line + (REPLICA_NOTE if group_id is None and "," not in address else "")
    note = await leadership_note(coordinator, group_id, CONNECT_TIMEOUT_S_DEFAULT, config_path)
    return f"no instance of group {group_id} answered within {waited_s:g} s ({reason}); {note}"
