"""The replay's progress bar on a terminal: done of selected, rate and ETA, from the tally.

Quiet with `--json`, `--dry-run` or when stderr is not a terminal.
"""

from __future__ import annotations

import sys

import trio
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from mrs.tools.journal.replay import Options, Tally

PROGRESS_REFRESH_S = 0.1


class _RateColumn(ProgressColumn):
    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-- msg/s" if speed is None else f"{speed:,.0f} msg/s")


def progress_wanted(options: Options) -> bool:
    return not options.json and not options.dry_run and sys.stderr.isatty()


async def _show_progress(progress: Progress, task_id, tally: Tally) -> None:
    while True:
        progress.update(task_id, completed=tally.sent + tally.failed + tally.skipped + tally.copies)
        await trio.sleep(PROGRESS_REFRESH_S)


def start_progress(
    nursery: trio.Nursery, options: Options, total: int | None, tally: Tally
) -> tuple[Progress, TaskID]:
    """The progress bar on stderr, updated by a task in `nursery`; (bar, task id)."""
    progress = Progress(
        TextColumn(f"replay {options.journal.value}"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    progress.start()
    task_id = progress.add_task("replay", total=total)
    nursery.start_soon(_show_progress, progress, task_id, tally)
    return progress, task_id


def stop_progress(progress: Progress, task_id: TaskID, tally: Tally) -> None:
    progress.update(task_id, completed=tally.sent + tally.failed + tally.skipped + tally.copies)
    progress.stop()
