"""Broken builds reach a server only through its constructor, as a `Guarantees` part
from mrs.testing.broken_builds; `mrs serve` reads MRS_HARNESS_UNSAFE at the CLI edge
(and refuses unknown words)."""

from __future__ import annotations

import os
import subprocess
import sys

from clients import DeliveryMode, Status, Uma, connect_sync
from mrs.config.bus import parse_config
from mrs.group import KEPT
from mrs.server.group_server import GroupServer
from mrs.testing.broken_builds import (
    UNSAFE_ENV,
    UNSAFE_POSSDUPL_ALWAYS,
    broken_build,
    broken_build_from,
)


def test_the_server_never_reads_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(UNSAFE_ENV, UNSAFE_POSSDUPL_ALWAYS)
    bus = parse_config(
        '[[group]]\nid = 1\nname = "A"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n',
        tmp_path / "bus.toml",
    )
    assert GroupServer(bus, bus.group(1)).guarantees is KEPT
    given = broken_build({UNSAFE_POSSDUPL_ALWAYS})
    assert GroupServer(bus, bus.group(1), guarantees=given).guarantees is given
    # what `mrs serve` passes in
    assert broken_build_from(os.environ).broken == {UNSAFE_POSSDUPL_ALWAYS}


def test_mrs_serve_honours_the_switch_from_its_environment(make_bus) -> None:
    broken = make_bus(env={UNSAFE_ENV: UNSAFE_POSSDUPL_ALWAYS})
    healthy = make_bus()
    for bus, first_status in ((broken, Status.POSSDUPL), (healthy, Status.CONFIRMREQ)):
        with connect_sync(bus.address, "ORDERS") as client:
            client.put(b"one", "1.10", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ, timeout=10)
            message = client.get(timeout=10)
            assert message.delivery_status == first_status
            client.confirm(message.seq)
    assert "UNSAFE" in broken.log_text() and "UNSAFE" not in healthy.log_text()


def test_an_unknown_switch_is_refused_in_one_line(tmp_path) -> None:
    config = tmp_path / "bus.toml"
    config.write_text('[[group]]\nid = 1\nname = "A"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n')
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", "1"],
        env={**os.environ, UNSAFE_ENV: "bogus"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "unknown switches ['bogus']" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
