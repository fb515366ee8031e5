"""The handler's report: one line per action on stdout (text or JSON lines), notes, summary.

Text lines read `TIME seq=N rule=LINE action=FWD attempt=1 outcome=forwarded target=1.20`;
`--json` prints the same fields as one JSON object per line, so a log shipper or
`jq` can follow a handler.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import TextIO


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    rule_line: int
    """The rules-table line of the rule applied (0: none matched / no header)."""
    action: str
    attempt: int
    outcome: str
    """discarded, forwarded, retried (the message left the DLQ), failed (attempt), left."""
    target: str = ""
    detail: str = ""
    possdupl: bool = False


def _now_text() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


class Reporter:
    def __init__(self, json_lines: bool = False, out: TextIO | None = None) -> None:
        self.json_lines = json_lines
        self.out = out or sys.stdout

    def _write(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def event(self, event: Event) -> None:
        if self.json_lines:
            self._write(json.dumps({"time": _now_text(), **asdict(event)}))
            return
        parts = [
            _now_text(),
            f"seq={event.seq}",
            f"rule={event.rule_line}",
            f"action={event.action}",
            f"attempt={event.attempt}",
            f"outcome={event.outcome}",
        ]
        if event.target:
            parts.append(f"target={event.target}")
        if event.possdupl:
            parts.append("possdupl")
        if event.detail:
            parts.append(f"({event.detail})")
        self._write(" ".join(parts))

    def note(self, text: str) -> None:
        if self.json_lines:
            self._write(json.dumps({"time": _now_text(), "note": text}))
        else:
            self._write(f"{_now_text()} note: {text}")

    def summary(self, counts: dict) -> None:
        if self.json_lines:
            self._write(json.dumps({"time": _now_text(), "summary": counts}))
        else:
            self._write("summary: " + " ".join(f"{key}={value}" for key, value in counts.items()))
