"""Small operator defects, each run as a real `mrs` process or server: a grant of no
queue's shape, `mrs keys new --out` under a missing directory, `mrs failover --wait`
without bound, and a failed UMA logged as a lost message when its sender was told.
Each test names the defect it found."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, Status, Uma
from tests.auth_helpers import SecureBus, add_principal, password_of
from tests.cli_helpers import one_line, run_mrs

NO_QUEUE_SHAPE = {
    "1.": "has nothing after its dot",
    ".": "is a dot alone",
    ".ORDERS": "has nothing before its dot",
    "1.2.3": "has more than one dot",
    "1.*.*": "has more than one dot",
}
"""Grant patterns that match no spelling of any queue ("G.Q" or "Q", each part one
name or number), and the words of their refusal."""


def test_mrs_creds_refuses_a_grant_of_no_queues_shape(tmp_path: Path) -> None:
    """`mrs creds grant alice --file c.toml --put 1.` (or `.`, `.ORDERS`) was accepted
    and stored a grant that matched nothing: the principal was refused every put it
    was meant to have, with nothing said when the grant was written. A wildcard
    pattern stays a grant."""
    path = tmp_path / "c.toml"
    added = run_mrs("creds", "add", "alice", "--file", str(path), "--generate")
    assert added.returncode == 0, added.stderr
    before = path.read_text()
    for pattern, words in NO_QUEUE_SHAPE.items():
        result = run_mrs("creds", "grant", "alice", "--file", str(path), "--put", pattern)
        one_line(result, 2, f"put {pattern!r}", words, "a grant is a queue pattern")
        assert path.read_text() == before
    for pattern in ("1.*", "*", "*.ORDERS", "LDN.?0", "ORDERS"):
        result = run_mrs("creds", "grant", "alice", "--file", str(path), "--put", pattern)
        assert result.returncode == 0, (pattern, result.stderr)
    assert 'put = ["ORDERS"]' in path.read_text()


def test_mrs_admin_grant_refuses_a_grant_of_no_queues_shape_by_the_same_rule(
    tmp_path: Path,
) -> None:
    """The group's grant (`mrs admin grant`, the web page's) took `--put '1.*.*'`,
    which no queue can match, and refused `1.` as "group 1 (NYC) has no queue ''":
    each is now refused in the words `mrs creds` uses, and the file is untouched."""
    secure = SecureBus(tmp_path / "secure", group_ids=(1,))
    assert secure.config_path is not None
    add_principal(secure.config_path, "owner", ["--admin", "config"])
    credentials = tmp_path / "secure" / "creds.toml"
    secure.start()
    try:
        before = credentials.read_text()
        owner = {"MRS_AUTH_NAME": "owner", "MRS_AUTH_PASSWORD": password_of("owner")}
        for pattern in ("1.*.*", "1."):
            result = run_mrs("admin", "grant", "consumer", "--put", pattern,
                             "--address", secure.address(1), env=owner)  # fmt: skip
            one_line(result, 1, f"put {pattern!r}", NO_QUEUE_SHAPE[pattern])
            assert credentials.read_text() == before
        granted = run_mrs("admin", "grant", "consumer", "--put", "1.*",
                          "--address", secure.address(1), env=owner)  # fmt: skip
        assert granted.returncode == 0, granted.stderr
    finally:
        secure.stop()


def test_keys_new_refuses_an_out_directory_whose_parent_is_missing(tmp_path: Path) -> None:
    """`mrs keys new k1 --out /nonexistent/x` made every missing directory and put the
    private key there, where `mrs creds add --file /nonexistent/dir/c.toml` refuses a
    missing directory ("create it first"). The --out directory itself is still made
    (docs/security-protection.md: `mrs keys new SHOP --out keys`)."""
    missing = tmp_path / "typo" / "keys"
    result = run_mrs("keys", "new", "k1", "--out", str(missing))
    one_line(result, 1, str(missing.parent), "does not exist (create it first)")
    assert not missing.parent.exists()
    made = run_mrs("keys", "new", "k1", "--out", "keys", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "keys" / "k1.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "keys").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("wait", ["1e308", "inf", "0.1", "3601"])
def test_failover_wait_out_of_range_is_refused_at_parse_time(tmp_path: Path, wait: str) -> None:
    """`mrs failover --wait 1e308` was taken: a request the active never took stood
    for good and was never withdrawn. `--wait 0.1` was silently made 5 s."""
    config = tmp_path / "bus.toml"  # never read: the parser refuses first
    result = run_mrs("failover", "--config", str(config), "NYC", "--wait", wait)
    one_line(result, 2, "mrs failover", "argument --wait", "5..3600", wait)


async def _put_refused(address: str, puts: list[tuple[DeliveryMode, str]]) -> list[int]:
    """Each put with UMA SAF to a queue group 1 does not have; their seqs."""
    from clients import connect

    seqs = []
    async with connect(address, "SENDER") as sender:
        for mode, target in puts:
            psb = await sender.put(b"x", target=target, delivery=mode, uma=Uma.SAF)
            assert (psb.delivery_status, psb.uma_status) == (Status.NO_DQF, Status.SAF_FAILED)
            seqs.append(psb.seq)
    return seqs


def test_a_refused_put_whose_sender_is_told_is_not_logged_lost(make_bus) -> None:
    """A WF_DQF or WF_CONF put with UMA SAF to 1.55 from a client of group 1 is
    answered NO_DQF / SAF_FAILED, yet the group logged "the message is lost" at ERROR
    (nothing the sender was told was stored is lost), and the count line as the
    server stopped, "(4 more since the last such line)", named the first put's seq,
    none of the four."""
    bus = make_bus()
    puts = [(DeliveryMode.WF_DQF, "1.55")] * 3 + [(DeliveryMode.WF_CONF, "1.55")] * 2
    seqs = trio.run(_put_refused, bus.address, puts)
    assert bus.process.terminate() == 0
    log = bus.log_text()
    assert "the message is lost" not in log
    said = (
        "from 1.13 to 1.55 could not be delivered (NO_DQF) and its UMA SAF failed: "
        "the put was refused and its sender told so (SAF_FAILED)"
    )
    lines = [line for line in log.splitlines() if said in line]
    assert len(lines) == 2, lines  # once per interval, and the count as it stops
    assert f"WARNING mrs.group: message {seqs[0]} {said}" in lines[0]
    assert lines[1].endswith(
        f"message {seqs[-1]} {said} (4 more since the last such line; logged as the "
        "server stops); this is the latest"
    ), lines[1]
