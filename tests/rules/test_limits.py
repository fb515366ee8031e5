"""Every built-in bound and default is defined once, in mrs/limits.py, units last."""

from __future__ import annotations

import ast
from pathlib import Path

import mrs.limits as limits
from mrs.config.bus import parse_config

ROOT = Path(__file__).resolve().parents[2]
LIMIT_NAMES = {name for name in vars(limits) if name.isupper()}
SUFFIXES = ("_S", "_BYTES", "_MAX", "_MIN", "_DEFAULT", "_HIGH", "_MESSAGES")


def _module_constants(path: Path) -> set[str]:
    """Names assigned at the top level of a module."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return names


def test_no_limit_is_defined_twice() -> None:
    """A module imports a bound from mrs.limits; it never spells it again."""
    again = {}
    for package in ("mrs", "clients", "sim"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "limits.py" and path.parent.name == "mrs":
                continue
            twice = _module_constants(path) & LIMIT_NAMES
            if twice:
                again[str(path.relative_to(ROOT))] = sorted(twice)
    assert not again


def test_every_name_says_its_unit_or_qualifier_last() -> None:
    assert LIMIT_NAMES
    wrong = sorted(name for name in LIMIT_NAMES if not name.endswith(SUFFIXES))
    assert not wrong


def test_every_limit_is_documented() -> None:
    """Each constant is followed by a docstring saying why it has its value."""
    tree = ast.parse((ROOT / "mrs" / "limits.py").read_text())
    documented = set()
    for node, after in zip(tree.body, tree.body[1:], strict=False):
        if (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            documented |= {target.id for target in targets if isinstance(target, ast.Name)}
    assert LIMIT_NAMES - documented == set()


def test_a_queue_without_settings_takes_the_limits_defaults(tmp_path) -> None:
    text = """
[[group]]
id = 1
name = "one"
listen = "127.0.0.1:0"
data_dir = "g1"
[[group.queue]]
id = 10
name = "ORDERS"
"""
    (tmp_path / "bus.toml").write_text(text)
    queue = parse_config(text, tmp_path / "bus.toml").groups[1].queues[10]
    assert queue.messages_max == limits.QUEUE_MESSAGES_MAX_DEFAULT
    assert queue.unconfirmed_max == limits.QUEUE_UNCONFIRMED_MAX_DEFAULT
