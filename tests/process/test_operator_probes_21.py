"""The operator's console that acts, probed as real processes: `mrs admin` and the
bus page (`mrs web --admin`) while a replicated group fails over, against a group
that is down, and a purge that a bound stops half-way.

What an operator at 3 a.m. depends on: an action asked while the group is between
two actives is done by the next one (as an application's call waits for it), a
group that does not answer is said so with why and what to do, and a command that
stops says what it had done before it stopped.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import trio

from clients import DeliveryMode, connect
from mrs.tools.reach_active import REPLICA_NOTE
from sim.etcd import wait_active
from sim.ports import free_port
from tests.cli_helpers import run_mrs, status_json
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import InstanceProcess, etcd, write_replicated_config
from tests.process.test_web_bus_admin import WebSession, start_web, stop_web

__all__ = ["etcd"]  # the fixture, used by name

WAIT_S = 30.0
LEASE_TTL_S = 2


def _one_line_failure(done, exit_status: int = 1) -> str:
    """The command's stderr, checked to be one line of `mrs:` and no traceback."""
    line = done.stderr.strip()
    assert done.returncode == exit_status, (done.returncode, done.stdout, line)
    assert len(line.splitlines()) == 1 and line.startswith("mrs: admin: "), line
    assert "Traceback" not in line, line
    return line


def test_admin_and_the_bus_page_act_on_the_next_active_during_a_failover(
    etcd, tmp_path: Path
) -> None:
    """The active SIGKILLed, then `mrs admin add-queue` and the bus page's add_queue
    asked before a replica has taken over: both wait for the new active and are done
    there. Before, both failed at once with `cannot connect to A,B,C: all attempts to
    connect to A failed; ...`, while docs/replication.md says `mrs admin --config`
    finds the active as a client does (and a client waits for it)."""
    config = write_replicated_config(tmp_path, etcd.endpoint, STANDARD_QUEUES, LEASE_TTL_S)
    instances = {name: InstanceProcess(config, name) for name in "abc"}
    web = None
    try:
        for process in instances.values():
            process.start()
        first = wait_active(instances, WAIT_S)
        web, url = start_web(config, "--admin")
        page = WebSession(url)
        instances[first].kill()
        with ThreadPoolExecutor(2) as pool:
            asked = pool.submit(
                run_mrs, "admin", "add-queue", "30", "RETRY", "--config", str(config)
            )
            clicked = pool.submit(page.act, "add_queue", None, id=31, name="HOLD")
            done, (status, answer) = asked.result(), clicked.result()
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "added RETRY (1.30) now and to the config file"
        assert (status, answer) == (200, {"group": 1, "queue": "1.31", "name": "HOLD"})
        later = wait_active({n: p for n, p in instances.items() if n != first}, WAIT_S)
        served = status_json("--config", str(config))["groups"][0]["status"]
        assert served["replication"]["instance"] == later
        assert {"1.30", "1.31"} <= set(served["queues"])
    finally:
        if web is not None:
            stop_web(web)
        for process in instances.values():
            process.terminate()


def test_admin_to_a_group_that_is_down_says_why_and_what_to_do() -> None:
    """Nothing listens at the address: one line with the reason and the advice, as
    `mrs status` gives them. Before: `cannot connect to HOST:PORT: all attempts to
    connect to HOST:PORT failed`, the reason lost."""
    address = f"127.0.0.1:{free_port()}"
    for argv in (("browse", "ORDERS"), ("purge", "ORDERS")):
        line = _one_line_failure(run_mrs("admin", *argv, "--address", address))
        assert line == (
            f"mrs: admin: cannot connect to {address} (connection refused: nothing listens "
            "there); is it running? (start it with `mrs serve`)" + REPLICA_NOTE
        )


def test_admin_on_a_group_listening_on_port_0_asks_for_the_address(bus) -> None:
    """The bus file says port 0 (chosen at start, as the tests' buses do): `--config`
    alone cannot find the group; the line says to give --address, exit 2, as `mrs
    status` says. Before: `cannot connect to 127.0.0.1:0`, exit 1, read as a group
    that is down while it was serving."""
    line = _one_line_failure(
        run_mrs("admin", "browse", "ORDERS", "--config", str(bus.config_path)), exit_status=2
    )
    assert line == (
        f"mrs: admin: group 1 (NYC) listens on port 0 in {bus.config_path} (a port chosen at "
        "start): give --address HOST:PORT (its READY line)"
    )


async def _put_orders(address: str, count: int) -> None:
    async with connect(address, "SENDER") as client:
        for index in range(count):
            psb = await client.put(b"order %d" % index, "ORDERS", delivery=DeliveryMode.WF_DQF)
            assert psb.delivery_status.name == "STORED", psb


def test_a_purge_stopped_by_the_dlj_bound_says_what_it_had_done(make_bus) -> None:
    """700 waiting, dlj_messages_max 600: the first request dead-letters 500, the
    second is refused. The command's line says both; before, it said only the refusal
    (exit 1), and an operator read that nothing was purged while 500 were in the DLJ."""
    bus = make_bus(limits="dlj_messages_max = 600")
    trio.run(_put_orders, bus.address, 700)
    line = _one_line_failure(run_mrs("admin", "purge", "ORDERS", "--address", bus.address))
    assert "the DLJ would exceed dlj_messages_max=600" in line, line
    assert line.endswith(
        "done before that: purged 1.10: 500 to the DLJ, 0 discarded, 0 memory messages "
        "discarded; 200 left"
    ), line
    status = status_json("--address", bus.address)
    assert status["journal"]["records"]["dlj"] == 500
    assert status["queues"]["1.10"]["pending"] == 200


def test_add_queue_says_which_queue_holds_the_id_or_the_name(bus) -> None:
    """An id or a name taken: the line names the queue that has it. Before: `group 1
    has a queue 30 or 'ORDERS'`, though no queue 30 existed."""
    line = _one_line_failure(
        run_mrs("admin", "add-queue", "30", "ORDERS", "--address", bus.address)
    )
    assert line == "mrs: admin: add-queue: group 1 has that queue already (1.10 is ORDERS)"
    line = _one_line_failure(run_mrs("admin", "add-queue", "10", "NEW", "--address", bus.address))
    assert line.endswith("(1.10 is ORDERS)"), line
