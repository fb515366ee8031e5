"""The claims of the newcomer's and the operator's pages that no pasted block checks.

test_docs_pasted.py pastes every runnable block; these tests hold the rest of what a
reader copies or relies on: the tables that say which class to catch and which
guard has which default, the transcripts of what `mrs` prints when a port is taken
or a group is down, the reconnect defaults, and the whole output a runnable example
says it prints. Each reads the page itself, so an edit of the page or of the code
that makes them disagree fails here.
"""

from __future__ import annotations

import dataclasses
import re
import socket
import tomllib
from pathlib import Path

import clients
import mrs.errors
from clients import Reconnect
from clients.reconnect import PASSING_REFUSALS
from mrs.config.bus import parse_config
from mrs.config.guards import GUARD_KEYS, Guards
from mrs.model import Status
from sim.ports import free_port
from tests.cli_helpers import run_mrs
from tests.process.test_docs_pasted import DOCS, PastedPage, blocks, fenced
from tests.process.test_walkthrough_probes import _transcript


def _table_rows(page: str, section: str) -> list[list[str]]:
    """The body rows of the first markdown table under `section`, cells stripped."""
    text = (DOCS / page).read_text()
    start = text.index(section)
    rows: list[list[str]] = []
    for line in text[start:].splitlines()[1:]:
        if rows and not line.startswith("|"):
            break
        if line.startswith("|") and not line.startswith("| ---"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows[1:]  # the header row is not a row of the table


def test_getting_started_error_table_names_the_class_of_every_status() -> None:
    """getting-started.md's table is how a newcomer learns which class to catch: a
    status the library raises as its own class (NOTAUTHORIZED under [auth] was
    missing) must be in the row of that class, and every class named must be one
    `clients` exports."""
    rows = _table_rows("getting-started.md", "## Errors")
    listed: dict[str, set[str]] = {}
    for names, statuses in rows:
        for name in re.findall(r"`(\w+)`", names.split("(")[0]):  # not "(a `TimeoutError`)"
            listed[name] = set(re.findall(r"\b[A-Z][A-Z_]+\b", statuses))
    assert all(hasattr(clients, name) for name in listed), sorted(listed)
    for status in Status:
        if status.value >= 0:
            continue
        raised = type(mrs.errors.error_for(status, "")).__name__
        if raised != "MrsError":
            assert status.name in listed.get(raised, set()), (status.name, raised)


def test_configuration_guards_block_shows_each_default() -> None:
    """configuration.md's [group.guards] block is the list an operator tunes from:
    every guard is there, and each value shown is the default a bus without the
    key runs with."""
    [shown] = blocks("configuration.md", "Guards", "toml")
    values = tomllib.loads(shown)["group"]["guards"]
    assert set(values) == set(GUARD_KEYS)
    assert values == dataclasses.asdict(Guards())


def test_configuration_reference_blocks_load(tmp_path: Path) -> None:
    """The annotated bus, [group.ops] and [group.guards] blocks of configuration.md,
    copied into one file (with the second group its [[link]] names, and without the
    `protection` file it points to), load: no key a reader copies is refused."""
    reference = fenced("configuration.md", ("toml",))[0][1]
    group, _, link = reference.partition("[[link]]")
    group = re.sub(r"^protection = .*\n(^ +#.*\n)*", "", group, flags=re.MULTILINE)
    [ops] = blocks("configuration.md", "`[group.ops]`", "toml")
    [guards] = blocks("configuration.md", "Guards", "toml")
    second = '[[group]]\nid = 2\nname = "LDN"\nlisten = "127.0.0.1:7002"\ndata_dir = "g2"\n'
    text = group + ops + guards + second + "[[link]]" + link
    bus = parse_config(text, tmp_path / "bus.toml")
    assert bus.groups[1].ops.web_port == 8101 and bus.groups[1].ops.pcj_archive_after_s == 86400
    assert bus.groups[1].queues[10].name == "ORDERS" and bus.groups[1].guards == Guards()


def test_client_library_reconnect_defaults_and_passing_refusals() -> None:
    """client-library.md says its Reconnect(...) line gives "the defaults", and lists
    the refusals a reconnect waits out: both as the library has them."""
    text = (DOCS / "client-library.md").read_text()
    call = re.search(r"policy = Reconnect\((.*?)\)", text, re.DOTALL)
    assert call is not None
    shown = dict(
        (key.strip(), eval(value))  # noqa: S307 - literals of the page
        for key, value in (item.split("=") for item in call.group(1).split(","))
    )
    defaults = dataclasses.asdict(Reconnect())
    assert shown == {key: defaults[key] for key in shown}
    sentence = re.search(r"a refusal that passes is retried:(.*?)\(`clients", text, re.DOTALL)
    assert sentence is not None
    names = set(re.findall(r"`([A-Z_]+)`", sentence.group(1)))
    assert names == {status.name for status in PASSING_REFUSALS}


def test_operations_errors_transcript_is_what_mrs_prints(tmp_path: Path) -> None:
    """operations.md, "Errors and exit codes": a listen port another process holds,
    and a status of a group that is not running, print the page's lines with the
    page's exit status (1: the machine must change, not the command)."""
    pairs = _transcript("operations.md", "## Errors and exit codes")
    (serve, _), (echo, exit_status), (status, _), (replica, _), _auth = pairs
    assert echo == "echo $?" and len(pairs) == 5
    # The replica's line needs etcd and three instances: tests/process/test_ops_27.py.
    assert replica.startswith("mrs status --config replicated.toml --address")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        (tmp_path / "bus.toml").write_text(
            f'[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:{port}"\ndata_dir = "g1"\n'
        )
        for (command, output), shown_port in ((pairs[0], port), (pairs[2], free_port())):
            words = command.split("#")[0].replace("7001", str(shown_port)).split()
            config = ("--config", str(tmp_path / "bus.toml")) if "--config" in words else ()
            done = run_mrs(*words[1:], *config, timeout_s=30)
            printed = done.stderr.strip().replace(str(tmp_path / "bus.toml"), "bus.toml")
            assert printed == output.replace("7001", str(shown_port)), command
            assert str(done.returncode) == exit_status, (command, done.stderr)
    assert serve.startswith("mrs serve") and status.startswith("mrs status")


def test_undeliverable_example_prints_what_the_page_says(tmp_path: Path) -> None:
    """undeliverable.md's runnable example, against a fresh group 1 of the example
    bus, prints exactly the lines the page shows under "It prints"."""
    page = PastedPage("undeliverable.md", tmp_path)
    try:
        page.serve_examples()
        [printed] = page.run_all(saved={0: "python undeliverable.py 127.0.0.1:7001"})
    finally:
        page.close()
    [shown] = blocks("undeliverable.md", "A runnable example", "text")
    assert printed.splitlines() == shown.splitlines()


PUT_ONE_ORDER = """\
from clients import connect_sync
with connect_sync("127.0.0.1:7001", "SENDER") as q:
    q.put(b"order 17", target="ORDERS")
"""


def test_client_library_cancelled_get_example_confirms_a_waiting_message(tmp_path: Path) -> None:
    """client-library.md's cancellation example, run with an order already waiting
    on ORDERS: its first get takes it within the 0.3 s, so the example must confirm
    that one. It threw it away and waited 5 s for another (MrsTimeout), leaving the
    order delivered and unconfirmed."""
    page = PastedPage("client-library.md", tmp_path)
    try:
        page.serve_examples()
        page.run("python", PUT_ONE_ORDER)
        [example] = blocks("client-library.md", "Cancelling a get loses nothing", "text")
        page.run("python", example)
        waiting = page.run("sh", "mrs dump --config docs/examples/bus.toml --group 1 dqf --json")
    finally:
        page.close()
    assert waiting == "", "the order is still in the DQF: it was not confirmed"
