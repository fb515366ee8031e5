"""Journal usage in status, WARNING logs at thresholds, and the map growing online —
with a real server on a small real LMDB map."""

from __future__ import annotations

from clients import MrsError, connect_sync
from mrs.model import DeliveryMode
from tests.cli_helpers import status_json

BODY = b"x" * 20_000


def _status(address: str) -> dict:
    return status_json("--address", address)


def _put(address: str, count: int) -> int:
    """Put `count` recoverable messages; how many were stored."""
    stored = 0
    with connect_sync(address, "ORDERS") as client:
        for _ in range(count):
            try:
                psb = client.put(BODY, "1.10", delivery=DeliveryMode.WF_DQF)
            except MrsError:  # a full journal refuses; counted below
                continue
            stored += psb.stored
    return stored


def test_usage_is_reported_and_warned_at_each_threshold(make_bus) -> None:
    bus = make_bus(
        limits="journal_bytes_max = 2097152\nmessage_bytes_max = 100000",
        group_extra="[group.ops]\njournal_warn_percent = [30, 60]",
    )
    before = _status(bus.address)["journal"]
    assert before["cap_bytes"] == 2097152 and before["records"]["dqf"] == 0
    assert before["used_percent"] < 30
    assert "threshold 30%" not in bus.log_text()

    stored = _put(bus.address, 40)  # ~800 KB: past 30%, under 60%
    after = _status(bus.address)["journal"]
    assert after["records"]["dqf"] == stored == 40
    assert 30 <= after["used_percent"] < 60
    assert after["used_bytes"] > before["used_bytes"] + 40 * len(BODY)
    log = bus.log_text()
    assert log.count("threshold 30%") == 1 and "threshold 60%" not in log
    assert "WARNING mrs.journal: group 1 journal" in log

    _put(bus.address, 30)
    final = _status(bus.address)["journal"]
    assert final["used_percent"] >= 60
    log = bus.log_text()
    assert log.count("threshold 30%") == 1 and log.count("threshold 60%") == 1


def test_the_map_grows_online_up_to_the_cap(make_bus) -> None:
    bus = make_bus(
        limits="journal_bytes_max = 4194304\nmessage_bytes_max = 100000",
        group_extra="[group.ops]\njournal_bytes_initial = 1048576",
    )
    assert _status(bus.address)["journal"]["map_bytes"] == 1048576
    stored = _put(bus.address, 120)  # ~2.4 MB: more than twice the first map
    journal = _status(bus.address)["journal"]
    assert stored == 120, "a put was refused although the cap was not reached"
    assert journal["records"]["dqf"] == 120
    assert 1048576 < journal["map_bytes"] <= 4194304
    assert journal["map_grown_times"] >= 1
    assert "journal map grown from 1048576" in bus.log_text()
    # past the cap, puts are refused (MRS_RES_EXH), the map stays at the cap
    more = _put(bus.address, 120)
    journal = _status(bus.address)["journal"]
    assert more < 120 and journal["map_bytes"] == 4194304
