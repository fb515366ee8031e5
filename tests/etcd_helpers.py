"""The `etcd` fixture: a real single-member etcd per test module, on free ports, its
data in the module's tmp directory (skipped with a reason where etcd is not installed;
CI installs it: .ci/system-packages --tests)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sim.etcd import (
    EtcdMissing,
    EtcdServer,
    InstanceProcess,
    write_replicated_config,
)

__all__ = [
    "EtcdServer",
    "InstanceProcess",
    "etcd",
    "skip_without_etcd",
    "write_replicated_config",
]


def skip_without_etcd(why: str) -> None:
    """Skip where etcd is not installed (a developer's machine without the Debian
    package), but fail under CI, whose `.ci/system-packages --tests` installs it: a
    replicated-group test skipped there would be a gap counted as a pass."""
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI installs etcd-server: .ci/system-packages --tests)")
    pytest.skip(why)


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path_factory.mktemp("etcd"))
    try:
        server.start()
    except EtcdMissing as missing:
        skip_without_etcd(str(missing))
    yield server
    server.stop()
