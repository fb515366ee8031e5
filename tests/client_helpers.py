"""Helpers for client-library tests: a group server on a fixed port, so a restarted
server is found again at the same address (as a real deployment's would be)."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import trio

from clients import NoMoreMessages, Reconnect
from mrs import protocol as wire
from sim.ports import free_port
from sim.processes import GroupProcess, write_single_group_config
from tests.conftest import STANDARD_QUEUES

FAST_RECONNECT = Reconnect(delay_s_initial=0.02, delay_s_max=0.2)
"""Reconnects within tenths of a second: a test's server comes back at once."""


class FixedPortServer:
    """One group (the standard queues) on a port that survives restarts; not started."""

    def __init__(self, directory: Path, group_extra: str = "pcj_default = true") -> None:
        self.port = free_port()
        path = write_single_group_config(directory, queues=STANDARD_QUEUES, group_extra=group_extra)
        path.write_text(path.read_text().replace("127.0.0.1:0", f"127.0.0.1:{self.port}"))
        self.process = GroupProcess(path, 1)
        self.address = f"127.0.0.1:{self.port}"

    def start(self) -> str:
        assert self.process.start() == self.address
        return self.address

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        if self.process.running:
            self.process.terminate()


async def answer_handshake(
    stream: trio.SocketStream, connection: wire.Connection, event: object
) -> bool:
    """A fake server's answer to Hello (group 1) and Attach (queue 1.10); False for
    any other event, which the fake handles (or ignores) itself."""
    if isinstance(event, wire.Hello):
        reply = wire.Welcome(wire.PROTOCOL_VERSION, 1, "one", 0)
        await stream.send_all(connection.send(reply))
    elif isinstance(event, wire.Attach):
        await stream.send_all(connection.send(wire.Attached(event.request_id, 1, 10)))
    else:
        return False
    return True


CLOSE = object()
"""An answer that closes the connection instead (an active killed while it acts)."""

Answers = Callable[[object], list]
"""A scripted server's answers to one request (after the handshake and the attach)."""


async def scripted_server(
    answers: Answers | None = None, task_status=trio.TASK_STATUS_IGNORED
) -> None:
    """Answers the handshake and the attach, then each request with `answers(event)`
    (None: never answers a request). Started with `nursery.start`: its port."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")

    async def serve(stream: trio.SocketStream) -> None:
        connection = wire.Connection("server")
        while data := await stream.receive_some(65536):
            connection.receive_data(data)
            for event in connection.events():
                if await answer_handshake(stream, connection, event) or answers is None:
                    continue
                for answer in answers(event):
                    if answer is CLOSE:  # the server goes away mid-request
                        await stream.aclose()
                        return
                    await stream.send_all(connection.send(answer))

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, serve, listeners)
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.sleep_forever()


async def silent_server(task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Answers the handshake and the attach, then never answers a request."""
    await scripted_server(None, task_status=task_status)


async def take_all(client) -> list:
    """Every message waiting now on the queue `client` is attached to, in order; each
    that asks for a confirm (CONFIRMREQ, POSSDUPL) confirmed."""
    messages = []
    while True:
        try:
            message = await client.get(timeout=0)
        except NoMoreMessages:
            return messages
        if message.needs_confirm:
            await client.confirm(message.seq)
        messages.append(message)


def interrupt_at(function: Callable[..., Any], marker: str) -> Callable[..., Any]:
    """A trace function (for `sys.settrace`) that raises KeyboardInterrupt in the
    calling thread at the first line of `function` holding `marker`, as a Ctrl-C
    landing on that bytecode does: the timing of a real signal, made exact. It fires
    once, then stops tracing."""
    code = function.__code__
    lines, first = inspect.getsourcelines(function)
    target = first + next(i for i, line in enumerate(lines) if marker in line)

    def local(frame: FrameType, event: str, _arg: object) -> Any:
        if event == "line" and frame.f_lineno == target:
            sys.settrace(None)
            raise KeyboardInterrupt
        return local

    def tracer(frame: FrameType, _event: str, _arg: object) -> Any:
        return local if frame.f_code is code else None

    return tracer
