"""LOW defects other probes of session 33 found, held: what a client and an operator
are told (a refusal's words, a status, a key's name), and one bus file mistake.

- a put or locate naming a group in the wrong case did not point at the case;
- `locate("1.0")` said "no queue named '1.0'" where put and attach said "queue 0 out
  of range";
- a delivery mode or UMA beyond int32 was BADPARAM, not BADDELIVERY / BADUMA;
- `Reconnect(...)` raised a bare ValueError and took `multiplier=nan`;
- `put(target=10)` did not say how to write queue 10;
- `mrs jplay --timeout -1` showed the client library's words;
- `[auth] credentials = "/"` and `[[link]] address = "0.0.0.0:P"` loaded.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clients import BadParameter, NoSuchQueue, NotSupported, Reconnect, Status
from clients.lookup import queue_text
from clients.requests import put_request
from mrs.config.bus import ConfigError, parse_config
from mrs.model import DeliveryMode, Uma
from mrs.tools.journal.jplay import _check_timeout
from mrs.tools.journal.replay import UsageError


async def test_a_group_named_in_the_wrong_case_is_pointed_at(mem_bus) -> None:
    """The mem_bus group is NYC; `nyc.ORDERS` was refused with the list of groups only
    (put), or "no queue named 'nyc.ORDERS'" (locate)."""
    async with mem_bus.connect(queue="SENDER") as sender:
        for call in (sender.put(b"x", target="nyc.ORDERS"), sender.locate("nyc.ORDERS")):
            with pytest.raises(NoSuchQueue) as refused:
                await call
            assert "no group named 'nyc'" in str(refused.value), refused.value
            assert "case-sensitive: did you mean 'NYC'?" in str(refused.value), refused.value


async def test_locate_refuses_a_queue_out_of_range_in_the_words_put_uses(mem_bus) -> None:
    async with mem_bus.connect(queue="SENDER") as sender:
        with pytest.raises(NoSuchQueue) as put:
            await sender.put(b"x", target="1.0")
        with pytest.raises(NoSuchQueue) as located:
            await sender.locate("1.0")
    assert "queue 0 out of range" in str(located.value)
    assert str(located.value) == str(put.value)


@pytest.mark.parametrize(
    ("field", "status", "words"),
    [
        ("delivery", Status.BADDELIVERY, "is not a delivery mode"),
        ("uma", Status.BADUMA, "is not a UMA"),
    ],
)
@pytest.mark.parametrize("value", [2**70, -(2**31) - 1])
def test_an_int_beyond_int32_is_no_mode_or_uma(field, status, words, value) -> None:
    """docs/delivery-modes.md (and MessageQ): an int that names no mode is BADDELIVERY,
    no UMA BADUMA; one beyond int32 was BADPARAM "must be in int32 range"."""
    fields = {"delivery": DeliveryMode.WF_DQF, "uma": Uma.DLJ, field: value}
    with pytest.raises(NotSupported) as refused:
        put_request(1, "ORDERS", b"x", fields["delivery"], fields["uma"], 0, 0, 0, 0, b"", "", None)
    assert refused.value.status == status and f"{value} {words}" in str(refused.value)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"multiplier": math.nan}, "multiplier"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"delay_s_max": math.inf}, "delay_s_max"),
        ({"delay_s_initial": 0}, "delay_s_initial"),
        ({"jitter": 2}, "jitter"),
        ({"attempts_max": 0}, "attempts_max"),
    ],
)
def test_a_reconnect_policy_no_client_can_follow_is_badparam(options, named) -> None:
    with pytest.raises(BadParameter) as refused:
        Reconnect(**options)
    assert refused.value.status == Status.BADPARAM and named in str(refused.value)


def test_an_int_target_is_refused_saying_how_to_name_that_queue() -> None:
    """`connect` takes a queue number; `put(target=10)` was told only "a queue is a str
    or an Address"."""
    with pytest.raises(BadParameter) as refused:
        queue_text(10, "put")
    assert "as '10'" in str(refused.value) and "'G.10'" in str(refused.value)


@pytest.mark.parametrize("value", [-1.0, 0.0, math.nan, math.inf])
def test_jplay_timeout_is_refused_as_an_option(value: float) -> None:
    """`--timeout -1` showed "(None: the group's default), got -1.0": a library's words."""
    with pytest.raises(UsageError) as refused:
        _check_timeout(value)
    said = str(refused.value)
    assert said.startswith("--timeout must be a finite number of seconds more than zero")
    assert "None" not in said


LINKED = (
    '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:7001"\ndata_dir = "g1"\n'
    '[[group]]\nid = 2\nname = "LDN"\nlisten = "0.0.0.0:7002"\ndata_dir = "g2"\n'
    "[[link]]\ngroups = [1, 2]\n"
)


def _refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as refused:
        parse_config(text, tmp_path / "bus.toml")
    return str(refused.value)


@pytest.mark.parametrize("address", ["0.0.0.0:7002", "[::]:7002"])
def test_a_listen_all_link_address_is_no_address_to_dial(tmp_path: Path, address: str) -> None:
    said = _refusal(tmp_path, LINKED + f'address = "{address}"\n')
    assert "link[0].address" in said and "listens on every address" in said, said
    parse_config(LINKED + 'address = "127.0.0.1:7002"\n', tmp_path / "bus.toml")  # loads


def test_auth_credentials_that_is_a_directory_is_named_by_its_key(tmp_path: Path) -> None:
    """Was "credentials file /: Is a directory", at `mrs serve`, naming no key."""
    said = _refusal(tmp_path, LINKED + '[auth]\ncredentials = "/"\nlink_secrets = "secrets"\n')
    assert "auth.credentials" in said and "/ is a directory" in said, said
