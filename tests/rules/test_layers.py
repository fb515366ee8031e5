"""The layer rule: the tree shows the architecture, and the imports keep to it.

Why: `mrs/` is cut into folders, one per layer (docs/architecture.md walks them
bottom-up). A module may import its own layer and the layers below it, never one
above, so a change to the tools cannot reach the server and the server's process never
loads what it does not run. Every import counts: at the top, inside a function (lazy)
and under `if TYPE_CHECKING:`; a lazy import only hides a circle, it does not break one.
`clients` (what an application loads) may use only the layers a client needs, and
`journals` (the storage library) names nothing of MRS at all, not even as a string.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LAYERS = (
    "native",
    "",  # the root vocabulary: mrs.model, mrs.errors, mrs.address, mrs.limits, ...
    "core",
    "protocol",
    "storage",
    "config",
    "transport",
    "protection",
    "group",
    "security",
    "ops",
    "replication",
    "server",
    "offline",
    "audit",
    "dlq",
    "testing",
    "tools",
)
"""Bottom first: each folder of `mrs/` may import only itself and what is listed before
it. "" is the root's modules (the public vocabulary)."""

ROOT_MODULES = {"__init__", "__main__", "model", "errors", "address", "limits", "exit_status"}
"""What `mrs/` keeps at its root: the words every layer and every application uses."""

ENTRY_POINTS = {"mrs/__main__.py"}
"""`python -m mrs`: the command tree's door, above every layer."""

CLIENT_LAYERS = {
    "native",
    "",
    "core",
    "protocol",
    "storage",
    "config",
    "transport",
    "protection",
    "security",
}
"""What `clients` may import of `mrs`: the wire, the vocabulary, the configuration (to
find a group by name), the journal check (for its own SAF journal), message protection
and the handshake."""


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, absolute or relative, at any depth (lazy ones and
    those under TYPE_CHECKING included), with `from a import b` counted as a.b too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = parts[: len(parts) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name of `mrs`, None for anything else."""
    parts = module.split(".")
    if parts[0] != "mrs":
        return None
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return ""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_files(package: str) -> list[Path]:
    return sorted(path for path in (ROOT / package).rglob("*.py") if ".venv" not in path.parts)


def upward_imports(path: Path) -> list[str]:
    """The imports of `path` that reach a layer above its own."""
    if path.relative_to(ROOT).as_posix() in ENTRY_POINTS:
        return []
    own = LAYERS.index(layer_of(module_name(path)) or "")
    found = []
    for name in imported_modules(path):
        layer = layer_of(name)
        if layer is not None and LAYERS.index(layer) > own:
            found.append(name)
        elif name.split(".")[0] in ("clients", "sim") and own < LAYERS.index("offline"):
            found.append(name)  # an application's library or the harness: command side only
    return sorted(found)


def test_every_folder_of_mrs_is_a_known_layer() -> None:
    folders = {path.name for path in (ROOT / "mrs").iterdir() if path.is_dir()}
    folders.discard("__pycache__")
    assert folders == set(LAYERS) - {""}, "a new folder of mrs/ needs its place in LAYERS"


def test_the_root_keeps_only_the_vocabulary() -> None:
    modules = {path.stem for path in (ROOT / "mrs").glob("*.py")}
    extra = modules - ROOT_MODULES
    assert modules == ROOT_MODULES, f"move these into their layer's folder: {extra}"


def test_each_layer_says_its_job_and_what_it_may_import() -> None:
    for layer in LAYERS:
        if not layer:
            continue
        doc = ast.get_docstring(ast.parse((ROOT / "mrs" / layer / "__init__.py").read_text()))
        assert doc, f"mrs/{layer}/__init__.py: a docstring saying the layer's job"
        assert "import" in doc, f"mrs/{layer}/__init__.py: say what the layer may import"


def test_no_module_of_mrs_imports_a_layer_above_its_own() -> None:
    files = product_files("mrs")
    assert len(files) > 100, "the scan found too few modules: it is broken"
    offenders = {
        path.relative_to(ROOT).as_posix(): found
        for path in files
        if (found := upward_imports(path))
    }
    assert not offenders, f"imports of a layer above (invert them with a Protocol): {offenders}"


def test_clients_import_only_the_layers_a_client_needs() -> None:
    offenders = {
        path.relative_to(ROOT).as_posix(): names
        for path in product_files("clients")
        if (
            names := sorted(
                name
                for name in imported_modules(path)
                if (layer_of(name) is not None and layer_of(name) not in CLIENT_LAYERS)
                or name.split(".")[0] == "sim"
            )
        )
    }
    assert not offenders, f"clients reaching server-side layers: {offenders}"


def test_journals_names_nothing_of_mrs_or_clients() -> None:
    offenders: dict[str, list[str]] = {}
    for path in product_files("journals"):
        tree = ast.parse(path.read_text())
        names = [n for n in imported_modules(path) if n.split(".")[0] in ("mrs", "clients")]
        names += [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(("mrs.", "clients."))
        ]
        if names:
            offenders[path.relative_to(ROOT).as_posix()] = names
    assert not offenders, f"journals must stand alone: {offenders}"


def test_every_module_is_imported_by_the_product_or_is_an_entry_point() -> None:
    """A dead module (kept only for a test or an old import path) is deleted, not kept."""
    imported: set[str] = set()
    for package in ("mrs", "clients", "sim", "journals", "benchmarks", "docs/examples"):
        for path in product_files(package):
            imported |= imported_modules(path)
    imported |= {name.rsplit(".", depth)[0] for name in imported for depth in (1, 2, 3)}
    entry_points = {
        "mrs.__main__",  # python -m mrs
        "mrs.native.build",  # python -m mrs.native.build
        "journals.conformance",  # the suite any Store runs (docs/journals.md)
        "sim.client_saf_sim",  # the client SAF journal under the simulator (docs/client-saf.md)
    }
    dead = [
        name
        for package in ("mrs", "clients", "sim", "journals")
        for path in product_files(package)
        if (name := module_name(path)) not in imported and name not in entry_points and "." in name
    ]
    assert not dead, f"modules nothing imports (delete them, or name the entry point): {dead}"


def test_the_rule_sees_lazy_type_checking_and_relative_imports() -> None:
    """The rule's own check, on modules of the tree whose imports are known."""
    lazy = imported_modules(ROOT / "mrs" / "tools" / "cli.py")
    assert "mrs.server.group_server" in lazy  # imported inside _serve(), not at the top
    guarded = imported_modules(ROOT / "mrs" / "ops" / "group_ops.py")
    assert "mrs.group.Group" in guarded  # under TYPE_CHECKING
    assert layer_of("mrs.server.group_server") == "server"
    assert layer_of("mrs.model") == "" and layer_of("journals.store") is None
