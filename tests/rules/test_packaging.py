"""What the package promises a new user: version, typing marker, license, changelog,
a glossary linked from README, docs that help texts point to, example configs that
have what the docs' examples need, enums that print as names, ignored generated files."""

from __future__ import annotations

import re
import subprocess
import tomllib
from importlib import metadata, resources
from pathlib import Path

from mrs.config.bus import load_config
from mrs.model import DeliveryMode, Status, Uma

ROOT = Path(__file__).resolve().parents[2]


def test_version_license_changelog_and_py_typed() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert metadata.version("mrs") == version
    assert version in (ROOT / "CHANGELOG.md").read_text()
    assert "Permission is hereby granted" in (ROOT / "LICENSE").read_text()
    for package in ("mrs", "clients", "journals"):  # a type checker reads each one's hints
        assert resources.files(package).joinpath("py.typed").is_file(), package
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert all("py.typed" in package_data["package-data"][p] for p in ("clients", "journals"))


def test_glossary_defines_the_messageq_words_and_readme_links_it() -> None:
    assert "docs/glossary.md" in (ROOT / "README.md").read_text()
    glossary = (ROOT / "docs" / "glossary.md").read_text()
    for term in ("PSB", "DQF", "SAF", "DLJ", "PCJ", "UMA", "interest point"):
        assert re.search(rf"\*\*{re.escape(term)}\*\*", glossary), term


def test_every_doc_the_code_points_to_exists() -> None:
    pointed = set()
    for folder in ("mrs", "clients", "journals", "sim"):
        for path in (ROOT / folder).rglob("*.py"):
            pointed |= set(
                re.findall(r"docs/[A-Za-z0-9_./-]+\.(?:md|json|py|toml)", path.read_text())
            )
    assert pointed, "no doc references found: the scan is broken"
    missing = sorted(p for p in pointed if not (ROOT / p).exists())
    assert not missing, f"help texts point to docs that do not exist: {missing}"


def test_the_example_bus_has_the_queues_the_journal_tool_examples_use() -> None:
    bus = load_config(ROOT / "docs" / "examples" / "bus.toml")
    names = {queue.name for queue in bus.group(1).queues.values()}
    text = (ROOT / "docs" / "journal-tools.md").read_text()
    commands = "\n".join(line for line in text.splitlines() if line.startswith("mrs "))
    used = set(re.findall(r"--(?:to|as|target) ([A-Z][A-Z0-9_]*)\b", commands)) | {"REPLAY"}
    assert {"ORDERS", "RESTORE"} <= used, "the scan of the examples is broken"
    assert used <= names, f"docs/examples/bus.toml lacks {sorted(used - names)}"


def test_enums_print_as_names_and_travel_as_numbers() -> None:
    import json

    assert str(Status.SUCCESS) == "Status.SUCCESS" and f"{Uma.DLJ}" == "Uma.DLJ"
    assert f"{DeliveryMode.WF_DQF}" == "DeliveryMode.WF_DQF"
    assert json.dumps([Status.SUCCESS]) == f"[{int(Status.SUCCESS)}]"
    assert f"{Status.SUCCESS:d}" == str(int(Status.SUCCESS)) and Status.SUCCESS == 1


def test_files_the_examples_generate_are_ignored_by_git() -> None:
    generated = [
        "docs/examples/g1/journals/data.mdb",
        "docs/examples/g1/mrs.lock",
        ".bench/g1/journals/data.mdb",
        "group1.log",
    ]
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", *generated], cwd=ROOT, capture_output=True, text=True
    )
    assert sorted(result.stdout.split()) == sorted(generated)
