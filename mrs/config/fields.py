"""Reads one TOML value of the bus file with its check: one-line errors naming the key.

The typed readers (`integer`, `boolean`, `name`, `host_port`, `data_dir`, ...) that
`mrs.config.parse` walks the document with; `mrs.config.guards`, `mrs.config.ops` and
`mrs.security.tls` are handed the same reader for their sections.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from mrs.config.addresses import host_problem
from mrs.config.keys import unknown_key_problem
from mrs.config.schema import (
    _NAME_PATTERN,
    _NUMBER_PATTERN,
    NAME_CHARS_MAX,
    PORT_MAX,
    ConfigError,
)
from mrs.limits import QUEUE_NAME_CHARS_MAX
from mrs.model import ConfirmStyle


def _describe(value: object) -> str:
    """A short phrase naming a TOML value and its type, for error messages."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"string {shown!r}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, datetime.date | datetime.time):
        return f"date/time {value}"
    return type(value).__name__


def _toml_list(values: list[Any]) -> str:
    """An array as TOML spells it (true, not True), for error messages."""
    return json.dumps(values, default=str)


def _split_host_port(text: str) -> tuple[str, str] | str:
    """('host', 'port') for 'host:port' or '[v6]:port'; a problem string otherwise."""
    scheme, slashes, rest = text.partition("://")
    if slashes and scheme.isalpha():  # a URL pasted in ("http://127.0.0.1:9101"), which
        # read as an IPv6 host without brackets and was refused as one
        return f"must be 'host:port', not a URL: drop '{scheme}://', e.g. {rest.split('/')[0]!r}"
    host, colon, port = text.rpartition(":")
    if not colon:
        return f"must be 'host:port', got {text!r}"
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not host:
            return f"empty host in {text!r}"
    elif ":" in host:
        return f"an IPv6 host must be in brackets, e.g. '[::1]:7001', got {text!r}"
    if not host or any(c.isspace() for c in host):
        return f"must be 'host:port' with a non-empty host, got {text!r}"
    problem = host_problem(host)
    return (host, port) if problem is None else f"{problem}, got {text!r}"


def resolve_path(text: str, base: Path) -> Path | str:
    """The path `text` names (`~` expanded, relative to `base`), or the problem with
    it. Why one function: a NUL or `~nosuchuser` in a path reached the OS (ValueError,
    RuntimeError) and `mrs serve` died with "unexpected error" instead of naming the
    key; data_dir, pcj_archive_dir, [auth]'s files and `protection` all read one."""
    if not text.strip():
        return "must not be empty"
    if "\0" in text:
        return "must not contain a NUL character"
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # "~nosuchuser/..."
        return f"cannot expand the home directory in {text!r}"
    return path if path.is_absolute() else base / path


SYSTEM_DIRECTORIES = frozenset(
    Path(p)
    for p in (
        "/", "/bin", "/boot", "/dev", "/dev/shm", "/etc", "/home", "/lib", "/lib32",
        "/lib64", "/libx32", "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin",
        "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/lib", "/usr/local", "/usr/sbin",
        "/usr/share", "/var", "/var/cache", "/var/lib", "/var/log", "/var/spool", "/var/tmp",
    )
)  # fmt: skip
"""Directories of the system itself, none a group's data_dir (`system_directory_problem`)."""
_PSEUDO_FILESYSTEMS = (Path("/proc"), Path("/sys"))
"""The kernel's views: nothing written under them is a file on a disk."""


def system_directory_problem(directory: Path, whose: str = "the group") -> str | None:
    """Why `directory` (absolute, resolved) cannot be `whose` directory (a group's
    data_dir, the PCJ archive's), or None. Why: `data_dir = "/"` was taken, and the
    group wrote `journals/`, `group.json` and its lock into the root directory;
    journal-repair.md's procedure then moves the whole data_dir aside. A system
    directory (or the user's home) is shared with everything else on the machine; one
    under /proc or /sys keeps nothing on a disk."""
    for view in _PSEUDO_FILESYSTEMS:
        if view == directory or view in directory.parents:
            return (
                f"{directory} is under {view}, the kernel's view, not a disk: give "
                f"{whose} a directory of its own on a disk, e.g. /var/lib/mrs"
            )
    with contextlib.suppress(RuntimeError, KeyError, OSError):  # no home: nothing to compare
        if directory == Path.home().resolve():
            return (
                f"{directory} is the home directory: give {whose} a directory of its "
                f"own, e.g. {directory / 'mrs-data'}"
            )
    if directory in SYSTEM_DIRECTORIES:
        example = Path("/var/lib/mrs") if directory == Path("/") else directory / "mrs"
        return (
            f"{directory} is a directory of the system, shared with everything else on "
            f"the machine: give {whose} a directory of its own, e.g. {example}"
        )
    return None


