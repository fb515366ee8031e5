"""The dataclasses whose `__init__` is written out (docs/native.md: compiled, a
generated one stays interpreted) take exactly their fields, in order, with the same
defaults: a field added to the class but not to its `__init__` fails here, not as a
missing attribute on some later path. Read from the sources, so it holds whether or
not the compiled build is in use (a compiled `__init__` has no Python signature)."""

from __future__ import annotations

import ast

import pytest

from mrs.native.loader import source_root

WRITTEN_OUT = [
    ("mrs/group/shapes.py", "Entry"),
    ("mrs/group/queues.py", "GetWaiter"),
    ("journals/record.py", "Record"),
    ("journals/batch.py", "WriteBatch"),
    ("mrs/group/reply.py", "PutReply"),
]


def _class(path: str, name: str) -> ast.ClassDef:
    tree = ast.parse((source_root() / path).read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


@pytest.mark.parametrize(("path", "name"), WRITTEN_OUT)
def test_the_written_init_takes_the_fields_in_order_with_their_defaults(
    path: str, name: str
) -> None:
    cls = _class(path, name)
    assert any(ast.unparse(d).startswith("dataclass") for d in cls.decorator_list)
    fields = [n for n in cls.body if isinstance(n, ast.AnnAssign)]
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    args = init.args.args[1:]
    assert [a.arg for a in args] == [f.target.id for f in fields]  # type: ignore[union-attr]
    defaults = [None] * (len(args) - len(init.args.defaults)) + init.args.defaults
    for field, default in zip(fields, defaults, strict=True):
        field_default = None if field.value is None else ast.unparse(field.value)
        if field_default is not None and field_default.startswith("field(default_factory="):
            field_default = "None"  # a new one per instance: None in, a fresh one made
        assert (None if default is None else ast.unparse(default)) == field_default
