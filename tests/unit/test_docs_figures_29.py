"""Figures and transcripts the docs show as what a reader will see, held to the code
and the example config they come from. Why: docs/native.md said `status` prints
`compiled: 36 modules` while the build compiles every module of COMPILED_MODULES (51),
and docs/replication.md's `cat a.out b.out c.out` put the active's READY line after
the last replica's, where `cat` cannot print it (READY is in the active's own file)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from mrs.native.loader import COMPILED_MODULES

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_native_status_example_names_as_many_modules_as_the_build_compiles() -> None:
    text = (DOCS / "native.md").read_text()
    [count] = re.findall(r"`compiled: (\d+) modules from ", text)
    assert int(count) == len(COMPILED_MODULES)


def test_replication_transcript_prints_ready_from_the_active_instances_file() -> None:
    """Each instance's .out holds its REPLICA line and, for the one that wins, its
    READY line: `cat a.out b.out c.out` prints READY right after the winner's REPLICA,
    with the winner's listen address from docs/examples/replicated.toml."""
    text = (DOCS / "replication.md").read_text()
    start = text.index("$ cat a.out b.out c.out")
    lines = text[start:].splitlines()[1:]
    printed = lines[: next(i for i, line in enumerate(lines) if line.startswith("$ "))]
    [ready] = [index for index, line in enumerate(printed) if line.startswith("READY ")]
    winner = printed[ready - 1].removeprefix("REPLICA ")
    assert [line for line in printed if line.startswith("REPLICA ")] == [
        "REPLICA a",
        "REPLICA b",
        "REPLICA c",
    ]
    config = tomllib.loads((DOCS / "examples" / "replicated.toml").read_text())
    listens = {i["name"]: i["listen"] for i in config["group"][0]["instance"]}
    assert printed[ready] == f"READY {listens[winner]}"
    assert f"active: {winner}\n" in text[start:]
