"""Fixtures shared by the real-process tests of several modules."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real standalone Spark cluster (one master, one worker of 2 cores), started
    once for the test session: (its spark:// URL, the worker's work directory, where
    each application's executor gets the files shipped to it). Its tests run on one
    worker (xdist group "spark"), so one cluster serves them all (a start is
    seconds of two JVMs)."""
    from sim.ports import free_port
    from tests.process.test_audit_cluster import Daemon

    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    port = free_port()
    work = tmp_path_factory.mktemp("spark-work")
    master = Daemon(
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(free_port())], env,
    )  # fmt: skip
    worker = None
    try:
        master.wait_for(r"Starting Spark master at spark://")
        worker = Daemon(
            ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
             "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(work),
             f"spark://127.0.0.1:{port}"], env,
        )  # fmt: skip
        worker.wait_for(r"Successfully registered with master")
        yield f"spark://127.0.0.1:{port}", work
    finally:
        if worker is not None:
            worker.stop()
        master.stop()
