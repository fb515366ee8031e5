"""A newcomer runs the docs' examples one after the other against ONE group.

test_docs_examples.py gives each example a fresh server, and test_docs_pasted.py
prepares what a page's blocks need before pasting them; a reader has neither: they
start group 1 once (getting-started.md) and run every command and example in page
order. These tests do that, and hold the transcripts a page prints for them, so an
example that leaves messages behind for the next one, or a transcript that shows
what an older build printed, fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mrs.core.seqspace import GROUP_SHIFT as SEQ_GROUP_SHIFT
from sim.ports import free_port
from sim.processes import GroupProcess
from tests.cli_helpers import run_mrs, status_json
from tests.process.test_docs_pasted import (
    DOCS,
    PastedPage,
    blocks,
    console_commands,
    fenced,
)

EXAMPLES = DOCS / "examples"
EXAMPLE_TIMEOUT_S = 90.0


def run_example(name: str, *args: str, cwd: Path | None = None) -> str:
    """`python docs/examples/NAME ARGS...`; its stdout (a failing example fails the test)."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT_S, cwd=cwd,
    )  # fmt: skip
    assert done.returncode == 0, f"{name}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def example_bus(directory: Path) -> Path:
    """docs/examples/bus.toml with group 1 on a free port, in `directory`."""
    text = (EXAMPLES / "bus.toml").read_text()
    path = directory / "bus.toml"
    path.write_text(text.replace("127.0.0.1:7001", f"127.0.0.1:{free_port()}"))
    return path


@pytest.fixture
def group_one(tmp_path: Path) -> Iterator[GroupProcess]:
    """Group 1 of the example bus, started once, as getting-started.md starts it."""
    server = GroupProcess(example_bus(tmp_path), 1)
    server.start()
    yield server
    server.terminate()


def test_client_library_read_top_to_bottom_leaves_orders_to_the_examples_after_it(
    tmp_path: Path,
) -> None:
    """client-library.md in page order on one group: the order its blocking get takes is
    put first (else the get raises MrsTimeout on the empty ORDERS getting-started.md
    leaves), and the GC-tuned producer's 1,000 messages are purged by the page's own
    command, so messageq_api.py (run on the same page), protection.py and
    messageq_conformance.py print what they print on a fresh group. Before, they got
    the producer's b"0": a ProtectionRefused traceback and a 30 s TIMEOUT."""
    page = PastedPage("client-library.md", tmp_path)
    try:
        address = page.serve_examples().split()[1]
        consoles = [body for _language, body in fenced(page.page, ("console",))]
        [put_order] = [block for block in consoles if 'c.put(b"order 17"' in block]
        [purge] = [block for block in consoles if "mrs admin purge ORDERS" in block]
        [api] = [block for block in consoles if "messageq_api.py" in block]
        blocking, producer = (body for _language, body in fenced(page.page, ("python",)))
        page.run("sh", console_commands(put_order))
        assert page.run("python", blocking) == ""
        assert page.run("python", producer) == ""
        said = [line for line in purge.splitlines() if not line.startswith("$ ")]
        assert page.run("sh", console_commands(purge)).splitlines() == said
        output = page.run("sh", console_commands(api).split("\n", 1)[1])
        assert "pending on ORDERS, SENDER: [3, 0]" in output
        assert "blocking: segment 1 holds [b'after the roll']" in output
        assert "BILLING read: b'card 4111 for order 17'" in run_example("protection.py", address)
        assert "WF_CONF with timeout=0: SUCCESS" in run_example("messageq_conformance.py", address)
    finally:
        page.close()


def test_put_many_run_twice_prints_the_same_and_leaves_restore_empty(group_one) -> None:
    """put_many.py promises its seqs in order and get_many's first 100 lines; a second
    run (or journal-tools.md's replays to RESTORE after it) found the first run's 2,400
    messages on RESTORE and its idempotency key kept: `seqs in order: False` and
    b'line 101' .. b'line 200'."""
    first = run_example("put_many.py", group_one.address)
    second = run_example("put_many.py", group_one.address)
    for line in (
        "2501 of 2503 stored, seqs in order: True",
        "b'second' -> KeyReused: KEY_REUSED",
        "get_many: 100 messages, b'line 1' .. b'line 100'",
        "took the other 2400: RESTORE is empty again",
    ):
        assert line in first and line in second, second
    restore = status_json("--address", group_one.address)["queues"]["1.17"]
    assert (restore["name"], restore["pending"], restore["dqf_depth"]) == ("RESTORE", 0, 0)


