"""Probes, round 23: an operator changes the bus file between restarts (and a queue at
run time with `mrs admin`) while the journals hold messages. Real `mrs serve`
processes, real data directories, real LMDB; each test names the defect it found.

Expected: nothing acknowledged is lost silently, what is kept is shown where the
operator looks (`mrs status`, the one start-up line, the admin refusal), and it can
be reached again."""

from __future__ import annotations

import textwrap
from pathlib import Path

from clients import DeliveryMode, MrsError, Status, Uma, connect_sync
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.cli_helpers import run_mrs, status_json
from tests.conftest import STANDARD_QUEUES, Bus

REMOVED_QUEUE = '[[group.queue]]\nid = 20\nname = "GONE"\n'
KEPT_BODIES = [b"kept %d" % index for index in range(3)]
SAF_MESSAGES = 40
WIDE = {"COLUMNS": "400"}
"""A terminal wide enough that the status table does not wrap its notes."""


def _put_all(address: str, target: str, bodies: list[bytes], mode: DeliveryMode) -> None:
    client = connect_sync(address, "SENDER")
    try:
        for body in bodies:
            psb = client.put(body, target, delivery=mode, uma=Uma.DISC, timeout=30)
            assert psb.delivery_status == Status.STORED, psb
    finally:
        client.close()


def _take_all(address: str, queue: str) -> list[bytes]:
    """Every message waiting on `queue`, confirmed, in the order it was handed out."""
    client = connect_sync(address, queue)
    bodies: list[bytes] = []
    try:
        while True:
            try:
                message = client.get(timeout=1.5)
            except MrsError as error:
                assert error.status == Status.TIMEOUT, error
                return bodies
            bodies.append(message.body)
            client.confirm(message.seq)
    finally:
        client.close()


def test_a_removed_queues_messages_are_shown_and_come_back_first_with_add_queue(
    tmp_path: Path,
) -> None:
    """Defect: a queue taken out of the file while its DQF held messages: the restart
    kept them (one log line), but `mrs status` counted them in the group's DQF under no
    queue and said nothing; browse/move/purge answered only "no queue 1.20"; and
    `mrs admin add-queue 20` at run time did not give them back to the queue: a new
    put was delivered before them, and they came only after another restart, out of
    order. Now status says where they are, the refusal says how to reach them, and
    add-queue hands them to the queue before any new put."""
    bus = Bus(tmp_path / "bus", queues=STANDARD_QUEUES + REMOVED_QUEUE)
    bus.start()
    try:
        _put_all(bus.address, "GONE", KEPT_BODIES, DeliveryMode.WF_DQF)
        assert bus.process.terminate() == 0
        text = bus.config_path.read_text()
        bus.config_path.write_text(text.replace(REMOVED_QUEUE, ""))
        bus.start()
        status = status_json("--address", bus.address)
        assert status["dqf_unconfigured_queues"] == {"1.20": len(KEPT_BODIES)}
        table = run_mrs("status", "--address", bus.address, env=WIDE)
        assert "DQF keeps 3 messages for queue 1.20, not in the config" in table.stdout
        assert "the DQF keeps 3 messages for queue 1.20" in bus.log_text()
        browse = run_mrs("admin", "browse", "1.20", "--address", bus.address)
        assert browse.returncode == 1
        assert "the DQF keeps 3 messages for it: `mrs admin add-queue 20 NAME`" in browse.stderr
        added = run_mrs("admin", "add-queue", "20", "BACK", "--address", bus.address)
        assert added.returncode == 0, added.stderr
        assert "3 kept messages wait on it" in added.stdout
        _put_all(bus.address, "BACK", [b"new"], DeliveryMode.WF_DQF)
        assert _take_all(bus.address, "BACK") == [*KEPT_BODIES, b"new"]
        assert status_json("--address", bus.address)["dqf_unconfigured_queues"] == {}
    finally:
        bus.process.terminate()


def _two_group_bus(listen: dict[int, int], linked: bool, groups: tuple[int, ...]) -> str:
    parts = [
        textwrap.dedent(f"""\
            [[group]]
            id = {group_id}
            name = "G{group_id}"
            listen = "127.0.0.1:{listen[group_id]}"
            data_dir = "g{group_id}"
            [[group.queue]]
            id = 10
            name = "IN"
            [[group.queue]]
            id = 13
            name = "SENDER"
            """)
        for group_id in groups
    ]
    if linked:
        parts.append("[[link]]\ngroups = [1, 2]\n")
    return "\n".join(parts)


def test_saf_for_a_group_taken_out_of_the_bus_is_one_line_shown_and_sent_when_back(
    tmp_path: Path,
) -> None:
    """Defect: group 2 taken out of the file while group 1's SAF held messages for it:
    group 1 logged "SAF holds messages for group 2, which is no longer linked" once
    per message (a backlog of 100,000 is 100,000 WARNING lines), and `mrs status`
    showed a SAF count with no link row to say whose. Now it is one line with the
    count, and a status note; put back, the link sends every message, in order."""
    listen = {1: free_port(), 2: free_port()}
    config = tmp_path / "bus.toml"
    config.write_text(_two_group_bus(listen, linked=True, groups=(1, 2)))
    group1 = GroupProcess(config, 1)
    bodies = [b"saf %d" % index for index in range(SAF_MESSAGES)]
    group1.start()
    try:
        _put_all(group1.address, "2.10", bodies, DeliveryMode.WF_SAF)  # group 2 is down
        assert group1.terminate() == 0
        config.write_text(_two_group_bus(listen, linked=False, groups=(1,)))
        group1.start()
        assert status_json("--address", group1.address)["saf_unlinked_groups"] == {
            "2": SAF_MESSAGES
        }
        table = run_mrs("status", "--address", group1.address, env=WIDE)
        assert f"SAF keeps {SAF_MESSAGES} messages for group 2, not linked" in table.stdout
        log = (tmp_path / "group1.log").read_text()
        assert log.count("messages for group 2") == 1, log
        assert f"the SAF keeps {SAF_MESSAGES} messages for group 2" in log
        assert group1.terminate() == 0
        config.write_text(_two_group_bus(listen, linked=True, groups=(1, 2)))
        group1.start()
        group2 = GroupProcess(config, 2)
        group2.start()
        try:
            client = connect_sync(group2.address, "IN")
            try:
                taken = [client.get(timeout=30).body for _ in bodies]
            finally:
                client.close()
            assert taken == bodies
        finally:
            group2.terminate()
    finally:
        group1.terminate()
