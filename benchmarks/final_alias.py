"""What a `_X: Final = imported` alias saves a compiled (mypyc) module, per read.

Why: the compiled hot path once carried ~60 aliases such as `_DQF: Final = Journal.DQF`
or `_READ: Final = os.read`, each said to save a lookup. Issue 48 item 6 keeps an alias
only where a measurement shows it pays. This compiles one small module with mypyc (the
same options as `mrs.native.build`) holding, for each shape of alias the tree used, a
loop that reads the imported name directly and a loop that reads a Final alias of it,
then times both. A read's saving times the reads per message (counted in
benchmarks/README.md) says whether the alias pays against a message's ~20 µs.

    .venv/bin/python benchmarks/final_alias.py            # about 40 s: mypyc compiles once

It prints the best of several repeats, in nanoseconds per read, for each shape.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

READS = 2_000_000
REPEATS = 7

_CONSTANTS = textwrap.dedent(
    '''
    """Stands for mrs.limits and journals.keys: plain module constants and a StrEnum."""
    import struct
    from enum import StrEnum

    LIMIT_MAX = 1000


    class Journal(StrEnum):
        DQF = "dqf"


    HEADER = struct.Struct(">IQ")
    '''
)

_FUNCTIONS = textwrap.dedent(
    '''
    """Stands for a compiled helper such as mrs.core.delivery.delivery_mode_of."""


    def twice(value: int) -> int:
        return value * 2
    '''
)

_SUBJECT = textwrap.dedent(
    '''
    """Each shape twice: the imported name read directly, then through a Final alias."""
    import os
    from typing import Final

    import trio

    from fa_constants import HEADER, LIMIT_MAX, Journal
    from fa_functions import twice

    _LIMIT_MAX: Final = LIMIT_MAX
    _DQF: Final = Journal.DQF
    _PACK: Final = HEADER.pack
    _GETPID: Final = os.getpid
    _CURRENT_TIME: Final = trio.lowlevel.current_clock
    _TWICE: Final = twice


    def constant_direct(n: int) -> int:
        total = 0
        for _ in range(n):
            total += LIMIT_MAX
        return total


    def constant_alias(n: int) -> int:
        total = 0
        for _ in range(n):
            total += _LIMIT_MAX
        return total


    def enum_member_direct(n: int) -> int:
        total = 0
        for _ in range(n):
            if Journal.DQF is not None:
                total += 1
        return total


    def enum_member_alias(n: int) -> int:
        total = 0
        for _ in range(n):
            if _DQF is not None:
                total += 1
        return total


    def bound_method_direct(n: int) -> int:
        total = 0
        for _ in range(n):
            total += len(HEADER.pack(1, 2))
        return total


    def bound_method_alias(n: int) -> int:
        total = 0
        for _ in range(n):
            total += len(_PACK(1, 2))
        return total


    def module_function_direct(n: int) -> int:
        total = 0
        for _ in range(n):
            total += os.getpid() & 1
        return total


    def module_function_alias(n: int) -> int:
        total = 0
        for _ in range(n):
            total += _GETPID() & 1
        return total


    def compiled_function_direct(n: int) -> int:
        total = 0
        for _ in range(n):
            total += twice(1)
        return total


    def compiled_function_alias(n: int) -> int:
        total = 0
        for _ in range(n):
            total += _TWICE(1)
        return total


    def nested_attribute_direct(n: int) -> int:
        total = 0
        for _ in range(n):
            if trio.lowlevel.current_clock is not None:
                total += 1
        return total


    def nested_attribute_alias(n: int) -> int:
        total = 0
        for _ in range(n):
            if _CURRENT_TIME is not None:
                total += 1
        return total
    '''
)

_SETUP = textwrap.dedent(
    """
    import sys
    from mypyc.build import mypycify
    from setuptools import setup

    setup(
        name="fa",
        ext_modules=mypycify(["fa_subject.py", "fa_functions.py"], opt_level="3"),
        script_args=["-q", "build_ext", "--inplace"],
    )
    """
)

SHAPES = (
    "constant",
    "enum_member",
    "bound_method",
    "module_function",
    "nested_attribute",
    "compiled_function",
)


def _compile(where: Path) -> None:
    """mypyc compiles fa_subject and fa_functions together, as the hot path is compiled;
    fa_constants stays interpreted, as mrs.limits does."""
    (where / "fa_constants.py").write_text(_CONSTANTS)
    (where / "fa_functions.py").write_text(_FUNCTIONS)
    (where / "fa_subject.py").write_text(_SUBJECT)
    (where / "setup_fa.py").write_text(_SETUP)
    subprocess.run(
        [sys.executable, "setup_fa.py"], cwd=where, check=True, capture_output=True, text=True
    )


def _best_ns_per_read(function: object, reads: int) -> float:
    best_s = float("inf")
    for _ in range(REPEATS):
        started = time.process_time()
        function(reads)  # type: ignore[operator]
        best_s = min(best_s, time.process_time() - started)
    return best_s / reads * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=READS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="final-alias-") as scratch:
        where = Path(scratch)
        _compile(where)
        sys.path.insert(0, scratch)
        subject = importlib.import_module("fa_subject")
        if not subject.__file__.endswith(".so"):
            sys.exit("fa_subject was not compiled")
        print(f"{'shape':<18} {'direct ns':>10} {'alias ns':>10} {'saved ns':>10}")
        for shape in SHAPES:
            direct = _best_ns_per_read(getattr(subject, f"{shape}_direct"), args.reads)
            alias = _best_ns_per_read(getattr(subject, f"{shape}_alias"), args.reads)
            print(f"{shape:<18} {direct:>10.2f} {alias:>10.2f} {direct - alias:>10.2f}")


if __name__ == "__main__":
    main()
