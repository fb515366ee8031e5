"""A TLS link to a replicated group checks every instance it dials by the group's
name (mrs-group-N), not only the first: `mrs certs` names the group, not each
instance's host, so after a failover to an instance on another host the link never
came back up."""

from __future__ import annotations

from pathlib import Path

from mrs.config.bus import load_config
from mrs.security.tls_network import tls_network
from mrs.tools.certs import make_certs

BUS = """
[coordinator]
etcd = ["http://127.0.0.1:2379"]

[[group]]
id = 1
name = "NYC"
listen = "127.0.0.1:7001"
data_dir = "g1"
{tls1}
[[group]]
id = 2
name = "LDN"
{tls2}
[[group.instance]]
name = "a"
listen = "10.0.0.1:7101"
replication = "10.0.0.1:7201"
data_dir = "r2a"

[[group.instance]]
name = "b"
listen = "10.0.0.2:7101"
replication = "10.0.0.2:7201"
data_dir = "r2b"

[[group.instance]]
name = "c"
listen = "10.0.0.3:7101"
replication = "10.0.0.3:7201"
data_dir = "r2c"

[[link]]
groups = [1, 2]
"""


def _tls(group_id: int) -> str:
    return (
        f'[group.tls]\nca = "certs/ca.pem"\ncert = "certs/group-{group_id}.pem"\n'
        f'key = "certs/group-{group_id}.key"\n'
    )


def test_every_instance_of_a_replicated_peer_is_checked_by_the_groups_name(
    tmp_path: Path,
) -> None:
    plain = tmp_path / "plain.toml"
    plain.write_text(BUS.format(tls1="", tls2=""))
    make_certs(load_config(plain), tmp_path / "certs")
    config = tmp_path / "bus.toml"
    config.write_text(BUS.format(tls1=_tls(1), tls2=_tls(2)))
    bus = load_config(config)
    names = tls_network(bus, bus.group(1)).peer_names
    for host in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        assert names.get((host, 7101)) == "mrs-group-2", names
