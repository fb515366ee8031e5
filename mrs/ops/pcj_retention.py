"""The server's automatic PCJ retention: run `mrs pcj archive` now and then, as a child.

Why a child process: the archive (mrs/tools/journal/pcj_archive.py) writes Parquet,
which must never stall the event loop, and a failure there must never touch the
server; the server therefore only starts the command and reads its JSON summary.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mrs.ops.group_ops import GroupOps

log = logging.getLogger("mrs.pcj_archive")


async def archive_forever(ops: GroupOps) -> None:
    """The server's automatic policy: every pcj_archive_interval_s, archive what was
    confirmed more than pcj_archive_after_s ago — in a child process, so the event
    loop never waits on Parquet writing and a failure never touches the server."""
    import trio

    server = ops.server
    config = server.config
    while True:
        command = [
            sys.executable,
            "-m",
            "mrs",
            "pcj",
            "archive",
            "--config",
            str(server.bus.path),
            "--group",
            str(config.id),
            "--until",
            f"{config.ops.pcj_archive_after_s}s",
            "--json",
        ]
        try:
            done = await trio.run_process(
                command, capture_stdout=True, capture_stderr=True, check=False
            )
        except OSError as error:
            log.error("automatic PCJ archive could not start: %s", error)
        else:
            if done.returncode == 0:
                summary = json.loads(done.stdout.decode() or "{}")
                ops.last_archive = summary
                if summary.get("archived"):
                    log.info(
                        "automatic PCJ archive: %d records to %s",
                        summary["archived"],
                        summary.get("dir"),
                    )
            else:
                log.error(
                    "automatic PCJ archive failed (exit %d): %s",
                    done.returncode,
                    done.stderr.decode(errors="replace").strip()[-500:],
                )
        await trio.sleep(config.ops.pcj_archive_interval_s)
