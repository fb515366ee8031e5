"""docs/architecture.md is written from the tree: it names every layer folder and
every module of `mrs/group/`, so a module added without its place in the picture fails
here rather than drifting unseen."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"


def test_the_page_names_every_layer_folder() -> None:
    text = PAGE.read_text()
    folders = sorted(p.name for p in (ROOT / "mrs").iterdir() if (p / "__init__.py").is_file())
    assert len(folders) >= 10, "the scan found too few layers: it is broken"
    missing = [name for name in folders if f"`mrs/{name}/`" not in text]
    assert not missing, f"docs/architecture.md does not name these layers: {missing}"


def test_the_page_names_every_module_of_the_group() -> None:
    text = PAGE.read_text()
    modules = sorted(p.stem for p in (ROOT / "mrs" / "group").glob("*.py") if p.stem != "__init__")
    missing = [name for name in modules if f"`{name}`" not in text and f"`{name}.py`" not in text]
    assert not missing, f"docs/architecture.md does not name these modules of mrs/group: {missing}"
