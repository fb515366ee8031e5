"""Whole classes: no class of mrs/, clients/, journals/ or sim/ is built from two or
more project base classes.

Why: a class cut into mixins to fit a length (each part redeclaring the whole's
attributes as stubs, reaching into the others' private names) is harder to read than
the whole class; the parts of a whole are objects it holds, each given its
collaborators explicitly (docs/architecture.md). Allowed as extra bases: Protocols
(a shape, not code), exceptions (the error tree mixes a status class into a builtin
error), and anything outside the project (standard-library bases such as `Generic`).
Read from the source (no import), so the rule sees every module, harness ones included.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("mrs", "clients", "journals", "sim")
PROJECT_BASES_MAX = 1
BUILTIN_ERRORS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)


@dataclass
class Module:
    """What one module defines and imports, by the names its code uses."""

    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    names: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Local name -> (module, name) of a `from module import name [as local]`."""
    modules: dict[str, str] = field(default_factory=dict)
    """Local name -> module of an `import module [as local]` or `from pkg import module`."""


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_modules(root: Path = ROOT) -> dict[str, Module]:
    paths = [path for package in PACKAGES for path in sorted((root / package).rglob("*.py"))]
    paths = [path for path in paths if ".venv" not in path.parts]
    known = {module_name(path, root) for path in paths}
    modules: dict[str, Module] = {}
    for path in paths:
        name = module_name(path, root)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        modules[name] = _read(ast.parse(path.read_text(), filename=str(path)), package, known)
    return modules


def _read(tree: ast.Module, package: str, known: set[str]) -> Module:
    module = Module()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            module.classes.setdefault(node.name, node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                module.modules[alias.asname or alias.name.partition(".")[0]] = (
                    alias.name if alias.asname else alias.name.partition(".")[0]
                )
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                local = alias.asname or alias.name
                if f"{base}.{alias.name}" in known:
                    module.modules[local] = f"{base}.{alias.name}"
                else:
                    module.names[local] = (base, alias.name)
    return module


class Classes:
    """Resolves a class's bases to project classes, and says which are Protocols or
    exceptions."""

    def __init__(self, modules: dict[str, Module]) -> None:
        self.modules = modules

    def resolve(self, module: str, expression: ast.expr, depth: int = 0) -> tuple[str, str] | None:
        """(module, class) of a base expression if it is a project class, else None."""
        if isinstance(expression, ast.Subscript):  # Generic[T], Protocol[T]
            return self.resolve(module, expression.value, depth)
        if isinstance(expression, ast.Name):
            return self.lookup(module, expression.id, depth)
        if isinstance(expression, ast.Attribute) and isinstance(expression.value, ast.Name):
            target = self.modules[module].modules.get(expression.value.id)
            if target in self.modules:
                return self.lookup(target, expression.attr, depth)
        return None

    def lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, str] | None:
        """Where `name`, as `module` uses it, is defined (through re-exports)."""
        if depth > 20 or module not in self.modules:
            return None
        found = self.modules[module]
        if name in found.classes:
            return module, name
        if name in found.names:
            source, original = found.names[name]
            return self.lookup(source, original, depth + 1)
        return None

    def base_names(self, key: tuple[str, str]) -> list[str]:
        return [ast.unparse(base) for base in self.modules[key[0]].classes[key[1]].bases]

    def is_protocol(self, key: tuple[str, str]) -> bool:
        return any(
            name.split("[")[0].rpartition(".")[2] == "Protocol" for name in self.base_names(key)
        )

    def is_exception(self, key: tuple[str, str], depth: int = 0) -> bool:
        if depth > 20:
            return False
        node = self.modules[key[0]].classes[key[1]]
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in BUILTIN_ERRORS:
                return True
            parent = self.resolve(key[0], base)
            if parent is not None and self.is_exception(parent, depth + 1):
                return True
        return False

    def project_bases(self, module: str, node: ast.ClassDef) -> list[str]:
        """The bases of `node` that count: project classes, not Protocols or exceptions."""
        counted = []
        for base in node.bases:
            key = self.resolve(module, base)
            if key is None or self.is_protocol(key) or self.is_exception(key):
                continue
            counted.append(f"{key[0]}.{key[1]}")
        return counted


def composed_classes(modules: dict[str, Module]) -> dict[str, list[str]]:
    """`module.Class` -> its counted project bases, for every class with too many."""
    classes = Classes(modules)
    found = {}
    for name, module in modules.items():
        for node in module.classes.values():
            bases = classes.project_bases(name, node)
            if len(bases) > PROJECT_BASES_MAX:
                found[f"{name}.{node.name}"] = bases
    return found


def test_no_class_is_built_from_two_or_more_project_base_classes() -> None:
    found = composed_classes(read_modules())
    assert not found, (
        "classes built from several project base classes (mixins): make each a whole "
        f"class that holds its parts and passes them their collaborators: {found}"
    )


def test_the_rule_sees_mixins_and_allows_protocols_and_errors(tmp_path: Path) -> None:
    """The rule itself: two project bases are found through an import alias; a
    Protocol, an exception base and a standard-library base are not counted."""
    package = tmp_path / "mrs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "parts.py").write_text(
        "from typing import Protocol\n"
        "class A: ...\n"
        "class B: ...\n"
        "class Shape(Protocol): ...\n"
        "class Failed(Exception): ...\n"
        "class Status: ...\n"
    )
    (package / "whole.py").write_text(
        "import mrs.parts as parts\n"
        "from collections import OrderedDict\n"
        "from mrs.parts import A as Alias, Shape, Failed, Status\n"
        "class Mixed(Alias, parts.B): ...\n"
        "class Fine(A, Shape, OrderedDict): ...\n"
        "class Error(Status, Failed): ...\n"
    )
    found = composed_classes(read_modules(tmp_path))
    assert found == {"mrs.whole.Mixed": ["mrs.parts.A", "mrs.parts.B"]}


def private_reads(path: Path) -> list[str]:
    """`other._name` reads of another object's private names (not self's, not dunders)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.name}:{node.lineno} {node.value.id}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and isinstance(node.value, ast.Name)
        and node.value.id not in {"self", "cls"}
    ]


def test_connect_names_no_private_of_client(tmp_path: Path) -> None:
    """`connect` drives a Client through its `lifetime` part (clients.connection.Lifetime),
    not through Client's private methods: a whole class is not reached into."""
    assert private_reads(ROOT / "clients" / "connecting.py") == []
    reaching = tmp_path / "connecting.py"
    reaching.write_text("async def go(client):\n    await client._open()\n")
    assert private_reads(reaching) == ["connecting.py:2 client._open"]
