"""Fault switches live in `mrs/testing/`: the server tests none of them.

Why: a switch tested on the hot path costs every request of every production server
and lets a broken branch sit beside the correct one in the rooms. TigerBeetle keeps
every fault in `src/testing/`; MRS does the same: the rooms ask the `Guarantees` part
they were given (mrs.group.guarantees) and the broken builds are parts in
`mrs/testing/broken_builds.py`, handed in by constructor.
"""

from __future__ import annotations

import ast
from pathlib import Path

from mrs.testing.broken_builds import UNSAFE_SWITCHES
from tests.rules.test_layers import LAYERS, ROOT, layer_of, module_name, product_files


def switch_uses(path: Path) -> list[str]:
    """Each name in `path` that speaks of an unsafe switch (a variable, attribute,
    argument, keyword, function, class or import containing "unsafe"), and each string
    that is a switch word."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and node.value in UNSAFE_SWITCHES:
            found.append(repr(node.value))
        for field in ("id", "attr", "arg", "name", "asname"):
            name = getattr(node, field, None)
            if isinstance(name, str) and "unsafe" in name.lower():
                found.append(f"{name} (line {getattr(node, 'lineno', '?')})")
    return found


def test_no_production_module_names_a_fault_switch() -> None:
    """Only `testing` and the layers above it (the CLI edge that resolves a switch
    word to a part) name a broken build."""
    below = [
        path
        for path in product_files("mrs")
        if LAYERS.index(layer_of(module_name(path)) or "") < LAYERS.index("testing")
    ]
    assert any(path.name == "handover.py" for path in below), "the scan found no rooms"
    offenders = {
        path.relative_to(ROOT).as_posix(): uses for path in below if (uses := switch_uses(path))
    }
    assert not offenders, f"fault switches belong in mrs/testing (a Guarantees part): {offenders}"


def test_the_scan_sees_a_switch_tested_in_a_room(tmp_path: Path) -> None:
    room = tmp_path / "room.py"
    room.write_text(
        "def hand_over(self, status):\n"
        "    if UNSAFE_SKIP_POSSDUPL in self.ctx.unsafe:\n"
        "        return 'skip-possdupl'\n"
        "    return status\n"
    )
    assert sorted(switch_uses(room)) == [
        "'skip-possdupl'",
        "UNSAFE_SKIP_POSSDUPL (line 2)",
        "unsafe (line 2)",
    ]
