"""No import circle among the modules of mrs/, clients/, journals/ and sim/.

Why: a circle means two modules cannot be read, tested or changed apart; hiding one
behind `if TYPE_CHECKING:` keeps Python happy but not the reader, so those imports
count here too. Imports inside a function are not counted: they defer a heavy or
optional dependency (prometheus_client, rich) to where it is used, which is their job.
Where one module only needs the shape of another that imports it, a `Protocol`
says that shape (e.g. `mrs.ops.group_ops.OwningServer`, `clients.protection.ProtectedClient`).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("mrs", "clients", "journals", "sim")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_imports(path: Path, root: Path, known: set[str]) -> set[str]:
    """The known modules `path` imports at module level, `if TYPE_CHECKING:` included."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                for alias in node.names:  # `from pkg import module` names the module
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
            elif isinstance(node, ast.If | ast.Try | ast.With):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text(), filename=str(path)).body)
    return (found & known) - {name}


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    paths = [path for package in packages for path in sorted((root / package).rglob("*.py"))]
    known = {module_name(path, root) for path in paths}
    return {module_name(path, root): module_imports(path, root, known) for path in paths}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle() -> None:
    graph = import_graph(ROOT, PACKAGES)
    server = "mrs.server.group_server"
    assert server in graph and graph[server], "the scan found no server imports"
    found = circles(graph)
    assert not found, f"import circles (break them, e.g. with a Protocol): {found}"


def test_the_scan_sees_type_checking_circles_and_skips_lazy_imports(tmp_path: Path) -> None:
    """The rule's own check, on a package made for it."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n"
    )
    (package / "c.py").write_text("from . import d\n")
    (package / "d.py").write_text("def later():\n    from pkg import c\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.d"] == set()  # a lazy import is not counted
    assert graph["pkg.c"] == {"pkg.d"}  # a relative one is
    assert circles(graph) == [["pkg.a", "pkg.b"]]
