"""SIGTERM and SIGHUP stop a command as Ctrl-C does (`stop_signals_as_ctrl_c`), and
a stop reaches a trio run's main task at a checkpoint (`run_stoppable`).

Why a module of its own, under mrs: the commands that start processes or hold work
in flight (the demo, bench, the simulator's scenarios, `mrs dlq-handler`, `mrs
jplay`) all need it, and mrs must not import the simulator's package for it.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

import trio

T = TypeVar("T")

HANDED_TO_SIGINT = (signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a command of real processes as Ctrl-C does."""

_stop_blocks: list[tuple[list[signal.Signals], tuple[signal.Signals, ...]]] = []
"""The `stop_signals_as_ctrl_c` blocks under way, innermost last: the list each
yields, and the signals it took over (`run_stoppable` reads them)."""


@contextlib.contextmanager
def stop_signals_as_ctrl_c() -> Iterator[list[signal.Signals]]:
    """While the block runs, SIGTERM (`kill`, a CI job cancelled, `timeout`) and SIGHUP
    (the terminal closed) are handed to SIGINT's handler, so they unwind the command as
    Ctrl-C does and its `finally` blocks stop the servers it started. Their default
    would end the process at once and leave every `mrs serve`, etcd and temporary
    directory it made behind. Yields the signals caught, in order. Inside `trio.run`
    SIGINT's handler is trio's: run the command with `run_stoppable`. A signal that is
    ignored (`nohup`) stays ignored."""
    caught: list[signal.Signals] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        caught.append(signal.Signals(signum))
        on_sigint = signal.getsignal(signal.SIGINT)
        if not callable(on_sigint):  # SIGINT ignored (a background job): stop anyway
            raise KeyboardInterrupt
        on_sigint(signal.SIGINT, frame)

    previous = {
        signum: signal.signal(signum, handler)
        for signum in HANDED_TO_SIGINT
        if signal.getsignal(signum) != signal.SIG_IGN
    }
    block = (caught, tuple(previous))
    _stop_blocks.append(block)
    try:
        yield caught
    finally:
        _stop_blocks.remove(block)
        for signum, before in previous.items():
            signal.signal(signum, before)


def run_stoppable(
    async_fn: Callable[..., Awaitable[T]], *args: Any, clock: trio.abc.Clock | None = None
) -> T:
    """`trio.run` for a command a signal may stop: Ctrl-C (or a signal handed to it)
    reaches the main task as a KeyboardInterrupt at its next checkpoint. Raised
    wherever the code was, it reached the simulator's tasks mid-step: trio failed with
    TrioInternalError (a task exited twice) or a client took it for a closed connection
    (4 of 60 signalled swarms). One function, so no command forgets the flag.

    With SIGINT ignored (a script's background job) trio has no Ctrl-C to hand a
    signal to: the signals a `stop_signals_as_ctrl_c` block took over then cancel the
    run, and KeyboardInterrupt is raised once it has unwound, the signal in that
    block's list (`_run_cancelled_at`)."""
    if _stop_blocks and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        caught, taken_over = _stop_blocks[-1]
        if taken_over:
            return _run_cancelled_at(taken_over, caught, async_fn, args, clock)
    return trio.run(
        async_fn, *args, clock=clock, restrict_keyboard_interrupt_to_checkpoints=True
    )


def _run_cancelled_at(
    signals: tuple[signal.Signals, ...],
    caught: list[signal.Signals],
    async_fn: Callable[..., Awaitable[T]],
    args: tuple[Any, ...],
    clock: trio.abc.Clock | None,
) -> T:
    """`trio.run` cancelled by the first of `signals`, then KeyboardInterrupt. Why: the
    handler of `stop_signals_as_ctrl_c`, with no Ctrl-C to hand over to, raised
    KeyboardInterrupt wherever the code was: trio abandoned the run with pages of
    "Exception ignored" tracebacks, and `mrs jplay` left the records its workers held
    out of its summary."""
    received: list[signal.Signals] = []

    async def main() -> Any:
        with trio.open_signal_receiver(*signals) as receiver, trio.CancelScope() as scope:
            trio.lowlevel.spawn_system_task(_cancel_at_first, receiver, scope, received)
            return await async_fn(*args)
        return None  # cancelled by a signal

    result = trio.run(main, clock=clock)
    if received:
        caught.extend(received)
        raise KeyboardInterrupt
    return result


async def _cancel_at_first(
    receiver: Any, scope: trio.CancelScope, received: list[signal.Signals]
) -> None:
    async for signum in receiver:
        received.append(signal.Signals(signum))
        scope.cancel()
