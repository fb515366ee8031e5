"""A `[group.guards]` deadline or interval too short for any host to keep is refused
when the bus file loads, in one line naming the key (docs/configuration.md, "Guards").
Before, `heartbeat_interval_s = 0.000001` with `link_silence_s_max = 0.000002` loaded
and the group declared every link down as it came up and closed every client
(`mrs status` too) as silent: it served nothing, and nothing named the key."""

from __future__ import annotations

import pytest

from mrs.config.bus import ConfigError, parse_config

GROUP = """\
[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:7001"
data_dir = "g1"
[group.guards]
"""

SECONDS_KEYS = (
    "heartbeat_interval_s",
    "link_silence_s_max",
    "client_idle_s_max",
    "handshake_s_max",
    "frame_s_max",
)


@pytest.mark.parametrize("key", SECONDS_KEYS)
@pytest.mark.parametrize("value", ["0.000001", "1e-300", "0.049"])
def test_a_guard_deadline_shorter_than_any_host_keeps_is_refused_naming_it(
    tmp_path, key, value
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(GROUP + f"{key} = {value}\n", tmp_path / "bus.toml")
    message = str(caught.value)
    assert "\n" not in message
    assert f"group[0].guards.{key}: must be at least 0.05 s" in message
