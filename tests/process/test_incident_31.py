"""An operator woken by an incident reads `mrs status` and the server log: each state
that refuses messages is said once in the log, with what helps, and `mrs status`
says which queue's consumer stopped confirming; a link's log ends with its state."""

from __future__ import annotations

import re
import time
from pathlib import Path

from clients import DeliveryMode, Status, TooManyUnconfirmed, Uma, connect_sync
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.cli_helpers import run_mrs, status_json
from tests.conftest import Bus
from tests.process.test_config_change_23 import _two_group_bus

LOG_WAIT_S = 20.0
"""The longest a line the group checks for once a second may take to appear."""

QUEUES = """
[[group.queue]]
id = 10
name = "ORDERS"
confirm = "explicit-in-order"
unconfirmed_max = 3
[[group.queue]]
id = 13
name = "SENDER"
confirm = "explicit-out-of-order"
"""

WIDE = {"COLUMNS": "400"}


def _log_line(path: Path, pattern: str) -> str:
    """The first line of the log at `path` matching `pattern`, waiting for it."""
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        text = path.read_text(errors="replace") if path.exists() else ""
        found = re.search(f"^.*{pattern}.*$", text, re.MULTILINE)
        if found:
            return found.group(0)
        assert time.monotonic() < deadline, f"no line {pattern!r} in:\n{text[-3000:]}"
        time.sleep(0.05)


def test_a_consumer_that_stops_confirming_is_seen_and_the_full_dqf_said_once(
    tmp_path: Path,
) -> None:
    """Before: a consumer holding its queue's unconfirmed_max showed only as an
    Unconfirmed count, and a DQF at dqf_messages_max answered every put DQF_FULL with
    nothing in the log at all (the senders' messages went to their DLJs)."""
    bus = Bus(tmp_path / "bus", limits="dqf_messages_max = 10", queues=QUEUES)
    bus.start()
    log_path = bus.config_path.parent / "group1.log"
    with (
        connect_sync(bus.address, "SENDER") as sender,
        connect_sync(bus.address, "ORDERS") as consumer,
    ):
        for index in range(10):
            sender.put(b"order %d" % index, "ORDERS", delivery=DeliveryMode.WF_DQF)
        held = [consumer.get(timeout=10) for _ in range(3)]  # and never confirmed
        try:
            consumer.get(timeout=0)
            raise AssertionError("a fourth get past unconfirmed_max = 3 was answered")
        except TooManyUnconfirmed:
            pass
        row = run_mrs("status", "--address", bus.address, env=WIDE).stdout
        assert "at its unconfirmed_max (3): gets refused EXCMAXUNCONF" in row, row
        for index in range(5):
            psb = sender.put(b"late %d" % index, "ORDERS", delivery=DeliveryMode.WF_DQF,
                             uma=Uma.DISC)  # fmt: skip
            assert psb.delivery_status == Status.DQF_FULL
        full = _log_line(log_path, "the DQF holds")
        assert "WARNING" in full and "10 of dqf_messages_max 10" in full, full
        assert "answered DQF_FULL" in full and "1.10 ORDERS 10" in full, full
        assert "(3 unconfirmed, at its unconfirmed_max)" in full, full
        for message in held:
            message.confirm()
        for _ in range(7):
            consumer.get(timeout=10).confirm()
        _log_line(log_path, r"INFO .*the DQF holds \d+ of dqf_messages_max 10 again")
    assert "at_unconfirmed_max" not in status_json("--address", bus.address)["queues"]["1.10"]
    assert bus.log_text().count("the DQF holds") == 2  # a state change each, not per put
    assert bus.process.terminate() == 0


def test_failed_dials_counted_while_the_peer_was_down_are_logged_before_its_up_line(
    tmp_path: Path,
) -> None:
    """Before: the failed redials counted while group 2 was down were logged ten
    seconds after `link to group 2 up`, so the last line about the link said every
    attempt to connect failed, and an operator reading the log's tail saw it down."""
    listen = {1: free_port(), 2: free_port()}
    config = tmp_path / "bus.toml"
    config.write_text(_two_group_bus(listen, linked=True, groups=(1, 2)))
    group1, group2 = GroupProcess(config, 1), GroupProcess(config, 2)
    log_path = tmp_path / "group1.log"
    group1.start()
    try:
        _log_line(log_path, "link to group 2 at .*retrying in")
        group2.start()
        up = _log_line(log_path, "link to group 2 up")
        text = log_path.read_text()
        counted = re.search(r"more since the last such line, before the link came up", text)
        assert counted is not None, text
        assert counted.start() < text.index(up), text
    finally:
        group2.terminate()
        group1.terminate()
