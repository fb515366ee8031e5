"""Probes of a replicated group as an operator meets it: real etcd, three real
`mrs serve --instance` processes.

What they prove: a replica that may not become active because an instance that may
hold an answered record it lacks is down says so, once, naming the instance to start
(before, the group stayed without an active and no log said why); started again,
that instance brings the group back with every answered put. A hello of another
group is refused as such, before etcd is asked (an instance started with another
group id than its group's was told that etcd named nobody the leader).
"""

from __future__ import annotations

import trio

from clients import connect, instance_addresses
from mrs.config.bus import load_config
from mrs.limits import ELECTION_WAIT_LOG_S
from sim.etcd import wait_active
from tests.etcd_helpers import etcd
from tests.process.test_replication import instances, wait_caught_up
from tests.process.test_replication_lying_peers_20 import _exchange, _hello
from tests.process.test_replication_probes import _drain, _put, _wait_log_line

__all__ = ["etcd", "instances"]  # the fixtures, used by name

WAITING_LINE = "has waited"


def test_a_replica_waiting_for_a_down_in_sync_instance_says_which_to_start(instances) -> None:
    """The active and one in-sync replica SIGKILLed: the replica left may not campaign
    (an answered record may be on the other replica alone) and, after
    ELECTION_WAIT_LOG_S, logs one WARNING naming that replica; started again, the group
    has an active and every answered put."""
    config = instances["a"].config_path
    addresses = instance_addresses(config, "NYC")
    active = wait_active(instances, 30)
    down, left = (name for name in "abc" if name != active)

    async def put_all_in_sync() -> list[int]:
        async with connect(addresses, "SENDER") as client:
            answered = await _put(client, 0, 20)
            await wait_caught_up(client, set("abc"))
        return answered

    answered = trio.run(put_all_in_sync)
    instances[down].kill()
    instances[active].kill()
    log = config.parent / f"{left}.log"
    line = _wait_log_line(log, WAITING_LINE, timeout_s=ELECTION_WAIT_LOG_S + 20)
    assert "WARNING" in line, line
    assert f"instance {left} has waited" in line and f"for instance(s) {down}:" in line, line
    assert f"start {down}" in line, line
    assert sum(WAITING_LINE in text for text in log.read_text().splitlines()) == 1

    instances[down].start()
    wait_active(instances, 30)
    assert trio.run(_drain, addresses) == answered


def test_a_hello_of_another_group_is_refused_for_its_group_not_for_etcd(instances) -> None:
    """An instance of group 1 whose bus file says another group id (or any hello naming
    another group) gets the group named in the refusal, from the replica and in its
    log, even when its hello carries a term above the replica's. Before, the replica
    first asked etcd about that term and refused with `the coordinator names None the
    leader of term 0` (group 1's record), sending the operator to etcd."""
    config = instances["a"].config_path
    active = wait_active(instances, 30)
    replica = next(name for name in "abc" if name != active)
    port = load_config(config).group(1).instance(replica).replication_port
    (answer,) = _exchange(port, _hello(group=2, term=1000))
    assert answer["t"] == "refuse", answer
    assert "not an active of group 1 (its hello names group 2" in answer["why"], answer
    line = _wait_log_line(config.parent / f"{replica}.log", "its hello names group 2")
    assert "coordinator" not in line, line
