"""mrs.storage.file_identity: the data-directory guard's view of a file (device, inode, links)
must agree with os.stat's, notice a deleted or replaced file, and, on Linux, come from
statx without timestamps (a timed stat before each commit slowed every fdatasync)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mrs.storage import file_identity


def _stat_identity(stat: os.stat_result) -> file_identity.Identity:
    return file_identity.Identity(stat.st_dev, stat.st_ino, stat.st_nlink)


def test_identity_of_a_path_and_of_its_open_file_agree_with_os_stat(tmp_path: Path) -> None:
    path = tmp_path / "data.mdb"
    path.write_bytes(b"x" * 4096)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert file_identity.of_path(str(path)) == _stat_identity(os.stat(path))
        assert file_identity.of_fd(fd) == _stat_identity(os.fstat(fd))
        os.link(path, tmp_path / "second-name")
        assert file_identity.of_fd(fd).links == 2
    finally:
        os.close(fd)


def test_a_deleted_file_has_no_links_and_a_replaced_one_another_inode(tmp_path: Path) -> None:
    path = tmp_path / "data.mdb"
    path.write_bytes(b"old")
    fd = os.open(path, os.O_RDONLY)
    try:
        opened = file_identity.of_fd(fd)
        path.unlink()
        assert file_identity.of_fd(fd).links == 0
        with pytest.raises(FileNotFoundError):
            file_identity.of_path(str(path))
        path.write_bytes(b"new")
        now = file_identity.of_path(str(path))
        assert (now.device, now.inode) != (opened.device, opened.inode)
    finally:
        os.close(fd)


def test_a_closed_descriptor_is_an_os_error() -> None:
    fd = os.open(os.devnull, os.O_RDONLY)
    os.close(fd)
    with pytest.raises(OSError):
        file_identity.of_fd(fd)


@pytest.mark.skipif(sys.platform != "linux", reason="statx is Linux's")
def test_on_linux_identities_are_read_without_timestamps() -> None:
    assert file_identity.narrow()


def test_without_statx_identities_come_from_os_stat(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(file_identity._STATX, "function", None)  # a system without statx
    path = tmp_path / "data.mdb"
    path.write_bytes(b"x")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert not file_identity.narrow()
        assert file_identity.of_path(str(path)) == _stat_identity(os.stat(path))
        path.unlink()
        assert file_identity.of_fd(fd).links == 0
    finally:
        os.close(fd)
