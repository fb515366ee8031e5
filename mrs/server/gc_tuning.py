"""Garbage-collector settings for a long-running server process (benchmarks/README.md).

Why: a queued message keeps about two tracked objects alive (its entry and what the
entry holds), and under load the collector's full passes walk every queued message
again and again while freeing almost nothing — py-spy put 28.6% of the server's CPU
in the collector. Reference cycles in the server are rare (cancelled scopes,
exceptions with tracebacks), so the collector's work is almost all wasted.

What: after start-up and recovery, `gc.freeze()` moves everything alive (modules,
configuration, the recovered DQF backlog) into the permanent generation, which no
collection walks; then generation thresholds much larger than CPython's default
(700, 10, 10) make young collections rarer and full ones rarer still. The collector
stays ON: garbage cycles are still found, so memory stays bounded (see
benchmarks/README.md for the RSS check and the measured figures).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Mapping

from mrs.exit_status import EXIT_USAGE, CommandError

GC_ENV = "MRS_GC_THRESHOLDS"
"""`mrs serve`'s switch: unset for SERVER_GC_THRESHOLDS, `off` for CPython's own
collector settings (no freeze), or three positive integers `gen0,gen1,gen2`."""

SERVER_GC_THRESHOLDS: tuple[int, int, int] = (50_000, 50, 100)
"""Generation 0/1/2 thresholds for `mrs serve`, chosen by measurement
(benchmarks/README.md): allocations between young collections, then young
collections per middle one, middle collections per full one."""

CLIENT_GC_THRESHOLDS: tuple[int, int, int] = (50_000, 50, 100)
"""The same for a client process that opts in with `tune_gc_for_throughput()`."""


def tune_gc(thresholds: tuple[int, int, int]) -> tuple[int, int, int]:
    """Freeze what is alive now and set `thresholds`; return the previous thresholds.

    Call it once, after start-up (and recovery), so the long-lived objects built
    then are never walked again."""
    gen0_count, gen1_count, gen2_count = thresholds
    if min(thresholds) < 1:
        raise ValueError(f"gc thresholds must be >= 1, got {thresholds}")
    previous = gc.get_threshold()
    gc.collect()  # leave no garbage in what is frozen: frozen objects are never freed
    gc.freeze()
    gc.set_threshold(gen0_count, gen1_count, gen2_count)
    return previous


def thresholds_from(environ: Mapping[str, str]) -> tuple[int, int, int] | None:
    """The thresholds MRS_GC_THRESHOLDS asks for (None: leave the collector alone);
    a bad value is one line, not a traceback."""
    text = environ.get(GC_ENV, "").strip()
    if not text:
        return SERVER_GC_THRESHOLDS
    if text.lower() == "off":
        return None
    words = [word.strip() for word in text.split(",")]
    if len(words) != 3 or not all(word.isascii() and word.isdigit() for word in words):
        raise CommandError(
            f"{GC_ENV}: {text!r} is not 'off' or three integers gen0,gen1,gen2", EXIT_USAGE
        )
    gen0_count, gen1_count, gen2_count = (int(word) for word in words)
    if min(gen0_count, gen1_count, gen2_count) < 1:
        raise CommandError(f"{GC_ENV}: {text!r}: every threshold must be >= 1", EXIT_USAGE)
    return gen0_count, gen1_count, gen2_count


def tune_gc_for_server() -> tuple[int, int, int]:
    """The server's settings (SERVER_GC_THRESHOLDS), after recovery."""
    return tune_gc(SERVER_GC_THRESHOLDS)


def tune_gc_for_throughput() -> tuple[int, int, int]:
    """Opt-in for a client process that puts or gets many messages: freeze what it
    has built so far and raise the thresholds (CLIENT_GC_THRESHOLDS)."""
    return tune_gc(CLIENT_GC_THRESHOLDS)


@contextlib.contextmanager
def tuned_for_throughput() -> Iterator[None]:
    """`tune_gc_for_throughput()` for the length of the block, then CPython's settings
    as they were: for a bulk job (`mrs jplay`) that may run inside a caller's process.
    Objects the caller froze itself stay frozen."""
    frozen_before = gc.get_freeze_count()
    previous = tune_gc_for_throughput()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()
        gc.set_threshold(*previous)
