"""The layering rule of the package: nothing in the server imports the tools.

Why: `mrs/tools/` (the command tree, journal tools, demo, bench) may import the
server, `clients` and `sim`; if the server imported a tool, a bench or demo change
could break `mrs serve`, and the server's process would load code it never runs.
The check reads every import statement, including those inside functions, so a lazy
import cannot hide a violation.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TOOL_SIDE = ("mrs/tools/", "mrs/audit/", "mrs/dlq/", "mrs/__main__.py")
"""Command-side code: the tools, the Spark audit, the DLQ handler (a client
application) and `python -m mrs`; each is started from the shell, never by the server."""


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, absolute or relative, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def server_files() -> list[Path]:
    files = []
    for folder in ("mrs", "journals", "clients", "sim"):
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            if not relative.startswith(TOOL_SIDE):
                files.append(path)
    return files


def test_nothing_outside_the_tools_imports_the_tools() -> None:
    files = server_files()
    assert any(p.name == "group_server.py" for p in files), "the scan found no server: it is broken"
    offenders = {
        path.relative_to(ROOT).as_posix(): sorted(
            name for name in imported_modules(path) if name.startswith("mrs.tools")
        )
        for path in files
    }
    offenders = {path: names for path, names in offenders.items() if names}
    assert not offenders, f"server-side modules import mrs.tools: {offenders}"


def test_the_scan_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The rule's own check: an import inside a function and a relative import count."""
    module = ROOT / "mrs" / "tools" / "cli.py"
    names = imported_modules(module)
    assert "mrs.server.group_server" in names  # imported inside _serve(), not at the top
    assert "mrs.tools.cli_support" in names


def test_the_entry_point_and_python_m_mrs_reach_the_tools() -> None:
    from mrs.tools.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in ("serve", "demo", "bench", "status", "dump", "jplay", "journal", "pcj", "web"):
        assert name in commands
    main = (ROOT / "mrs" / "__main__.py").read_text()
    assert "mrs.tools.entry" in main
