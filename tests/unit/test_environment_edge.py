"""The environment is read only at the CLI edge (mrs/tools); the server, the client
library and the journals are given their switches (mrs.server.harness.ServeOptions)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mrs.exit_status import CommandError
from mrs.group import KEPT
from mrs.server.harness import (
    FAULT_FILE_ENV,
    WRITER_ENV,
    ServeOptions,
    serve_options_from,
)
from mrs.testing.broken_builds import UNSAFE_ENV, broken_build_from

ROOT = Path(__file__).resolve().parents[2]
EDGE = ("mrs/tools/", "mrs/audit/", "mrs/native/loader.py")
"""The command-line tools (mrs/tools), the Spark job's session set-up (mrs/audit), and
the compiled hot path's MRS_PURE_PYTHON (mrs.native.loader): which code a process runs
is settled at its first import, before any edge could pass a switch, as PYTHONPATH is."""


def _reads_environment(path: Path) -> bool:
    """True when the module touches os.environ or os.getenv."""
    return any(
        isinstance(node, ast.Attribute)
        and node.attr in ("environ", "getenv")
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
        for node in ast.walk(ast.parse(path.read_text()))
    )


def test_only_the_cli_edge_reads_the_environment() -> None:
    readers = sorted(
        str(path.relative_to(ROOT))
        for package in ("mrs", "clients", "journals")
        for path in (ROOT / package).rglob("*.py")
        if _reads_environment(path)
    )
    assert readers, "the scan finds the CLI's own reads"
    assert [path for path in readers if not path.startswith(EDGE)] == []


def test_no_switch_set_is_the_production_default() -> None:
    assert serve_options_from({}) == ServeOptions()
    assert ServeOptions().fault_file is None and ServeOptions().guarantees is KEPT
    assert broken_build_from({}) is KEPT


def test_the_switches_are_parsed_from_the_mapping_given(tmp_path) -> None:
    environ = {
        WRITER_ENV: "thread",
        FAULT_FILE_ENV: str(tmp_path / "faults"),
        UNSAFE_ENV: "skip-possdupl",
    }
    options = serve_options_from(environ, broken_build_from(environ))
    assert options.writer_kind == "thread"
    assert options.fault_file == tmp_path / "faults"
    assert options.guarantees.broken == frozenset({"skip-possdupl"})


@pytest.mark.parametrize(
    "environ, words",
    [({WRITER_ENV: "fibre"}, "MRS_WRITER: 'fibre'"), ({UNSAFE_ENV: "x,y"}, "unknown switches")],
)
def test_a_bad_switch_is_one_line_for_the_operator(environ, words) -> None:
    with pytest.raises(CommandError, match=words) as refused:
        serve_options_from(environ, broken_build_from(environ))
    assert "\n" not in str(refused.value)
