"""A principal's grants as an operator writes them, against real `mrs serve` groups
with [auth] on (groups G1 and G2, each with queues IN = 10, OTHER = 11, SENDER = 13).
Each test names the defect it found."""

from __future__ import annotations

import os
import re

import pytest
import trio

from clients import DeliveryMode, MrsError, NotAuthorized, Status, Uma, connect
from mrs.security.handshake import AUTH_VERSION, FrameReader, encode
from mrs.security.scram import nonce
from tests.auth_helpers import ITERATIONS, SecureBus, add_principal, creds, password_of
from tests.cli_helpers import run_mrs
from tests.process.test_auth import put, raw_stream, wait_link_up

WAIT_S = 20.0
SPELLINGS_OF_2_10 = ("2.10", "G2.IN", "2.IN", "G2.10")


@pytest.fixture(scope="module")
def granted(tmp_path_factory):
    """Group 2 has a queue SHIPPING (2.20) too. `named` and `shipper` hold grants
    written with the groups' and queues' names, `bare` with a queue's name alone;
    `legacy` was written with `--file` (no bus to check against) naming a queue and
    a group the bus does not have, and SHIPPING alone (group 2's, before)."""
    bus = SecureBus(tmp_path_factory.mktemp("grants"))
    config = bus.config_path
    assert config is not None
    shipping = '[[group.queue]]\nid = 20\nname = "SHIPPING"\nconfirm = "explicit-in-order"\n'
    config.write_text(config.read_text().replace("[[link]]", shipping + "\n[[link]]"))
    add_principal(config, "named", ["--attach", "G1.SENDER", "--put", "G2.IN"])
    add_principal(config, "wild", ["--attach", "1.13", "--put", "G2.*"])
    add_principal(config, "bare", ["--attach", "SENDER", "--put", "IN"])
    add_principal(config, "shipper", ["--attach", "SENDER", "--put", "G2.SHIPPING"])
    add_principal(config, "keeper", ["--manage", "G1.IN", "--admin", "config"])
    secret = bus.directory / "legacy.pw"
    secret.write_text(password_of("legacy"))
    result = run_mrs("creds", "add", "legacy", "--file", str(bus.directory / "creds.toml"),
                     "--password-file", str(secret), "--iterations", ITERATIONS,
                     "--attach", "1.13", "--put", "NOWHERE", "--put", "G7.*",
                     "--put", "SHIPPING")  # fmt: skip
    assert result.returncode == 0, result.stderr
    bus.start()
    yield bus
    bus.stop()


async def test_a_grant_naming_the_group_by_name_allows_every_spelling(granted) -> None:
    """`--put G2.IN` was accepted and then matched nothing: patterns were matched
    against `G.Q` and the bare queue name only, so a put to 2.10 was refused "put to
    2.10 is not granted" however the target was spelled."""
    await wait_link_up(granted)
    for principal in ("named", "wild"):
        for target in SPELLINGS_OF_2_10:
            await put(granted.address(1), principal, "G1.SENDER", target)  # not refused
    with pytest.raises(NotAuthorized, match="put to 2.11 is not granted"):
        await put(granted.address(1), "named", "1.13", "G2.OTHER")


async def test_a_bare_queue_name_grants_the_connected_groups_queue_only(granted) -> None:
    """`--put IN` matched every group's IN (queue names are unique only within a
    group) where the code said "one queue by name": it is now the queue the name
    names as an address, the connected group's, as `put(target="IN")` means."""
    await wait_link_up(granted)
    await put(granted.address(1), "bare", "SENDER", "IN")  # not refused
    await put(granted.address(1), "bare", "1.13", "1.10")
    for target in ("2.10", "G2.IN"):
        with pytest.raises(NotAuthorized, match="put to 2.10 is not granted"):
            await put(granted.address(1), "bare", "1.13", target)
    # From group 2, the same grant names group 2's own IN.
    await put(granted.address(2), "bare", "2.13", "2.10")
    with pytest.raises(NotAuthorized, match="put to 1.10 is not granted"):
        await put(granted.address(2), "bare", "2.13", "G1.IN")


@pytest.mark.parametrize(
    ("pattern", "named"),
    [
        ("G3.IN", "'G3'"),
        ("2.NOPE", "'NOPE'"),
        ("NOPE", "'NOPE'"),
        ("G9.*", "'G9'"),
        ("G1.SHIPPING", "'SHIPPING'"),
    ],
)
def test_mrs_creds_refuses_a_grant_naming_what_the_bus_does_not_have(
    granted, pattern: str, named: str
) -> None:
    """`mrs creds add x --put G3.IN` was accepted, and granted nothing: now one line
    naming what the bus does not have, exit status 2, and the file unchanged."""
    config = str(granted.config_path)
    before = (granted.directory / "creds.toml").read_bytes()
    name = "typo" + re.sub("[^A-Za-z0-9]", "_", pattern)
    result = run_mrs("creds", "add", name, "--config", config, "--generate", "--put", pattern)
    assert result.returncode == 2, result
    assert result.stdout == "" and "Traceback" not in result.stderr, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and pattern in lines[0], lines
    assert (granted.directory / "creds.toml").read_bytes() == before
    grant = run_mrs("creds", "grant", "bare", "--config", config, "--put", pattern)
    assert grant.returncode == 2 and named in grant.stderr, grant


