"""mrs.tools.server_log: the one line the demo and the bench show from a server's log
when they stop (the demo skips the link's expected warnings: it cuts the link)."""

from __future__ import annotations

from pathlib import Path

from mrs.tools.server_log import first_warning

LOG = """\
2026-12-06 07:00:00,001 INFO mrs.server: group 1 ready
2026-12-06 07:00:01,002 WARNING mrs.links: link to group 2 down: connection refused
2026-12-06 07:00:02,003 ERROR mrs.journal: disk holding the journal has 1 bytes free
"""


def test_the_first_warning_or_error_without_its_stamp_and_logger(tmp_path: Path) -> None:
    log = tmp_path / "group1.log"
    log.write_text(LOG)
    assert first_warning(log) == "link to group 2 down: connection refused"
    assert first_warning(log, ("mrs.links",)) == "disk holding the journal has 1 bytes free"
    assert first_warning(tmp_path / "none.log") == ""
