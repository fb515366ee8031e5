"""The compiled hot path (mrs.native.loader) is used only while its build matches every
source, all modules or none, and a process can always be told to run the sources.

In process: the decision, over a scratch checkout with a hand-made manifest. Real
processes: what a fresh interpreter of this checkout actually imports."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mrs.native import build as native_build
from mrs.native import loader as native
from mrs.native.build import _module_name
from mrs.native.loader import (
    COMPILED_MODULES,
    MANIFEST_NAME,
    PURE_PYTHON_ENV,
    build_dir,
    inspect_build,
    source_digests,
    source_file,
)


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch checkout: a source per compiled module and a build made from them."""
    monkeypatch.delenv(PURE_PYTHON_ENV, raising=False)
    for module in COMPILED_MODULES:
        source = source_file(tmp_path, module)
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f"# {module}\n")
    built = build_dir(tmp_path)
    files = {}
    for module in COMPILED_MODULES:
        relative = module.replace(".", "/") + ".so"
        (built / relative).parent.mkdir(parents=True, exist_ok=True)
        (built / relative).write_bytes(b"")
        files[module] = relative
    manifest = {"sources": source_digests(tmp_path), "files": files}
    (built / MANIFEST_NAME).write_text(json.dumps(manifest))
    return tmp_path


def test_a_build_matching_every_source_is_used(checkout: Path) -> None:
    state = inspect_build(checkout)
    assert state.status == "compiled"
    assert set(state.files) == set(COMPILED_MODULES)


def test_one_edited_source_makes_the_whole_build_stale(checkout: Path) -> None:
    edited = source_file(checkout, "mrs.group.intake")
    edited.write_text(edited.read_text() + "x = 1\n")
    state = inspect_build(checkout)
    assert state.status == "stale"
    assert "mrs.group.intake" in state.reason
    assert state.files == {}  # nothing of it is used, not even the unchanged modules


def test_a_build_of_another_module_list_is_not_used(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "COMPILED_MODULES", COMPILED_MODULES[:-1])
    state = inspect_build(checkout)
    assert (state.status, state.files) == ("stale", {})


def test_the_sources_run_when_asked_even_with_a_current_build(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    assert inspect_build(checkout).status == "off"


def test_no_build_or_a_broken_one_runs_the_sources(checkout: Path) -> None:
    manifest = build_dir(checkout) / MANIFEST_NAME
    (build_dir(checkout) / "mrs/group/queues.so").unlink()
    state = inspect_build(checkout)
    assert (state.status, state.files) == ("absent", {})
    assert "mrs.group.queues" in state.reason
    manifest.write_text("{not json")
    assert inspect_build(checkout).status == "absent"
    manifest.unlink()
    assert inspect_build(checkout).status == "absent"


def test_built_files_are_named_as_the_modules_they_hold(tmp_path: Path) -> None:
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]  # the interpreter-tagged one
    assert _module_name(tmp_path, tmp_path / "mrs" / "group" / f"intake{suffix}") == (
        "mrs.group.intake"
    )
    assert _module_name(tmp_path, tmp_path / "manifest.json") is None


def _imported_file(module: str, env: dict[str, str]) -> str:
    code = f"import {module} as m, mrs.native.loader as n; print(n.STATE.status, m.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=native.source_root(),
        check=True,
    )
    return done.stdout.strip()


def test_a_process_imports_what_the_build_state_says() -> None:
    """In CI the build is made first (.ci/run), so this checks the compiled modules are
    the ones loaded; without a build, that the sources are."""
    state = inspect_build(native.source_root())
    status, file = _imported_file("mrs.group.intake", {}).split(" ", 1)
    assert status == state.status
    assert file.endswith(".py") != state.compiled
    status, file = _imported_file("mrs.group.intake", {PURE_PYTHON_ENV: "1"}).split(" ", 1)
    assert (status, Path(file).suffix) == ("off", ".py")


def test_an_application_importing_the_client_first_runs_the_build() -> None:
    """An application imports `clients`, not `mrs`: the client's own compiled modules
    (its request table, reply deadlines) must be the build's too. (After the layout
    step `clients` imported `journals` first, which no longer installs the build:
    every client process ran the sources: 20-30% more CPU per request, benchmarks/README.md)."""
    state = inspect_build(native.source_root())
    status, file = _imported_file("clients.requests", {}).split(" ", 1)
    assert status == state.status
    assert file.endswith(".py") != state.compiled


def test_a_build_without_mypyc_says_what_to_install_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(native_build.importlib.util, "find_spec", lambda name: None)
    assert native_build.main(["build"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install -e '.[native]'" in err
    assert native_build.main(["rebuild"]) == 2
