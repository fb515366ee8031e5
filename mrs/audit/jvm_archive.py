"""A class-data-sharing archive of the audit's JVM classes, so a local audit's JVM
starts in about 4 s instead of 6 (benchmarks/README.md, "The audit's JVM archive").

Why: more than half of a 10k-record audit was the driver JVM loading and verifying
Spark's ~14,600 classes. JDK 17 maps them from an archive made once (`java
-Xshare:dump`) from the list of classes a run loaded. It does so only for the same
classpath, jar for jar and in the same order, and Spark's launcher expands `jars/*` in
directory order, so the classpath cannot be written down before a JVM has run.

So the first local audit has its JVM write the classes it loads, and records the
classpath that JVM really had. When that audit ends, a detached, niced `java
-Xshare:dump` (about 30 s of one core) turns the two into the archive. Later audits
name it. A missing, half-built, failed or mismatched archive costs nothing: the JVM
starts without it (`-Xshare:auto`, its default), and a failed build is not tried again.
`MRS_JVM_ARCHIVE_DIR=off` turns all of this off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from mrs.limits import JVM_ARCHIVE_BUILD_S_MAX

ARCHIVE_DIR_ENV = "MRS_JVM_ARCHIVE_DIR"
"""Where archives live (default `$XDG_CACHE_HOME/mrs/jvm-archive`, else
`~/.cache/mrs/jvm-archive`); `off` turns the archive off."""


@dataclass(frozen=True)
class JvmArchive:
    """The archive for one JDK and one Spark installation, and the files that make it."""

    directory: Path
    key: str

    def _file(self, suffix: str) -> Path:
        return self.directory / f"{self.key}{suffix}"

    @property
    def archive(self) -> Path:
        return self._file(".jsa")

    @property
    def classes(self) -> Path:
        return self._file(".classes")

    @property
    def own_classes(self) -> Path:
        """This process's JVM writes its class list here (two audits at once must not
        write one file); it becomes `classes` once the run has ended."""
        return self._file(f".{os.getpid()}.classes")

    def java_options(self) -> str:
        """What the driver JVM is started with: the archive when there is one, else
        the list of the classes it loads (unless a list is kept already)."""
        if self.archive.exists():
            return f"-XX:SharedArchiveFile={self.archive}"
        if self.classes.exists() or self._file(".failed").exists():
            return ""
        self._forget_dead_lists()
        return f"-XX:DumpLoadedClassList={self.own_classes}"

    def _forget_dead_lists(self) -> None:
        """Class lists of processes that ended without an audit's end (a test's Spark
        session, a killed audit) are not kept."""
        for listed in self.directory.glob(f"{self.key}.*.classes"):
            pid = listed.name.split(".")[1]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                listed.unlink(missing_ok=True)

    def note_classpath(self, classpath: str) -> None:
        """The classpath the JVM started with, which the dump must use verbatim."""
        target = self._file(".classpath")
        if classpath and not self.archive.exists() and not target.exists():
            _write_atomically(target, classpath)

    def build_in_background(self, java_options: str) -> bool:
        """Once a run has ended: keep its class list, and start the dump detached when
        the list and the classpath are there and no archive is. True if it started."""
        own = self.own_classes
        if own.exists():
            if self.classes.exists() or self.archive.exists():
                own.unlink(missing_ok=True)
            else:
                own.replace(self.classes)
        classpath = self._file(".classpath")
        if self.archive.exists() or not (self.classes.exists() and classpath.exists()):
            return False
        if self._file(".failed").exists() or not self._claim_build():
            return False
        java = java_binary()
        if java is None:
            return False
        script = (
            'if "$0" -Xshare:dump -XX:SharedClassListFile="$1" -XX:SharedArchiveFile="$2" '
            f'{java_options} -cp "$(cat "$3")"; then mv "$2" "$4"; else touch "$5"; fi; '
            'rm -f "$2" "$6"'
        )
        paths = [self.classes, self._file(".jsa.tmp"), classpath, self.archive]
        paths += [self._file(".failed"), self._file(".building")]
        subprocess.Popen(
            ["nice", "-n", "10", "sh", "-c", script, java, *map(str, paths)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return True

    def _claim_build(self) -> bool:
        """One build at a time; a claim older than JVM_ARCHIVE_BUILD_S_MAX is a build
        that died (a reboot) and is taken over."""
        marker = self._file(".building")
        try:
            if time.time() - marker.stat().st_mtime > JVM_ARCHIVE_BUILD_S_MAX:
                marker.unlink(missing_ok=True)
        except FileNotFoundError:
            pass
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        return True


def java_binary() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java")


def for_this_machine(spark_home: Path) -> JvmArchive | None:
    """The archive of this JDK and this Spark (a key over the java binary and every jar
    Spark ships, so an upgrade of either makes a new one), or None when it is off or
    its directory cannot be made."""
    configured = os.environ.get(ARCHIVE_DIR_ENV)
    if configured == "off":
        return None
    java = java_binary()
    if java is None:
        return None
    if configured:
        directory = Path(configured)
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        directory = Path(cache) / "mrs" / "jvm-archive"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        java_file = Path(java).resolve()
        digest.update(
            f"{java_file}:{java_file.stat().st_size}:{java_file.stat().st_mtime_ns}".encode()
        )
        for jar in sorted((spark_home / "jars").iterdir()):
            digest.update(f"{jar.name}:{jar.stat().st_size}".encode())
    except OSError:
        return None
    return JvmArchive(directory, digest.hexdigest()[:24])


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text)
        temporary.replace(path)
    except OSError:
        temporary.unlink(missing_ok=True)