def transcript_lines(page: str, section: str) -> list[str]:
    """The output lines a page's `console` and `text` blocks under `section` show, in
    page order, without commands and elisions."""
    shown = [
        line
        for language in ("console", "text")
        for block in blocks(page, section, language)
        for line in block.splitlines()
    ]
    return [line for line in shown if line and line != "..." and not line.startswith("$ ")]


def test_client_saf_transcript_is_what_the_example_prints(tmp_path: Path) -> None:
    """client-saf.md, "Try it": the example journals five puts while group 1 is down,
    then drains them once it starts; every line the page shows is printed, the server
    seqs included (the page showed 1099511627777, a seq of the layout before
    `group << 49 | counter`)."""
    config = example_bus(tmp_path)
    address = re.search(r'listen = "([^"]+)"', config.read_text())
    assert address
    child = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "client_saf.py"), address.group(1),
         str(tmp_path / "client.saf")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    server = GroupProcess(config, 1)
    try:
        assert child.stdout is not None
        lines = []
        for line in child.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("waiting for the server"):
                break
        server.start()
        out, err = child.communicate(timeout=EXAMPLE_TIMEOUT_S)
    finally:
        child.kill()
        server.terminate()
    assert child.returncode == 0, err
    shown = transcript_lines("client-saf.md", "Try it")
    assert len(shown) == 9, "the scan of the page is broken"
    assert {seq >> SEQ_GROUP_SHIFT for seq in _server_seqs(shown)} == {1}  # group 1's
    printed = iter(_seqs_from_first(lines + out.splitlines()))
    shown = _seqs_from_first(shown)
    assert [line for line in shown if line not in printed] == []  # in the page's order


SERVER_SEQ = re.compile(r"\b\d{15,}\b")
"""A server seq in a transcript (group 1's are 16 digits)."""


def _server_seqs(lines: list[str]) -> list[int]:
    return [int(number) for line in lines for number in SERVER_SEQ.findall(line)]


def _seqs_from_first(lines: list[str]) -> list[str]:
    """`lines` with each server seq written as its distance from the first one: a new
    group's counter starts from its wall clock (mrs.core.seqspace.fresh_start), so the
    page can show what one run printed, not what every run prints."""
    first = min(_server_seqs(lines), default=0)
    return [SERVER_SEQ.sub(lambda m: f"<first seq + {int(m.group()) - first}>", line)
            for line in lines]  # fmt: skip


SUBCOMMAND = re.compile(r"`mrs ([a-z][a-z-]*)")
MODULE_NAME = re.compile(r"`((?:mrs|clients)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")


def test_every_mrs_subcommand_and_module_the_docs_name_exists() -> None:
    """A reader types what the pages name: `mrs dlq` (replication.md) was no command
    (`mrs dlq-handler` is), and `mrs.ack_waits.AckOutbox` (links.md) no module."""
    listed = run_mrs("--help")
    assert listed.returncode == 0, listed.stderr
    commands = set(re.findall(r"^    ([a-z][a-z-]*) ", listed.stdout, re.MULTILINE))
    assert {"serve", "dlq-handler", "admin"} <= commands, "the scan of `mrs --help` is broken"
    pages = {path.name: path.read_text() for path in sorted(DOCS.glob("*.md"))}
    named = {(page, word) for page, text in pages.items() for word in SUBCOMMAND.findall(text)}
    assert [(page, word) for page, word in sorted(named) if word not in commands] == []
    dotted = sorted(
        {(page, name) for page, text in pages.items() for name in MODULE_NAME.findall(text)}
    )
    check = "import importlib, sys\n" + (
        "for name in sys.argv[1:]:\n"
        "    parts = name.split('.')\n"
        "    for cut in range(len(parts), 0, -1):\n"
        "        try:\n"
        "            found = importlib.import_module('.'.join(parts[:cut]))\n"
        "            break\n"
        "        except ImportError:\n"
        "            continue\n"
        "    for attribute in parts[cut:]:\n"
        "        found = getattr(found, attribute, None)\n"
        "    print(name, found is not None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check, *(name for _page, name in dotted)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    missing = [line.split()[0] for line in done.stdout.splitlines() if line.endswith(" False")]
    assert len(done.stdout.splitlines()) == len(dotted) > 50
    assert [(page, name) for page, name in dotted if name in missing] == []
