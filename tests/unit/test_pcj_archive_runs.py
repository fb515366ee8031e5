"""The PCJ archive runs `mrs pcj archive` asks a replicated group's active for
(mrs.ops.pcj_retention `run_here`, mrs.ops.group_ops `archive_done`): the command waits
for its run's summary in the group's status, so every run asked for ends with one, kept
by its id (an automatic run right after it replaces the last summary at once)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import trio

from mrs.limits import PCJ_ARCHIVE_RUNS_KEPT_MAX
from mrs.ops.group_ops import GroupOps
from mrs.ops.pcj_retention import AUTOMATIC_RUN, run_here


def _ops(tmp_path: Path) -> GroupOps:
    ops_config = SimpleNamespace(web_port=None, archive_dir=lambda data_dir: tmp_path / "archive")
    config = SimpleNamespace(id=1, data_dir=tmp_path, ops=ops_config)
    return GroupOps(SimpleNamespace(config=config, pcj_archiver=None, group=None))  # type: ignore[arg-type]


def test_a_run_asked_for_keeps_its_summary_after_an_automatic_run(tmp_path: Path) -> None:
    ops = _ops(tmp_path)
    ops.archive_done({"run": "asked-1", "archived": 20}, asked=True)
    ops.archive_done({"run": AUTOMATIC_RUN, "archived": 0}, asked=False)
    assert ops.last_archive == {"run": AUTOMATIC_RUN, "archived": 0}
    assert ops.archive_runs == {"asked-1": {"run": "asked-1", "archived": 20}}
    for number in range(PCJ_ARCHIVE_RUNS_KEPT_MAX + 5):
        ops.archive_done({"run": f"later-{number}"}, asked=True)
    assert len(ops.archive_runs) == PCJ_ARCHIVE_RUNS_KEPT_MAX
    assert "asked-1" not in ops.archive_runs and f"later-{number}" in ops.archive_runs


def test_a_run_asked_for_while_the_group_is_not_serving_says_so(tmp_path: Path) -> None:
    ops = _ops(tmp_path)
    trio.run(run_here, ops, "asked-2", 0, False)
    trio.run(run_here, ops, AUTOMATIC_RUN, 0, False)  # the policy's: nothing said
    assert ops.archive_runs["asked-2"]["error"] == "the group is not serving"
    assert ops.last_archive == ops.archive_runs["asked-2"]
