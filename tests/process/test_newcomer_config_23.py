"""A newcomer's walk through getting-started.md and configuration.md, and an operator's
mistakes in a bus file or on the command line: each is one line naming the file, the
key and the problem (exit 2), never a traceback nor "unexpected error", and
configuration.md's transcript of those lines is what `mrs serve` prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mrs.config.bus import ConfigError, load_config
from sim.ports import free_port
from tests.cli_helpers import one_line, run_mrs

DOCS = Path(__file__).resolve().parents[2] / "docs"
LABEL_TOO_LONG = "a" * 64  # one dot-separated part of a host name holds at most 63


def _group(group_id: int, name: str, listen: str, extra: str = "") -> str:
    return (
        f'[[group]]\nid = {group_id}\nname = "{name}"\nlisten = "{listen}"\n'
        f'data_dir = "g{group_id}"\n{extra}'
    )


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bus.toml"
    path.write_text(text)
    return path


def _refused(tmp_path: Path, text: str) -> str:
    """The one line loading `text` as bus.toml is refused with (it must be)."""
    with pytest.raises(ConfigError) as caught:
        load_config(_write(tmp_path, text))
    line = str(caught.value)
    assert "\n" not in line
    return line


# -- two groups on one port of one machine -------------------------------------------


@pytest.mark.parametrize(
    ("wildcard", "shown", "other"),
    [
        ("0.0.0.0", "0.0.0.0", "127.0.0.1"),
        ("0.0.0.0", "0.0.0.0", "localhost"),
        ("[::]", "[::]", "127.0.0.1"),
        ("[::]", "[::]", "0.0.0.0"),
    ],
)
def test_a_group_on_a_wildcard_host_holds_its_port_for_every_local_group(
    tmp_path: Path, wildcard: str, shown: str, other: str
) -> None:
    """Group 1 on 0.0.0.0:P holds 127.0.0.1:P too, so group 2 on 127.0.0.1:P could
    not start, and `mrs status`, group 2's clients and group 1's link dialing group 2
    reached group 1 and took it for group 2 ("2 of 2 groups up" with one running)."""
    text = _group(1, "NYC", f"{wildcard}:7001") + _group(2, "LON", f"{other}:7001")
    line = _refused(tmp_path, text + "[[link]]\ngroups = [1, 2]\n")
    assert f"group[1].listen: {other}:7001 is also the address of group[0].listen" in line
    assert f"({shown}:7001: a 0.0.0.0 or :: host takes its port" in line


def test_a_wildcard_host_and_another_machines_address_on_one_port_load(tmp_path: Path) -> None:
    """Not every port is shared: a group on 0.0.0.0:7001 and one on another machine's
    10.1.2.3:7001, or a metrics endpoint of one group on another port, still load."""
    text = _group(1, "NYC", "0.0.0.0:7001") + _group(2, "LON", "10.1.2.3:7001")
    bus = load_config(_write(tmp_path, text))
    assert (bus.groups[1].listen_port, bus.groups[2].listen_port) == (7001, 7001)
    ops = '[group.ops]\nmetrics_listen = "127.0.0.1:9101"\n'
    load_config(
        _write(tmp_path, _group(1, "NYC", "0.0.0.0:7001", ops) + _group(2, "LON", "0.0.0.0:7002"))
    )


def test_a_metrics_endpoint_on_a_port_another_groups_wildcard_holds_is_refused(
    tmp_path: Path,
) -> None:
    ops = '[group.ops]\nmetrics_listen = "127.0.0.1:7001"\n'
    text = _group(1, "NYC", "0.0.0.0:7001") + _group(2, "LON", "127.0.0.1:7002", ops)
    line = _refused(tmp_path, text)
    assert "group[1].ops.metrics_listen: 127.0.0.1:7001 is also the address of group[0]" in line


def test_status_refuses_a_bus_whose_groups_share_a_port_in_one_line(tmp_path: Path) -> None:
    """Before: "0 of 2 groups up" (or, with group 1 running, "2 of 2 groups up")."""
    port = free_port()
    text = _group(1, "NYC", f"0.0.0.0:{port}") + _group(2, "LON", f"127.0.0.1:{port}")
    config = _write(tmp_path, text)
    result = run_mrs("status", "--config", str(config), "--timeout", "0.5")
    one_line(result, 2, "config error:", "group[1].listen", f"0.0.0.0:{port}")
    assert result.stdout == ""


# -- a host that can never be a host ---------------------------------------------------


@pytest.mark.parametrize(
    ("where", "text"),
    [
        ("group[0].listen", _group(1, "NYC", f"{LABEL_TOO_LONG}.example:7001")),
        ("group[0].listen", _group(1, "NYC", "127.0.0.1\\u0000junk:7001")),
        ("group[0].listen", _group(1, "NYC", "a..b:7001")),
        (
            "group[0].ops.metrics_listen",
            _group(
                1, "NYC", "127.0.0.1:0", f'[group.ops]\nmetrics_listen = "{LABEL_TOO_LONG}:1"\n'
            ),
        ),
        (
            "link[0].address",
            _group(1, "NYC", "127.0.0.1:0")
            + _group(2, "LON", "127.0.0.1:0")
            + f'[[link]]\ngroups = [1, 2]\naddress = "{LABEL_TOO_LONG}:7002"\n',
        ),
    ],
    ids=["label-too-long", "nul", "empty-label", "metrics", "link"],
)
def test_a_host_no_socket_can_use_is_refused_naming_its_key(
    tmp_path: Path, where: str, text: str
) -> None:
    """A part over 63 characters failed the socket's IDNA encoding (`mrs serve`:
    "unexpected error: UnicodeError"); a NUL cut the host there for the server (it
    listened on 127.0.0.1) but not for `mrs status`, which dialed the whole string."""
    line = _refused(tmp_path, text)
    assert f"bus.toml: {where}: " in line
    assert "not a host name" in line or "control characters" in line, line


def test_serve_on_an_unusable_host_is_a_config_error_not_an_unexpected_one(
    tmp_path: Path,
) -> None:
    config = _write(tmp_path, _group(1, "NYC", f"{LABEL_TOO_LONG}:7001"))
    result = run_mrs("serve", "--config", str(config), "--group", "1")
    one_line(result, 2, "config error:", "group[0].listen", "not a host name")
    assert not (tmp_path / "g1").exists()  # refused before the data directory is made


def test_admin_at_an_unusable_address_says_so_in_one_line() -> None:
    """`--address` goes to the client library, whose socket call raised UnicodeError:
    `mrs admin` printed the codec's words, `mrs jplay` "unexpected error". A usage
    mistake since `mrs admin` reads --address as `mrs status` does (exit 2)."""
    result = run_mrs("admin", "connections", "--address", f"{LABEL_TOO_LONG}:7001")
    text = one_line(result, 2, "the host is not a host name")
    assert "idna" not in text


@pytest.mark.parametrize("flag", ["status", "web"])
def test_an_unusable_address_option_is_a_usage_error(flag: str, tmp_path: Path) -> None:
    config = _write(tmp_path, _group(1, "NYC", "127.0.0.1:0"))
    args = (
        ["status", "--address", f"{LABEL_TOO_LONG}:7001"]
        if flag == "status"
        else ["web", "--config", str(config), "--listen", f"{LABEL_TOO_LONG}:0"]
    )
    one_line(run_mrs(*args), 2, "not a host name")


# -- the command line ------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_web_refuses_a_timeout_that_is_not_a_positive_number(tmp_path: Path, value: str) -> None:
    """Taken before: the page then showed every group DOWN ("`seconds` must be
    non-negative") or REFUSED (BADPARAM) while each served, and `mrs web` ran on."""
    config = _write(tmp_path, _group(1, "NYC", "127.0.0.1:0"))
    result = run_mrs(
        "web",
        "--config",
        str(config),
        "--listen",
        "127.0.0.1:0",
        "--timeout",
        value,
        timeout_s=30,
    )
    one_line(
        result,
        2,
        "mrs web: argument --timeout: must be a number of seconds 0.01..600",
        "mrs web --help",
    )
    assert result.stdout == ""  # no WEB line: nothing was served


def _transcript() -> list[tuple[str, str]]:
    """configuration.md's "Errors" console block: (command, the line it prints)."""
    page = (DOCS / "configuration.md").read_text()
    section = page.split("## Errors", 1)[1]
    block = re.search(r"```console\n(.*?)```", section, re.S)
    assert block is not None
    lines = block.group(1).splitlines()
    return [
        (line[2:].split("#")[0].strip(), lines[i + 1])
        for i, line in enumerate(lines)
        if line.startswith("$ ")
    ]


def test_configuration_md_error_transcript_is_what_serve_prints(tmp_path: Path) -> None:
    """The page shows `bus.toml: --group: no group 7`; `mrs serve` named the file by
    its absolute path there, unlike every other config error (the file as given)."""
    groups = _group(1, "NYC", "127.0.0.1:0", '[[group.queue]]\nid = 10\nname = "ORDERS"\n')
    typo = groups + 'confrm = "implicit"\n' + _group(2, "LON", "127.0.0.1:0")
    config = _write(tmp_path, typo)
    steps = _transcript()
    assert [command.split()[:2] for command, _ in steps] == [["mrs", "serve"]] * 2
    for n, (command, expected) in enumerate(steps):
        if n == 1:  # "the typo fixed"
            config.write_text(typo.replace('confrm = "implicit"\n', ""))
        result = subprocess.run(
            [sys.executable, "-m", "mrs", *command.split()[1:]],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip() == expected


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (
            ["serve", "--confg", "bus.toml", "--group", "1"],
            "mrs serve: the following arguments are required: --config "
            "(--confg is not an option: did you mean --config?) (see mrs serve --help)",
        ),
        (
            ["admin", "move", "ORDERS", "--config", "bus.toml", "--too", "X"],
            "mrs admin move: the following arguments are required: --to "
            "(--too is not an option: did you mean --to?) (see mrs admin move --help)",
        ),
    ],
    ids=["serve", "admin-move"],
)
def test_a_misspelt_option_is_named_when_a_required_one_is_missing(
    args: list[str], hint: str
) -> None:
    """argparse reports the required option first: "required: --config" alone, to an
    operator who believed they had given it."""
    assert one_line(run_mrs(*args), 2) == hint
