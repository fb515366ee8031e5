"""The server's automatic PCJ retention: the archive (mrs/tools/journal/pcj_archive.py)
now and then, of what was confirmed more than `pcj_archive_after_s` ago.

Why a child process (`mrs pcj archive`) for an unreplicated group: the archive writes
Parquet, which must never stall the event loop, and a failure there must never touch
the server; the server only starts the command and reads its JSON summary.

Why a thread of the active for a replicated group (`archive_here`): the archive
deletes what it writes out, and a deletion must reach every instance, so it goes
through the group's writer (to the replicas, answered once on a majority) like any
commit; a child writing the active's LMDB file directly would delete on one instance
only. The same archive steps run in a thread that writes the Parquet files; each of
its reads and writes of the journals is made on the event loop (`_OnTheLoop`): LMDB's
map is grown there, which no transaction open in another thread may meet.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import trio

from journals import JournalError, JournalStore, WriteBatch
from mrs.ops.pcj_archiver import ArchiveSummary, PcjArchiver

if TYPE_CHECKING:
    from mrs.group import Group
    from mrs.ops.group_ops import GroupOps

log = logging.getLogger("mrs.pcj_archive")


class _OnTheLoop:
    """The group's journals as the archive's thread sees them: each read is made on
    the event loop, each write is a commit of the group's writer, awaited."""

    def __init__(self, group: Group) -> None:
        self._store = group.ctx.store
        self._writer = group.ctx.writer

    def __getattr__(self, name: str) -> Callable[..., Any]:
        read = getattr(self._store, name)
        return lambda *args: trio.from_thread.run_sync(read, *args)

    def commit_now(self, batch: WriteBatch) -> None:
        trio.from_thread.run(self._committed, batch)

    async def _committed(self, batch: WriteBatch) -> None:
        done = trio.Event()
        errors: list[JournalError | None] = []

        def journaled(error: JournalError | None) -> None:
            errors.append(error)
            done.set()

        self._writer.submit(batch, journaled)
        await done.wait()
        if errors[0] is not None:
            raise errors[0]


AUTOMATIC_RUN = "automatic"
"""The run id of the automatic policy's runs (`pcj_archive_after_s`)."""


async def archive_here(
    archiver: PcjArchiver, group: Group, out_dir: Path, until_ns: int, closed_only: bool
) -> ArchiveSummary:
    """One archive of the PCJ records confirmed by `until_ns` (`closed_only`: of the
    closed segments), run by this server: the Parquet files written by a thread, the
    journals read and written on the loop."""
    journals = cast(JournalStore, _OnTheLoop(group))
    group_id = group.ctx.config.id

    def archive() -> ArchiveSummary:
        return archiver(journals, group_id, out_dir, until_ns, closed_only=closed_only)

    return await trio.to_thread.run_sync(archive)


async def archive_forever(ops: GroupOps) -> None:
    """The server's automatic policy: every pcj_archive_interval_s, archive what was
    confirmed more than pcj_archive_after_s ago: in a child process, or on a
    replicated group's active in a thread of its own (`archive_here`; module doc)."""
    server = ops.server
    config = server.config
    if config.instances:
        await _archive_here_forever(ops)
        return
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
        await _child_run(ops, command)
        await trio.sleep(config.ops.pcj_archive_interval_s)


async def _child_run(ops: GroupOps, command: list[str]) -> None:
    """One automatic run as a child process: its summary, or why it failed, becomes
    `mrs status --json`'s `pcj_archive`. Why the failure too: the last success stayed
    there while every later run failed (a full disk, a directory gone), so a monitor
    reading it saw archives going well while the PCJ filled. A summary is marked
    `run: automatic`, as a replicated group's is: the command's own has no `run`,
    and `mrs status` called such a run "PCJ archive (run)"."""
    config = ops.server.config
    try:
        done = await trio.run_process(
            command, capture_stdout=True, capture_stderr=True, check=False
        )
    except OSError as error:
        log.error("automatic PCJ archive could not start: %s", error)
        why = f"could not start: {error}"
    else:
        if done.returncode == 0:
            summary = {"run": AUTOMATIC_RUN, **json.loads(done.stdout.decode() or "{}")}
            ops.last_archive = summary
            if summary.get("archived"):
                log.info(
                    "automatic PCJ archive: %d records to %s",
                    summary["archived"],
                    summary.get("dir"),
                )
            return
        told = done.stderr.decode(errors="replace").strip()
        log.error("automatic PCJ archive failed (exit %d): %s", done.returncode, told[-500:])
        lines = told.splitlines()
        why = lines[-1].removeprefix("mrs: ") if lines else f"exit {done.returncode}"
    where = str(config.ops.archive_dir(config.data_dir))
    ops.last_archive = {"run": AUTOMATIC_RUN, "group": config.id, "dir": where, "error": why}


async def _archive_here_forever(ops: GroupOps) -> None:
    """A replicated group's automatic policy (`archive_here`), on its active."""
    config = ops.server.config
    if ops.server.pcj_archiver is None:  # an in-process server (the simulator, a test)
        log.error("automatic PCJ archive: this server was given no archiver; none runs")
        return
    while True:
        after_ns = (config.ops.pcj_archive_after_s or 0) * 1_000_000_000
        await run_here(ops, AUTOMATIC_RUN, time.time_ns() - after_ns, closed_only=False)
        await trio.sleep(config.ops.pcj_archive_interval_s)


async def run_here(ops: GroupOps, run_id: str, until_ns: int, closed_only: bool) -> None:
    """One archive run on this active (`archive_here`), one at a time (the automatic
    policy's and those `mrs pcj archive` asks for: two at once would write the same
    records twice); its summary, or why it failed, in `mrs status --json`
    (`GroupOps.archive_done`: a run asked for under `pcj_archive_runs`, where its
    command waits for it)."""
    config = ops.server.config
    out_dir = config.ops.archive_dir(config.data_dir)
    asked = run_id != AUTOMATIC_RUN
    async with ops.archive_lock:
        summary: dict[str, Any] = {"run": run_id, "group": config.id, "dir": str(out_dir)}
        archiver, group = ops.server.pcj_archiver, ops.server.group
        if archiver is None or group is None:  # not serving (yet): nothing to archive
            if asked:  # its command waits for a summary
                ops.archive_done({**summary, "error": "the group is not serving"}, asked=True)
            return
        try:
            result = await archive_here(archiver, group, out_dir, until_ns, closed_only)
        except Exception as error:  # the archive's failure never stops the server
            log.error("PCJ archive (%s) failed: %s: %s", run_id, type(error).__name__, error)
            summary["error"] = f"{type(error).__name__}: {error}"
        else:
            summary.update(result.as_dict())
            if result.archived:
                log.info("PCJ archive (%s): %d records to %s", run_id, result.archived, out_dir)
        ops.archive_done(summary, asked=asked)
