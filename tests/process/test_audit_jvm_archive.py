"""The audit's JVM class archive (mrs.audit.jvm_archive): the first local audit leaves
what the archive needs and builds it in the background; the archive is one the JVM
maps for the classpath Spark's launcher gives it; later audits use it and report the
same; `off` leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from benchmarks.audit_scan import make_journal
from mrs.audit.jvm_archive import java_binary
from mrs.audit.session import JVM_OPTIONS
from tests.cli_helpers import run_mrs

BUILD_WAIT_S = 240.0


def _audit(data_dir: Path, archive_dir: str) -> dict:
    done = run_mrs(
        "audit", "--data-dir", str(data_dir), "--json",
        timeout_s=240.0, env={"MRS_JVM_ARCHIVE_DIR": archive_dir},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    report.pop("computed", None)
    return report


def _wait_for_archive(directory: Path) -> Path:
    """Another process builds it: poll its files (nothing to await across processes)."""
    deadline = time.monotonic() + BUILD_WAIT_S
    while time.monotonic() < deadline:
        archives = list(directory.glob("*.jsa"))
        if archives and not list(directory.glob("*.building")):
            return archives[0]
        assert not list(directory.glob("*.failed")), "the archive's build failed"
        time.sleep(0.5)
    raise AssertionError(f"no archive after {BUILD_WAIT_S} s: {sorted(directory.iterdir())}")


def test_the_first_audit_builds_an_archive_later_ones_use(tmp_path: Path) -> None:
    data_dir = tmp_path / "g1"
    (data_dir / "journals").mkdir(parents=True)
    make_journal(data_dir / "journals", 2000)
    archive_dir = tmp_path / "archive"
    first = _audit(data_dir, str(archive_dir))
    archive = _wait_for_archive(archive_dir)
    classpath = archive.with_suffix(".classpath").read_text()
    # -Xshare:on refuses to start unless the archive maps for this very classpath.
    mapped = subprocess.run(
        [java_binary(), "-Xshare:on", f"-XX:SharedArchiveFile={archive}", *JVM_OPTIONS.split(),
         "-cp", classpath, "-version"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert mapped.returncode == 0, mapped.stderr
    assert _audit(data_dir, str(archive_dir)) == first
    assert not list(archive_dir.glob("*.*.classes")), "a run's own class list was left"


def test_off_writes_no_archive(tmp_path: Path) -> None:
    data_dir = tmp_path / "g1"
    (data_dir / "journals").mkdir(parents=True)
    make_journal(data_dir / "journals", 100)
    _audit(data_dir, "off")
    assert not Path("off").exists(), "off is not a directory name"
    assert not list(tmp_path.glob("**/*.jsa"))