@dataclass(slots=True)
class FieldReader:
    """Typed reads of TOML values; raises ConfigError on the first fault."""

    path: Path
    data_dir_owner: dict[Path, str] = field(default_factory=dict)
    data_dir_holders: dict[Path, tuple[Path, str]] = field(default_factory=dict)
    """Every directory above a data_dir read so far: (that data_dir, its key)."""

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ConfigError(self.path, key, problem)

    @property
    def base_directory(self) -> Path:
        """Where the file's relative paths start: its own directory, or the working
        directory for a file that has none on a disk (`--config <(envsubst <
        bus.toml)`, a pipe at /dev/fd/N). Why: such a file's "directory" is
        /proc/PID/fd, where `data_dir = "g1"` can be nothing (and is refused as the
        kernel's view)."""
        directory = self.path.absolute().parent
        with contextlib.suppress(OSError):
            if any(view in directory.resolve().parents for view in _PSEUDO_FILESYSTEMS):
                return Path.cwd()
        return directory

    # -- typed values -----------------------------------------------------------

    def check_keys(
        self, table: dict[str, Any], where: str, allowed: frozenset[str], required: tuple[str, ...]
    ) -> None:
        for key in table:
            if key not in allowed:
                self.fail(_join(where, key), unknown_key_problem(key, allowed))
        for key in required:
            if key not in table:
                self.fail(_join(where, key), "required key is missing")

    def tables(self, parent: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
        """An optional array of tables ([[key]]); [] when absent."""
        value = parent.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            header = _join(where.split("[")[0], key) if where else key
            self.fail(
                _join(where, key),
                f"must be an array of tables ([[{header}]]), got {_describe(value)}",
            )
        return value

    def integer(
        self,
        table: dict[str, Any],
        key: str,
        where: str,
        *,
        low: int,
        high: int | None = None,
        default: int | None = None,
    ) -> int:
        if key not in table and default is not None:
            return default
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(_join(where, key), f"must be an integer, got {_describe(value)}")
        if value < low or (high is not None and value > high):
            bound = f"in {low}..{high}" if high is not None else f">= {low}"
            self.fail(_join(where, key), f"must be {bound}, got {value}")
        return value

    def boolean(self, table: dict[str, Any], key: str, where: str, *, default: bool) -> bool:
        value = table.get(key, default)
        if not isinstance(value, bool):
            self.fail(_join(where, key), f"must be true or false, got {_describe(value)}")
        return value

    def string(self, table: dict[str, Any], key: str, where: str) -> str:
        value = table[key]
        if not isinstance(value, str):
            self.fail(_join(where, key), f"must be a string, got {_describe(value)}")
        return value

    def name(self, table: dict[str, Any], key: str, where: str) -> str:
        value = self.string(table, key, where)
        if len(value) > NAME_CHARS_MAX:
            self.fail(
                _join(where, key),
                f"must be at most {NAME_CHARS_MAX} characters, got {len(value)} (so that "
                f"GROUP.QUEUE fits the {QUEUE_NAME_CHARS_MAX} characters a lookup by name carries)",
            )
        if not _NAME_PATTERN.fullmatch(value):
            self.fail(
                _join(where, key),
                f"must be a name: a letter or '_' then letters, digits or '_', got {value!r}",
            )
        return value

    def confirm_style(self, table: dict[str, Any], where: str) -> ConfirmStyle:
        if "confirm" not in table:
            return ConfirmStyle.EXPLICIT_IN_ORDER
        value = self.string(table, "confirm", where)
        try:
            return ConfirmStyle(value)
        except ValueError:
            choices = ", ".join(repr(s.value) for s in ConfirmStyle)
            self.fail(_join(where, "confirm"), f"must be one of {choices}, got {value!r}")

    def host_port(
        self, table: dict[str, Any], key: str, where: str, *, port_min: int
    ) -> tuple[str, int]:
        text = self.string(table, key, where)
        split = _split_host_port(text)
        if isinstance(split, str):
            self.fail(_join(where, key), split)
        host, port_text = split
        # int() of thousands of digits raises ValueError: count them first
        short = len(port_text.lstrip("0")) <= len(str(PORT_MAX))
        port = int(port_text) if short and _NUMBER_PATTERN.fullmatch(port_text) else -1
        if not port_min <= port <= PORT_MAX:
            # the text itself, unless very long: "8080/metrics" was shown as "12 characters"
            shown = repr(port_text) if len(port_text) <= 40 else f"{len(port_text)} characters"
            self.fail(
                _join(where, key),
                f"port must be a number in {port_min}..{PORT_MAX}, got {shown}",
            )
        return host, port

    def file_path(self, table: dict[str, Any], key: str, where: str, base: Path) -> Path:
        """A path (string) key: `~` expanded, relative to `base` (resolve_path)."""
        path = resolve_path(self.string(table, key, where), base)
        if isinstance(path, str):
            self.fail(_join(where, key), path)
        return path

    def data_dir(self, group: dict[str, Any], where: str) -> Path:
        """A group's or an instance's data directory: its own, not another's, nor
        inside another's (or holding one). Why nested ones too: a group whose data_dir
        lay in another's (`g1/journals`) ran, but journal-repair.md's procedure moves
        the damaged group's whole data_dir aside, taking the other's journals with it,
        and the other then started empty on the rescued copy's directory."""
        directory = self.file_path(group, "data_dir", where, self.base_directory)
        directory = directory.resolve()
        problem = system_directory_problem(directory)
        if problem is not None:
            self.fail(_join(where, "data_dir"), problem)
        if directory in self.data_dir_owner:
            self.fail(
                _join(where, "data_dir"),
                f"{directory} is also the data_dir of {self.data_dir_owner[directory]}",
            )
        outer = next((p for p in directory.parents if p in self.data_dir_owner), None)
        if outer is not None:
            self.fail(
                _join(where, "data_dir"),
                f"{directory} is inside {outer}, the data_dir of {self.data_dir_owner[outer]}: "
                "give each group and instance a directory of its own, beside the others",
            )
        if directory in self.data_dir_holders:
            inner, owner = self.data_dir_holders[directory]
            self.fail(
                _join(where, "data_dir"),
                f"{directory} holds {inner}, the data_dir of {owner}: "
                "give each group and instance a directory of its own, beside the others",
            )
        self.data_dir_owner[directory] = where
        for parent in directory.parents:
            self.data_dir_holders.setdefault(parent, (directory, where))
        return directory


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key
