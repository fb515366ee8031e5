"""The hot path, compiled: mypyc builds of the modules every message passes through,
used only while they match their sources exactly.

Why: the server's CPU per message is Python executing the same dozen
modules for every put, delivery and confirm. mypyc compiles those modules, as
they are written and typed, into C extensions. The sources stay the one truth,
and running without a build is the same program, only slower
(benchmarks/README.md has the figures).

Why a build directory and a hash check, not extensions beside the sources: a
compiled module next to its `.py` would shadow every later edit of that source. So
a build lives in `<checkout>/.native/<interpreter>/` with a manifest of the
SHA-256 of each source it was built from. At the first import of `mrs` (before
it imports anything of `journals`), `install()` puts a finder for the built modules first
on `sys.meta_path` only if every source still matches. It is all modules or none,
because compiled modules call each other directly: one stale module cannot be
swapped out alone.

    python -m mrs.native.build build     # needs mypy, a C compiler, Python's headers
    python -m mrs.native.build status    # compiled, stale, absent or off
    MRS_PURE_PYTHON=1 mrs serve ...     # run the sources even with a fresh build

This module imports only the standard library: it runs before anything else of
`journals` or `mrs` is imported.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

COMPILED_MODULES = (
    "journals.batch",
    "journals.keys",
    "journals.record",
    "journals.writer",
    "journals.store",
    "mrs.transport.framed",
    "mrs.server.session",
    "mrs.protocol.connection",
    "mrs.group.queues",
    "mrs.group.memory_quota",
    "mrs.group.intake",
    "mrs.group.dqf",
    "mrs.group.handover",
    "mrs.group.guarantees",
    "mrs.group.confirm_run",
    "mrs.group.get_expiry",
    "mrs.group.batch_get",
    "mrs.group.reply",
    "mrs.group.held_offers",
    "mrs.address",
    "mrs.protocol.event_types",
    "mrs.group.context",
    "mrs.group.wiring",
    "mrs.core.delivery",
    "mrs.group.shapes",
    "clients.deadlines",
    "mrs.protocol.fastcheck",
    "mrs.group.recovery",
    "mrs.group.peers",
    "mrs.group.drain_room",
    "mrs.group.backlog",
    "mrs.group.seq_deltas",
    "journals.dqf_index",
    "mrs.server.request_dispatch",
    "mrs.group.put_deadlines",
    "mrs.protocol.plain_data",
    "mrs.protocol.post_init",
    "clients.waiting",
    "clients.get_pool",
    "mrs.core.seqspace",
    "mrs.group.sequence",
    "mrs.group.idempotency",
    "mrs.storage.journal_reserve",
    "clients.requests",
    "mrs.transport.plain_socket",
    "mrs.group.inbound",
    "mrs.group.transfer",
    "mrs.group.drain",
    "mrs.group.link_session",
    "mrs.group.notices",
    "mrs.group.outbound",
)
"""The modules a put, a delivery and a confirm pass through on the server. Each must
type-check cleanly (mypyc compiles what mypy infers) and keep to what mypyc
supports: no lambdas as default arguments, and a class subclassed by interpreted
code marked `@mypyc_attr(allow_interpreted_subclasses=True)`."""

PURE_PYTHON_ENV = "MRS_PURE_PYTHON"
MANIFEST_NAME = "manifest.json"


def source_root() -> Path:
    """The directory holding the `journals` and `mrs` packages (the checkout)."""
    return Path(__file__).resolve().parents[2]


def build_dir(root: Path) -> Path:
    """Where builds for the running interpreter live (one per interpreter tag)."""
    return root / ".native" / (sys.implementation.cache_tag or "unknown")


def source_file(root: Path, module: str) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def source_digests(root: Path) -> dict[str, str]:
    """SHA-256 of each compiled module's source as it is now."""
    return {
        module: hashlib.sha256(source_file(root, module).read_bytes()).hexdigest()
        for module in COMPILED_MODULES
    }


@dataclass
class NativeState:
    """What `install()` found: `status` is compiled, stale, absent or off."""

    status: str
    reason: str
    files: dict[str, Path] = field(default_factory=dict)
    """Module name -> built extension (the modules and the shared library)."""

    @property
    def compiled(self) -> bool:
        return self.status == "compiled"


class _BuiltModules(importlib.abc.MetaPathFinder):
    """Finds the built extension of each compiled module (and of their shared library)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(fullname, file)


def inspect_build(root: Path) -> NativeState:
    """Whether a build for this interpreter exists and matches every source."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return NativeState("off", f"{PURE_PYTHON_ENV} is set")
    manifest_path = build_dir(root) / MANIFEST_NAME
    try:
        manifest = json.loads(manifest_path.read_text())
        built_from: dict[str, str] = manifest["sources"]
        files = {name: build_dir(root) / relative for name, relative in manifest["files"].items()}
    except FileNotFoundError:
        return NativeState("absent", "no build (python -m mrs.native.build build)")
    except (OSError, ValueError, KeyError, TypeError) as error:
        return NativeState("absent", f"unreadable manifest {manifest_path}: {error}")
    if set(built_from) != set(COMPILED_MODULES):  # a module added or dropped since
        return NativeState("stale", "built from another list of modules: build again")
    try:
        now = source_digests(root)
    except OSError as error:
        return NativeState("absent", f"cannot read the sources: {error}")
    changed = sorted(module for module in COMPILED_MODULES if built_from[module] != now[module])
    if changed:
        return NativeState("stale", f"changed since the build: {', '.join(changed)}")
    missing = [module for module in COMPILED_MODULES if not files.get(module, Path()).is_file()]
    if missing:
        return NativeState("absent", f"build incomplete: {', '.join(missing)}")
    return NativeState("compiled", f"{len(COMPILED_MODULES)} modules from {build_dir(root)}", files)


STATE: NativeState | None = None
"""Set by the first `install()` of the process."""


def install() -> NativeState:
    """Use the build if it matches every source; decided once per process, before any
    compiled module can have been imported (so never half and half)."""
    global STATE
    if STATE is not None:
        return STATE
    root = source_root()
    state = inspect_build(root)
    if state.compiled:
        imported = [module for module in COMPILED_MODULES if module in sys.modules]
        if imported:  # too late to swap: keep every module as it was imported
            state = NativeState("off", f"imported before the build was found: {imported}")
        else:
            sys.meta_path.insert(0, _BuiltModules(state.files))
    STATE = state
    return state
