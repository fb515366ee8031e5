"""Signals that reach a replicated group's active while it stops (real etcd, three
`mrs serve --instance` processes).

The defect found here: a SIGTERM of the active hands its term over first (up to
REPLICATION_STOP_HANDOVER_S_MAX), and a second SIGTERM in that time (a second Ctrl-C,
a service manager's besides an operator's) stayed pending in trio's signal receiver,
which raised it again once the stop was done, with the default handler back in
place: after a clean stop the process was killed by its own signal (exit -15), its
last counts never logged. Now each signal that comes while it stops is said in one
line and the stop ends as it began.
"""

from __future__ import annotations

import signal
import time

import trio

from clients import connect, instance_addresses
from mrs.model import DeliveryMode
from sim.etcd import InstanceProcess, wait_active
from tests.etcd_helpers import etcd
from tests.process.test_planned_stop_29 import ALL, STOP_S_MAX, _log_of
from tests.process.test_replication import instances, wait_caught_up

__all__ = ["etcd", "instances"]  # the fixtures, used by name

SHUTTING_DOWN = "signal SIGTERM: shutting down"


def _wait_logged(process: InstanceProcess, text: str, timeout_s: float = STOP_S_MAX) -> None:
    """Until the instance's log holds `text` (AssertionError after `timeout_s`)."""
    deadline_s = time.monotonic() + timeout_s
    while text not in _log_of(process):
        assert time.monotonic() < deadline_s, f"{process.name} never logged {text!r}"
        time.sleep(0.005)


def test_a_second_sigterm_while_the_active_stops_is_said_and_the_stop_ends_cleanly(
    instances,
) -> None:
    """Its replicas paused (connected, silent), the SIGTERMed active tries its
    hand-over for about a second; a second SIGTERM then is said in one line, and the
    instance still exits 0 within the bound, with its one line on what it did not hand
    over. Before, it exited -15, killed by the second signal once stopped."""
    first = wait_active(instances, 30)
    addresses = instance_addresses(instances["a"].config_path, "NYC")

    async def put_some() -> None:
        async with connect(addresses, "SENDER") as producer:
            await wait_caught_up(producer, ALL)
            await producer.put(b"ak", "ANYORDER", delivery=DeliveryMode.AK_DQF)
            await wait_caught_up(producer, ALL)

    trio.run(put_some)
    active = instances[first]
    assert active.process is not None
    replicas = [instances[name] for name in sorted(ALL - {first})]
    for replica in replicas:
        replica.pause()
    try:
        began_s = time.monotonic()
        active.process.send_signal(signal.SIGTERM)
        _wait_logged(active, SHUTTING_DOWN)
        active.process.send_signal(signal.SIGTERM)
        returncode = active.process.wait(timeout=STOP_S_MAX)
        took_s = time.monotonic() - began_s
    finally:
        for replica in replicas:
            replica.resume()
    lines = _log_of(active).splitlines()
    assert returncode == 0, (returncode, lines[-5:])
    assert took_s < STOP_S_MAX
    again = [line for line in lines if "signal SIGTERM again" in line]
    assert len(again) == 1 and "stopping already" in again[0], again
    assert len([line for line in lines if "stops without handing" in line]) == 1, lines[-5:]