@pytest.fixture
def scratch_config(granted, tmp_path):
    """The bus file with a copy of its credentials file, for `mrs creds` to change."""
    copy = tmp_path / "creds.toml"
    copy.write_bytes((granted.directory / "creds.toml").read_bytes())
    os.chmod(copy, 0o600)
    config = tmp_path / "bus.toml"
    config.write_text(granted.config_path.read_text().replace('"creds.toml"', f'"{copy}"'))
    return config


@pytest.mark.parametrize(("pattern", "said"), [("2.99", "no queue 99"), ("7.*", "no group 7"),
                                                ("7.10", "no group 7")])  # fmt: skip
def test_mrs_creds_takes_a_number_the_bus_does_not_have_yet_and_says_so(
    scratch_config, pattern: str, said: str
) -> None:
    """A group or queue number may be one to come (`mrs admin add-queue`, a group
    not yet in this bus file), as an address `2.99` is taken unconfigured."""
    result = run_mrs("creds", "grant", "bare", "--config", str(scratch_config), "--put", pattern)
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "note:" in line]
    assert len(notes) == 1 and said in notes[0] and pattern in notes[0], result.stderr


def test_mrs_creds_still_takes_wildcards_and_every_spelling(scratch_config) -> None:
    for pattern in ("*", "*.IN", "G2.*", "2.1?", "G1.SENDER", "1.SENDER", "G1.13", "OTHER",
                    "SHIPPING", "*.SHIPPING", "PAMS_DEAD_LETTER_QUEUE"):  # fmt: skip
        result = run_mrs(
            "creds", "grant", "bare", "--config", str(scratch_config), "--put", pattern
        )
        assert result.returncode == 0, (pattern, result.stderr)
        assert "note:" not in result.stderr, (pattern, result.stderr)


def test_a_file_with_grants_naming_nothing_still_loads_with_a_warning(granted) -> None:
    """A credentials file written before `mrs creds` checked names (or by hand) must
    never keep a group from starting: the group serves, and its log says which
    grants name nothing."""
    log = granted.log(1)
    assert "Traceback" not in log
    warned = [line for line in log.splitlines() if "WARNING" in line and "'legacy'" in line]
    assert any("'NOWHERE'" in line for line in warned), warned
    assert any("'G7.*'" in line for line in warned), warned
    # SHIPPING alone names group 1's queue from group 1, which has none: said there
    assert any("'SHIPPING' grants nothing from group 1" in line for line in warned), warned
    assert "'SHIPPING' grants nothing" not in granted.log(2)
    assert "'IN'" not in log  # a queue name alone that the group has: no warning


async def test_the_reported_grant_by_group_name_puts_to_shipping(granted) -> None:
    """The probe's case: `mrs creds add x --put LDN.SHIPPING` was accepted and the
    put to LDN.SHIPPING (2.20) refused "put to 2.20 is not granted"."""
    await wait_link_up(granted)
    await put(granted.address(1), "shipper", "SENDER", "G2.SHIPPING")  # not refused
    await put(granted.address(1), "shipper", "SENDER", "2.20")
    with pytest.raises(NotAuthorized, match="put to 2.20 is not granted"):
        await put(granted.address(1), "legacy", "1.13", "2.20")  # SHIPPING alone: 1's


async def test_a_long_unknown_name_is_clipped_in_the_answer_and_the_log(granted) -> None:
    """A user name the peer chose (up to ~4 KB) went whole into "authentication
    failed for NAME", in the log and in the answer."""
    name = "x" * 3900
    stream = await raw_stream(granted.address(1))
    async with stream:
        reader = FrameReader(stream)
        await stream.send_all(encode({"auth": AUTH_VERSION, "name": name, "nonce": nonce()}))
        with trio.fail_after(WAIT_S):
            challenge = await reader.frame()
            assert isinstance(challenge, dict) and "salt" in challenge, challenge
            await stream.send_all(encode({"proof": os.urandom(32)}))
            answer = await reader.frame()
    assert isinstance(answer, dict) and answer.get("ok") is False, answer
    message = answer["message"]
    assert message.startswith("authentication failed for 'xxx") and len(message) < 400, message
    # the log line is written before the answer is sent
    lines = [line for line in granted.log(1).splitlines() if "authentication failed" in line]
    assert lines and all(len(line) < 600 for line in lines), [len(line) for line in lines]
    assert not re.search("x{400}", granted.log(1))


async def test_an_attach_grant_spelled_with_names_attaches(granted) -> None:
    async with connect(granted.address(1), "G1.SENDER", credentials=creds("named")) as client:
        await client.put(b"m", target="G2.IN", delivery=DeliveryMode.WF_MEM, uma=Uma.DISC)


async def test_manage_and_admin_grant_read_names_as_mrs_creds_does(granted) -> None:
    """`mrs admin` on a queue managed under a name (`--manage G1.IN`), and `mrs admin
    grant` refusing a name the bus does not have, as `mrs creds` does."""
    async with connect(granted.address(1), None, credentials=creds("keeper")) as client:
        browsed = await client.admin("browse", queue="1.10")
        assert browsed["queue"] == "1.10"
        with pytest.raises(NotAuthorized, match="browse on 1.11 needs the manage right"):
            await client.admin("browse", queue="G1.OTHER")
        with pytest.raises(MrsError, match="the bus has no group 'G3'") as refused:
            await client.admin("grant", principal="bare", put=["G3.IN"])
        assert refused.value.status == Status.BADPARAM
    assert "G3.IN" not in (granted.directory / "creds.toml").read_text()
