"""A newcomer's first hour: README's `mrs demo` and docs/getting-started.md, as written.

What a developer who just cloned the repo meets: the commands the page shows (pasted
in a shell that has not activated the virtualenv), `mrs demo`'s options, and whether
the demo's closing table agrees with the story it printed above it.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import trio
from rich.console import Console

from mrs.tools.demo import DEMO_QUEUES, _run
from sim.bus import LinkedBus
from tests.cli_helpers import run_mrs

ROOT = Path(__file__).resolve().parents[2]


def _shell_commands(page: str) -> list[str]:
    """Every command line of the page's `sh` blocks (continuations joined)."""
    text = (ROOT / "docs" / page).read_text()
    commands: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        joined = block.replace("\\\n", " ")
        commands += [line.strip() for line in joined.splitlines() if line.strip()]
    return commands


def test_getting_started_commands_run_the_checkouts_virtualenv() -> None:
    """The page's last command was `python docs/examples/errors.py`: pasted in a shell
    that has not activated .venv it ran the system's python, and the newcomer got a
    ModuleNotFoundError traceback for `clients` (the docs test passes because it puts
    the venv first on PATH). Every command on the page names .venv/bin/ as the
    others do."""
    commands = _shell_commands("getting-started.md")
    assert len(commands) >= 3, commands
    outside = [c for c in commands if not c.startswith(".venv/bin/")]
    assert outside == [], outside


def test_demo_scratch_that_cannot_be_made_is_one_usage_line(tmp_path: Path) -> None:
    """`mrs demo --scratch notes.txt/run` printed `mrs: .../run: Not a directory` and
    exit 1: neither the option nor a usage mistake (exit 2) was named, unlike an
    existing file or a non-empty directory given as --scratch."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    scratch = a_file / "run"
    result = run_mrs("demo", "--messages", "10", "--scratch", str(scratch), timeout_s=60)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.strip() == f"mrs: --scratch {scratch}: cannot make it: Not a directory"
    assert result.stdout == "" and a_file.read_text() == "mine\n"


def test_demo_table_counts_the_backlog_the_restart_recovered(tmp_path: Path) -> None:
    """The story (no failover chapter, no Spark): step 4 printed the SAF backlog NYC
    recovered after its SIGKILL (528), and the table under it said `largest SAF
    backlog seen` 520, the watch's last look before more orders went into the SAF.
    The table's largest is at least what step 4 showed."""
    bus = LinkedBus(
        tmp_path / "bus",
        queues=DEMO_QUEUES,
        group_extra="pcj_default = true",
        names={1: "NYC", 2: "LDN"},
    )
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    try:
        code, _ = trio.run(_run, console, bus, 400)
    finally:
        for process in bus.processes.values():
            process.kill()
    text = out.getvalue()
    assert code == 0, text
    recovered = re.search(r"SAF backlog recovered from its journal: (\d+)\.", text)
    largest = re.search(r"largest SAF backlog seen\s*│\s*(\d+)", text)
    assert recovered and largest, text
    assert int(recovered.group(1)) > 0, text
    assert int(largest.group(1)) >= int(recovered.group(1)), text
