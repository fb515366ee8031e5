"""What a tool that started `mrs serve` processes (the demo, the bench) tells its
user from a server's log: its first WARNING or ERROR, in one line."""

from __future__ import annotations

from pathlib import Path


def first_warning(log_path: Path, skip_loggers: tuple[str, ...] = ()) -> str:
    """The first WARNING or ERROR the server logged at `log_path`, without its time
    stamp and logger name; "" if none (or no log). `skip_loggers`: loggers whose lines
    are expected (the demo cuts the link on purpose: `mrs.links`, `mrs.forwarding`)."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    skipped = tuple(f" {name}:" for name in skip_loggers)
    for line in lines:
        for level in (" WARNING ", " ERROR "):
            if level in line and not any(name in line for name in skipped):
                return line.split(level, 1)[1].split(": ", 1)[-1].strip()
    return ""
