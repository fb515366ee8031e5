"""The one line for a listening address that cannot be bound, whichever it is: a
group's `listen`, an instance's `replication`, `[group.ops]` metrics_listen or
web_listen. Each caller says where the address is written; the errno says what to do.
"""

from __future__ import annotations

import errno

from mrs.exit_status import EXIT_RUNTIME, EXIT_USAGE, CommandError


def bind_failure(where: str, key: str, error: OSError) -> CommandError:
    """`where`: the file, the group and the setting ("bus.toml: group 1 (NYC) listen =
    H:P"); `key`: the setting's name, which the operator changes."""
    if error.errno == errno.EADDRINUSE:
        return CommandError(
            f"{where}: the port is in use by another process; stop it or change {key}",
            EXIT_RUNTIME,
        )
    if error.errno in (errno.EACCES, errno.EPERM):
        return CommandError(
            f"{where}: not allowed to listen there ({error.strerror}); "
            "use a port above 1023 or run with the needed privilege",
            EXIT_RUNTIME,
        )
    problem = error.strerror or str(error)
    if error.errno == errno.EADDRNOTAVAIL:
        problem = "that address is not one of this machine's"
    return CommandError(
        f"{where}: cannot listen ({problem}); use a local address such as 127.0.0.1 or 0.0.0.0",
        EXIT_USAGE,
    )
