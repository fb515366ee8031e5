"""The `[group.ops]` table: what an operator turns on around a group (all optional).

Why a table of its own: metrics, the web view, journal warnings, map growth and PCJ
retention do not change what MRS promises about messages, and every one is off or at
a safe default when absent; keeping them apart keeps `[group.limits]` about limits.

    [group.ops]
    metrics_listen = "127.0.0.1:9101"   # Prometheus /metrics (off when absent)
    web_listen = "127.0.0.1:8101"       # read-only web view of this group (off when absent)
    web_admin = true                    # the web view acts too (browse, purge, move; login
                                        # with the bus credentials under [auth])
    journal_warn_percent = [80, 95]     # WARNING logs as the journal fills
    journal_bytes_initial = 67108864    # map starts here, grows up to journal_bytes_max
    pcj_archive_dir = "archive"         # Parquet files (relative to data_dir)
    pcj_archive_after_s = 86400         # automatic: archive PCJ records older than this
    pcj_archive_interval_s = 3600       # how often the automatic archive runs
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrs.config.addresses import WILDCARD_HOSTS, host_port, same_address
from mrs.storage.journal_usage import WARN_PERCENTS_DEFAULT

OPS_KEYS = frozenset(
    {
        "metrics_listen",
        "web_listen",
        "web_admin",
        "journal_warn_percent",
        "journal_bytes_initial",
        "pcj_archive_dir",
        "pcj_archive_after_s",
        "pcj_archive_interval_s",
    }
)
PCJ_ARCHIVE_DIR_DEFAULT = "pcj-archive"
PCJ_ARCHIVE_INTERVAL_S_DEFAULT = 3600
PCJ_ARCHIVE_AFTER_S_MAX = 10 * 365 * 86400
"""Ten years. Why a bound: any integer was taken, and one reaching before the epoch
(9223372036854775807, or 10000000000: 317 years) made every automatic run archive
nothing, unsaid, while the operator believed the PCJ was kept in bounds."""


@dataclass(frozen=True, slots=True)
class OpsConfig:
    metrics_host: str | None = None
    metrics_port: int | None = None
    web_host: str | None = None
    web_port: int | None = None
    web_admin: bool = False
    """The web view's actions (mrs.ops.web_admin); off: the page stays read-only."""
    journal_warn_percents: tuple[int, ...] = WARN_PERCENTS_DEFAULT
    journal_bytes_initial: int | None = None
    """None: the map is journal_bytes_max from the start (no growth needed)."""
    pcj_archive_dir: str = PCJ_ARCHIVE_DIR_DEFAULT
    pcj_archive_after_s: int | None = None
    """None: no automatic archive; `mrs pcj archive` still works."""
    pcj_archive_interval_s: int = PCJ_ARCHIVE_INTERVAL_S_DEFAULT

    def archive_dir(self, data_dir: Path) -> Path:
        path = Path(self.pcj_archive_dir).expanduser()
        return path if path.is_absolute() else Path(data_dir) / path


def parse_ops(parser: Any, group: dict[str, Any], group_where: str, journal_bytes_max: int):
    """Validate `[group.ops]` with the config parser's helpers (one-line errors)."""
    where = f"{group_where}.ops"
    if "ops" not in group:
        return OpsConfig()
    raw = group["ops"]
    if not isinstance(raw, dict):
        parser.fail(where, f"must be a table ([group.ops]), got {_shown(raw)}")
    parser.check_keys(raw, where, OPS_KEYS, ())
    values: dict[str, Any] = {}
    for key, prefix in (("metrics_listen", "metrics"), ("web_listen", "web")):
        if key in raw:
            host, port = parser.host_port(raw, key, where, port_min=0)
            values[f"{prefix}_host"], values[f"{prefix}_port"] = host, port
    _check_own_ports(parser, group, group_where, values)
    if "web_admin" in raw:
        values["web_admin"] = parser.boolean(raw, "web_admin", where, default=False)
    if "journal_warn_percent" in raw:
        percents = raw["journal_warn_percent"]
        if (
            not isinstance(percents, list)
            or not percents
            or not all(isinstance(p, int) and not isinstance(p, bool) for p in percents)
            or not all(1 <= p <= 100 for p in percents)
        ):
            parser.fail(
                f"{where}.journal_warn_percent",
                f"must be an array of percents in 1..100, e.g. [80, 95], got {_shown(percents)}",
            )
        values["journal_warn_percents"] = tuple(sorted(set(percents)))
    if "journal_bytes_initial" in raw:
        values["journal_bytes_initial"] = parser.integer(
            raw, "journal_bytes_initial", where, low=1 << 20, high=journal_bytes_max
        )
    if "pcj_archive_dir" in raw:
        _check_archive_dir(parser, raw, where)
        values["pcj_archive_dir"] = raw["pcj_archive_dir"]  # relative to data_dir
    if "pcj_archive_after_s" in raw:
        values["pcj_archive_after_s"] = parser.integer(
            raw, "pcj_archive_after_s", where, low=0, high=PCJ_ARCHIVE_AFTER_S_MAX
        )
    if "pcj_archive_interval_s" in raw:
        values["pcj_archive_interval_s"] = parser.integer(
            raw, "pcj_archive_interval_s", where, low=1, high=7 * 86400
        )
    _check_needs(parser, raw, values, where)
    return OpsConfig(**values)


