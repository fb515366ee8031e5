"""Build the compiled hot path (`mrs.native.loader`): mypyc compiles COMPILED_MODULES
into `<checkout>/.native/<interpreter>/`, with the manifest of the sources it was
built from.

The build goes to a staging directory first and replaces the previous build only
when it is whole, so an interrupted or failed build leaves the old one (or none),
never a mix. The digests are taken before compiling: a source edited during the
build makes the new build stale at once, not silently current.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from mrs.native.loader import (
    COMPILED_MODULES,
    MANIFEST_NAME,
    build_dir,
    inspect_build,
    source_digests,
    source_file,
    source_root,
)

_SETUP = textwrap.dedent(
    """
    import sys
    from mypyc.build import mypycify
    from setuptools import setup

    out, temp, *paths = sys.argv[1:]
    setup(
        name="mrs-native",
        ext_modules=mypycify(paths, opt_level="3", target_dir=temp),
        script_args=["-q", "build_ext", "--build-lib", out, "--build-temp", temp, "-j", "2"],
    )
    """
)


def _module_name(staging: Path, file: Path) -> str | None:
    """`mrs/group/intake.cpython-311-x86_64-linux-gnu.so` -> `mrs.group.intake`."""
    relative = str(file.relative_to(staging))
    for suffix in sorted(importlib.machinery.EXTENSION_SUFFIXES, key=len, reverse=True):
        if relative.endswith(suffix):
            return relative[: -len(suffix)].replace(os.sep, ".")
    return None


def build(root: Path) -> Path:
    """Compile, then swap the whole build in. Raises CalledProcessError on failure."""
    target = build_dir(root)
    staging = target.with_name(target.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    digests = source_digests(root)
    paths = [str(source_file(root, module).relative_to(root)) for module in COMPILED_MODULES]
    with tempfile.TemporaryDirectory(prefix="mrs-native-") as temp:
        subprocess.run(
            [sys.executable, "-c", _SETUP, str(staging), temp, *paths], cwd=root, check=True
        )
    files = {
        name: str(file.relative_to(staging))
        for file in staging.rglob("*")
        if file.is_file() and (name := _module_name(staging, file)) is not None
    }
    manifest = {"sources": digests, "files": files, "python": sys.version}
    (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    previous = target.with_name(target.name + ".previous")
    shutil.rmtree(previous, ignore_errors=True)
    if target.exists():
        target.rename(previous)
    staging.rename(target)
    shutil.rmtree(previous, ignore_errors=True)
    return target


def main(argv: list[str]) -> int:
    """`build` or `status` (the default)."""
    command = argv[0] if argv else "status"
    root = source_root()
    if command == "build":
        if importlib.util.find_spec("mypyc") is None:
            print(
                "mrs.native.loader: mypyc is not installed (pip install -e '.[native]')",
                file=sys.stderr,
            )
            return 1
        try:
            target = build(root)
        except subprocess.CalledProcessError as error:
            print(f"mrs.native.loader: build failed (exit {error.returncode})", file=sys.stderr)
            return 1
        print(f"mrs.native.loader: built {len(COMPILED_MODULES)} modules into {target}")
        return 0
    if command == "status":
        state = inspect_build(root)
        print(f"{state.status}: {state.reason}")
        return 0
    print("usage: python -m mrs.native.build [build|status]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
