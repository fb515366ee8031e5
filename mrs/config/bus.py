"""Bus configuration: one TOML file describes every group, queue and link of a bus.

Why a module of its own: every `mrs serve` process of a bus reads the same file, and
a mistake in it (a typo in a key, a port out of range, a link to a group that does
not exist) would otherwise surface much later as a strange delivery status. So the
file is validated completely when it is loaded, and every problem is reported as
one line naming the file, the dotted key (`group[0].queue[1].confirm`) and what is
wrong with it. The result is a tree of frozen dataclasses the rest of MRS can trust
without checking again; it also resolves queue names (`NYC.ORDERS`) to addresses.

The schema:

    [[group]]
    id = 1                         # 1..32000
    name = "NYC"
    listen = "127.0.0.1:7001"      # host:port; port 0 = the server picks one
    data_dir = "g1"                # relative to this file's directory
    pcj_default = true             # optional, default false
    [group.limits]                 # optional, every key optional
    dqf_messages_max = 100000
    saf_messages_max = 100000
    message_bytes_max = 1048576
    journal_bytes_max = 1073741824
    [[group.queue]]
    id = 10                        # 1..999, not 96 (the dead letter queue)
    name = "ORDERS"
    confirm = "explicit-in-order"  # or "explicit-out-of-order", "implicit"
    messages_max = 10000
    unconfirmed_max = 1000
    permanent = true
    recoverable = true             # false: no DQF (recoverable puts answer NO_DQF)
    [group.tls]                    # optional: TLS on the port and links (mrs.security.tls)
    ca = "certs/ca.pem"
    cert = "certs/group-1.pem"
    key = "certs/group-1.key"
    [[link]]
    groups = [1, 2]
    address = "127.0.0.1:9000"     # optional: where the lower group dials

The model is `mrs.config.schema`, the walk `mrs.config.parse`, the typed value
readers `mrs.config.fields`; this module is the entry point and re-exports them.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from pathlib import Path

from mrs.config.parse import LIMIT_RANGES, _Parser
from mrs.config.schema import (
    DEAD_LETTER_QUEUE_CONFIG,
    DEAD_LETTER_QUEUE_MESSAGEQ_NAME,
    DEAD_LETTER_QUEUE_NAME,
    GROUP_ID_MAX,
    GROUP_ID_MIN,
    PORT_MAX,
    QUEUE_ID_MAX,
    QUEUE_ID_MIN,
    BusConfig,
    ConfigError,
    GroupConfig,
    Limits,
    LinkConfig,
    QueueConfig,
)
from mrs.limits import CONFIG_FILE_BYTES_MAX

__all__ = [
    "DEAD_LETTER_QUEUE_CONFIG",
    "DEAD_LETTER_QUEUE_MESSAGEQ_NAME",
    "DEAD_LETTER_QUEUE_NAME",
    "GROUP_ID_MAX",
    "GROUP_ID_MIN",
    "LIMIT_RANGES",
    "PORT_MAX",
    "QUEUE_ID_MAX",
    "QUEUE_ID_MIN",
    "BusConfig",
    "ConfigError",
    "GroupConfig",
    "Limits",
    "LinkConfig",
    "QueueConfig",
    "load_config",
    "parse_config",
]


def load_config(path: str | os.PathLike[str]) -> BusConfig:
    """Read and validate the bus configuration file at `path`."""
    try:
        with open(path, "rb") as file:
            data = file.read(CONFIG_FILE_BYTES_MAX + 1)  # a pipe (<(...)) reads too
    except OSError as err:
        raise ConfigError(path, "(file)", f"cannot read: {err.strerror or err}") from None
    if len(data) > CONFIG_FILE_BYTES_MAX:
        raise ConfigError(
            path, "(file)", f"larger than {CONFIG_FILE_BYTES_MAX >> 20} MiB: not a bus file"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ConfigError(
            path,
            "(file)",
            f"not UTF-8 text: line {line}: byte 0x{data[err.start]:02x} cannot be read "
            "as UTF-8 (save the file as UTF-8)",
        ) from None
    return parse_config(text, Path(path))


def parse_config(text: str, path: str | os.PathLike[str]) -> BusConfig:
    """Validate TOML `text`; `path` names it in errors and anchors relative data_dirs."""
    try:
        # a byte order mark (Notepad and some editors write one) is not TOML, and
        # tomllib's "Invalid statement (at line 1, column 1)" did not say so
        document = tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(path, "(syntax)", str(err)) from None
    except ValueError:  # tomllib's int() of a number too long to convert
        raise ConfigError(path, *overlong_number(text)) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise ConfigError(
            path, "(syntax)", "arrays or inline tables nested too deeply to read"
        ) from None
    return _Parser(Path(path)).bus(document)


def overlong_number(text: str) -> tuple[str, str]:
    """(key, problem) for the first number too long for Python to read: tomllib lets
    int()'s ValueError out without saying where, and the operator needs the line.
    Every TOML file an operator writes reads it (the bus file, the protection policy
    file, the credentials file)."""
    for number, line in enumerate(text.splitlines(), start=1):
        run = max((len(digits) for digits in re.findall(r"[0-9_]+", line)), default=0)
        if run > sys.get_int_max_str_digits():
            key = line.partition("=")[0].strip() or "(value)"
            return key[:80], f"line {number}: a number of {run} digits is too long"
    return "(syntax)", "a number too long to read"
