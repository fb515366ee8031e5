"""Which rule a dead letter gets, and when: the rules-table processing, without I/O.

As the reference says: rules are tried top to bottom and the first matching rule's
action is attempted; each rule keeps its own attempt count for the message; a
failed attempt is repeated RETRYINT seconds later until RETRY attempts were made,
then the next matching rule is tried; when every matching rule has failed, or none
matches, IGNORE is assumed and the message stays on the DLQ. A message without a
dead-letter header is never matched: it is reported (periodically) and left alone,
and so is one the handler has already put out of a DLQ too many times (a loop).
The engine remembers every message it has seen and not removed, up to `seen_max`.
Time is passed in (`now_s`), so the logic tests under a MockClock or none at all.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from mrs.dlq.match import Letter, Names, _no_names, letter_values, rule_matches
from mrs.dlq.table import Action, Rule, RulesTable
from mrs.limits import (
    DLQ_HANDLER_RETURNS_MAX,
    DLQ_HANDLER_SEEN_MAX_DEFAULT,
    DLQ_RETRY_INTERVAL_S_MIN,
)


class StepKind(enum.StrEnum):
    ACT = "act"
    """Attempt `rule`'s action now."""
    WAIT = "wait"
    """The next attempt is due in `wait_s`."""
    IGNORE = "ignore"
    """Leave the message on the DLQ (an IGNORE rule, no match, or all rules failed)."""
    NO_HEADER = "no-header"
    """No dead-letter header: reported and left on the DLQ."""
    LOOPED = "looped"
    """Put back out of a DLQ DLQ_HANDLER_RETURNS_MAX times already: left, reported."""


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    rule: Rule | None = None
    attempt: int = 0
    """1-based attempt number of `rule` for this message."""
    wait_s: float = 0.0
    reason: str = ""


@dataclass(slots=True)
class _Progress:
    letter: Letter
    matches: list[int]
    position: int = 0
    attempts: int = 0
    due_s: float = 0.0
    settled: Step | None = None
    """Once IGNORE is reached the message is settled: same answer until it leaves."""


@dataclass(eq=False)
class Engine:
    table: RulesTable
    names: Names = _no_names
    seen_max: int = DLQ_HANDLER_SEEN_MAX_DEFAULT
    _seen: dict[int, _Progress] = field(default_factory=dict)

    @property
    def retry_interval_s(self) -> float:
        """RETRYINT, but never under DLQ_RETRY_INTERVAL_S_MIN: `RETRYINT(0)` with a large
        RETRY would otherwise repeat a failing put as fast as the server refuses it."""
        return max(float(self.table.control.retry_interval_s), DLQ_RETRY_INTERVAL_S_MIN)

    @property
    def seen(self) -> int:
        return len(self._seen)

    def full(self) -> bool:
        return len(self._seen) >= self.seen_max

    def admit(self, letter: Letter, now_s: float) -> bool:
        """Start tracking a message; False when the record of seen messages is full."""
        if letter.seq in self._seen:
            return True
        if self.full():
            return False
        matches: list[int] = []
        if letter.header is not None:
            values = letter_values(letter, self.names)
            matches = [i for i, rule in enumerate(self.table.rules) if rule_matches(rule, values)]
        self._seen[letter.seq] = _Progress(letter, matches, due_s=now_s)
        return True

    def step(self, seq: int, now_s: float) -> Step:
        progress = self._seen[seq]
        if progress.settled is not None:
            return progress.settled
        if progress.letter.header is None:
            return Step(StepKind.NO_HEADER, reason="no dead-letter header")
        if (returns := progress.letter.returns) >= DLQ_HANDLER_RETURNS_MAX:
            progress.settled = Step(
                StepKind.LOOPED,
                reason=f"came back to a DLQ after {returns} puts out of one (at most "
                f"{DLQ_HANDLER_RETURNS_MAX}): left here; a rule or its destination loops",
            )
            return progress.settled
        if progress.position >= len(progress.matches):
            why = "every matching rule failed" if progress.matches else "no rule matches"
            progress.settled = Step(StepKind.IGNORE, reason=why)
            return progress.settled
        rule = self.table.rules[progress.matches[progress.position]]
        if rule.action is Action.IGNORE:
            progress.settled = Step(StepKind.IGNORE, rule, reason="ACTION(IGNORE)")
            return progress.settled
        if progress.due_s > now_s:
            return Step(StepKind.WAIT, rule, progress.attempts + 1, progress.due_s - now_s)
        return Step(StepKind.ACT, rule, progress.attempts + 1)

    def failed(self, seq: int, now_s: float) -> None:
        """The attempt failed: the same rule again after RETRYINT, or the next rule."""
        progress = self._seen[seq]
        rule = self.table.rules[progress.matches[progress.position]]
        progress.attempts += 1
        if progress.attempts < rule.retry:
            progress.due_s = now_s + self.retry_interval_s
        else:
            progress.position += 1
            progress.attempts = 0
            progress.due_s = now_s

    def forget(self, seq: int) -> None:
        """The message left the DLQ (or this handler let it go)."""
        self._seen.pop(seq, None)
