"""The `etcd` fixture: a real single-member etcd per test module, on free ports, its
data in the module's tmp directory (skipped with a reason where etcd is not installed;
CI installs it: .ci/system-packages --tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sim.etcd import (
    EtcdMissing,
    EtcdServer,
    InstanceProcess,
    free_port,
    write_replicated_config,
)

__all__ = ["EtcdServer", "InstanceProcess", "etcd", "free_port", "write_replicated_config"]


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path_factory.mktemp("etcd"))
    try:
        server.start()
    except EtcdMissing as missing:
        pytest.skip(str(missing))
    yield server
    server.stop()
