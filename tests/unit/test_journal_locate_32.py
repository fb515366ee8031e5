"""`--data-dir` given a file (the bus's TOML, pasted where the directory goes) is
answered as such, not "has a group ever run with this data_dir?"."""

from __future__ import annotations

import argparse

import pytest

from mrs.offline.journal_files import JournalsNotFound, locate


def _args(data_dir) -> argparse.Namespace:
    return argparse.Namespace(config=None, group=1, data_dir=data_dir, instance=None)


def test_a_config_file_given_as_data_dir_says_to_give_it_as_config(tmp_path) -> None:
    config = tmp_path / "bus.toml"
    config.write_text("[bus]\n")
    with pytest.raises(JournalsNotFound) as refused:
        locate(_args(config))
    assert str(refused.value) == (
        f"{config} is a file, not a data directory: give the group's data_dir "
        f"(--config {config} --group N finds it)"
    )


def test_a_directory_without_journals_still_asks_whether_a_group_ran(tmp_path) -> None:
    with pytest.raises(JournalsNotFound, match="ever run with this data_dir"):
        locate(_args(tmp_path))
