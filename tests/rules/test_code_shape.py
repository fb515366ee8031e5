"""The code's shape rules: short functions, a docstring that says the job.

Why: a newcomer reads a function as named steps only while it stays short (at most 70
lines). A function may be longer when its docstring says why, on a line starting "Long
because" (e.g. a state machine's one dispatch table); nothing else exempts it. Modules
have no line cap: they are cut by concept (one concept whole per module), never by
length, so no class is split into mixins to fit a count (tests/rules/test_layers.py).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("mrs", "clients", "journals", "sim")
FUNCTION_LINES_MAX = 70
WHY_LONG = "Long because"
"""The docstring line that lets a function pass FUNCTION_LINES_MAX."""

BEING_SPLIT: frozenset[str] = frozenset()
"""The only allow-list: modules another engineer is splitting right now, named here,
removed once they pass. Empty: every module passes."""


def python_files() -> list[Path]:
    files = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    return [path for path in files if ".venv" not in path.parts]


def long_functions(source: str) -> list[tuple[str, int]]:
    """(name, lines) of every function or method over FUNCTION_LINES_MAX lines whose
    docstring has no line saying why, nested ones included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1
            docstring = ast.get_docstring(node) or ""
            says_why = any(line.strip().startswith(WHY_LONG) for line in docstring.splitlines())
            if lines > FUNCTION_LINES_MAX and not says_why:
                found.append((node.name, lines))
    return found


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_function_is_over_70_lines_without_saying_why() -> None:
    offenders = {
        _relative(path): found
        for path in python_files()
        if _relative(path) not in BEING_SPLIT and (found := long_functions(path.read_text()))
    }
    assert not offenders, (
        f"functions over {FUNCTION_LINES_MAX} lines (split them into named steps, or "
        f"say why on a docstring line starting {WHY_LONG!r}): {offenders}"
    )


def test_every_module_says_its_job_first() -> None:
    """Every module has a docstring; package markers and `__main__` may be bare."""
    missing = [
        _relative(path)
        for path in python_files()
        if path.name not in ("__init__.py", "__main__.py")
        and not (ast.get_docstring(ast.parse(path.read_text())) or "").strip()
    ]
    assert not missing, f"modules without a docstring saying their job: {missing}"


def test_the_function_rule_counts_lines_and_reads_the_why() -> None:
    """The rule's own check: 71 lines fail, 70 pass, and a "Long because" line exempts."""

    def function(body_lines: int, docstring: str = "") -> str:
        doc = f'    """{docstring}"""\n' if docstring else ""
        body = "".join(f"    x{index} = {index}\n" for index in range(body_lines))
        return f"def f():\n{doc}{body}"

    assert long_functions(function(70)) == [("f", 71)]
    assert long_functions(function(69)) == []
    assert long_functions(function(80, "Parse.\n\n    Long because one table.")) == []
    assert long_functions(function(80, "Parse. It is long because.")) == [("f", 82)]
    nested = "def outer():\n" + textwrap.indent(function(75), "    ") + "    return f\n"
    assert ("f", 76) in long_functions(nested)
