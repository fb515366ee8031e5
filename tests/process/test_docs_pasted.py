"""The docs' shell and Python blocks run as a reader pastes them.

Each page's fenced blocks are extracted by their language (`sh`, `toml`, `python`)
and run in a scratch directory with the `mrs` of this checkout on PATH. The bus
config a page assumes is written first, with free ports; the only text changed in a
pasted block is a listen address (`127.0.0.1:7001`) replaced by the one the group
got, so tests can run beside each other.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from sim.processes import GroupProcess
from sim.proxy import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^( *)```([a-z]*)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def blocks(page: str, section: str, language: str) -> list[str]:
    """The `language` blocks of the section whose heading starts with `section`, in
    page order, unindented (blocks inside list items are indented)."""
    text = (DOCS / page).read_text()
    heading = re.search(rf"^#{{2,3}} {re.escape(section)}.*\n", text, re.MULTILINE)
    assert heading, f"no section {section!r} in {page}"
    following = re.search(r"^#{2,3} ", text[heading.end() :], re.MULTILINE)
    start = heading.end()
    end = start + following.start() if following else len(text)
    return [
        textwrap.dedent(body)
        for _indent, lang, body in FENCE.findall(text[start:end])
        if lang == language
    ]


def run_shell(script: str, cwd: Path) -> subprocess.CompletedProcess:
    """One shell block, as pasted into bash (`set -e`: the first failing line stops it)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-e", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def run_python(source: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", source], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def two_group_bus(directory: Path) -> tuple[Path, dict[int, int]]:
    """The bus security.md's worked example starts from: NYC (1) with ORDERS (1.10),
    LDN (2) with SHIPPING (2.20), linked."""
    ports = {1: free_port(), 2: free_port()}
    text = ""
    for group_id, name, queue in ((1, "NYC", "ORDERS"), (2, "LDN", "SHIPPING")):
        text += textwrap.dedent(f"""\
            [[group]]
            id = {group_id}
            name = "{name}"
            listen = "127.0.0.1:{ports[group_id]}"
            data_dir = "g{group_id}"
            [[group.queue]]
            id = {group_id}0
            name = "{queue}"
            confirm = "explicit-out-of-order"

            """)
    path = directory / "bus.toml"
    path.write_text(text + "[[link]]\ngroups = [1, 2]\n")
    return path, ports


def test_security_worked_example_runs_as_pasted(tmp_path) -> None:
    """docs/security.md, "By hand": [auth] at the top of bus.toml, TLS, link secrets
    and applications (their password files made by the block itself), keys and the
    policy file, the groups started, and shop's Python block putting a sealed order."""
    config, ports = two_group_bus(tmp_path)
    page = "security.md"
    auth_table, _tls_table, policy = blocks(page, "Worked example", "toml")
    config.write_text(auth_table + "\n" + config.read_text())
    for script in blocks(page, "Worked example", "sh"):
        done = run_shell(script, tmp_path)
        assert done.returncode == 0, f"{script}\n{done.stderr}"
    assert all((tmp_path / f"{name}.pw").stat().st_mode & 0o077 == 0 for name in ("shop",))
    (tmp_path / "protection.toml").write_text(policy)
    groups = [GroupProcess(config, group_id) for group_id in (1, 2)]
    for group in groups:
        group.start()
    try:
        [python] = blocks(page, "Worked example", "python")
        pasted = python.replace("127.0.0.1:7001", f"127.0.0.1:{ports[1]}")
        done = run_python(pasted, tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["SUCCESS"]
    finally:
        for group in groups:
            group.terminate()