def _check_archive_dir(parser: Any, raw: dict[str, Any], where: str) -> None:
    """`pcj_archive_dir` a path ("~x", NUL refused) and, absolute, none of the
    system's directories. Why: `pcj_archive_dir = "/"` (or "/etc") was taken, and every
    archive run wrote its Parquet files and its lock file there. A relative one lies
    in the data_dir, which is checked as such."""
    from mrs.config.fields import system_directory_problem  # fields imports the schema, us

    path = parser.file_path(raw, "pcj_archive_dir", where, Path())
    if path.is_absolute():
        problem = system_directory_problem(path.resolve(), "the archive")
        if problem is not None:
            parser.fail(f"{where}.pcj_archive_dir", problem)


def _shown(value: Any) -> str:
    """`value` as the file spells it (`[80, true]`, not Python's `[80, True]`)."""
    from mrs.config.fields import _describe, _toml_list  # fields imports the schema, us

    if isinstance(value, list) and not any(isinstance(v, list | dict) for v in value):
        return _toml_list(value)
    return _describe(value)


def _check_needs(parser: Any, raw: dict[str, Any], values: dict[str, Any], where: str) -> None:
    """A key that does nothing without another is refused: `web_admin = true` without
    `web_listen` (no page to act on), `pcj_archive_interval_s` without
    `pcj_archive_after_s` (no automatic archive). Both were taken and did nothing, and
    the operator believed the page acted or the PCJ was being archived."""
    for key, needed, why in (
        ("web_admin", "web_listen", "the page that acts is served there"),
        ("pcj_archive_interval_s", "pcj_archive_after_s", "the automatic archive runs only then"),
    ):
        if values.get(key) and needed not in raw:  # web_admin = false needs nothing
            parser.fail(f"{where}.{key}", f"needs {needed} in [group.ops] too: {why}")


def _check_own_ports(
    parser: Any, group: dict[str, Any], group_where: str, values: dict[str, Any]
) -> None:
    """metrics_listen and web_listen each on a port of their own: not the group's
    `listen` (nor, replicated, an instance's listen or replication address) and not
    each other. Else the group started, said READY, and died on "Address already in
    use" naming neither key."""
    taken = []  # (key, host, port) of what the group listens on, already checked
    if "listen" in group:
        taken.append(
            (f"{group_where}.listen", *parser.host_port(group, "listen", group_where, port_min=0))
        )
    for i, instance in enumerate(group.get("instance") or []):
        at = f"{group_where}.instance[{i}]"
        for key in ("listen", "replication"):
            taken.append((f"{at}.{key}", *parser.host_port(instance, key, at, port_min=1)))
    for key, prefix in (("metrics_listen", "metrics"), ("web_listen", "web")):
        host, port = values.get(f"{prefix}_host"), values.get(f"{prefix}_port")
        if host is None or not port:  # absent, or port 0: the system picks a free one
            continue
        for other, other_host, other_port in taken:
            if same_address(host, port) == same_address(other_host, other_port) or (
                port == other_port and {host, other_host} & WILDCARD_HOSTS
            ):
                parser.fail(
                    f"{group_where}.ops.{key}",
                    f"{host_port(host, port)} is also {other} "
                    f"({host_port(other_host, other_port)}): "
                    f"give {key} a port of its own",
                )
        taken.append((f"{group_where}.ops.{key}", host, port))
