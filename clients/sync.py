"""`connect_sync`: the same client, blocking, for scripts and REPLs.

A background thread runs trio and owns the connection; each blocking call hands its
coroutine to that thread with `trio.from_thread.run` and waits for the answer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import trio

from clients.connection import Client, connect
from mrs.model import Address, ForceJrn, Message, Psb


class SyncClient:
    """Blocking twin of `Client`: put, get, confirm, status, iteration."""

    def __init__(self, address: str, queue: str | Address, program: str) -> None:
        self._args = (address, queue, program)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._client: Client | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="mrs-client", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            if not self._ready.is_set():
                self._error = error
        finally:
            self._ready.set()

    async def _main(self) -> None:
        address, queue, program = self._args
        async with connect(address, queue, program=program) as client:
            self._client = client
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            self._ready.set()
            await self._stop.wait()

    def _call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        return trio.from_thread.run(lambda: function(*args, **kwargs), trio_token=self._token)

    @property
    def queue(self) -> Address | None:
        return self._client.queue

    def put(self, body: bytes, target: str | Address, **options: Any) -> Psb:
        return self._call(self._client.put, body, target, **options)

    def get(self, timeout: float | None = None) -> Message:
        message = self._call(self._client.get, timeout)
        message._confirm = None  # blocking code confirms with SyncClient.confirm(seq)
        return message

    def confirm(
        self, seq: int, confirm_value: int = 0, force_j: ForceJrn = ForceJrn.DEFAULT_JRN
    ) -> None:
        self._call(self._client.confirm, seq, confirm_value, force_j)

    def status(self) -> dict:
        return self._call(self._client.status)

    def __iter__(self) -> Iterator[Message]:
        while True:
            yield self.get()

    def close(self) -> None:
        if self._thread.is_alive() and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            self._thread.join()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def connect_sync(address: str, queue: str | Address, *, program: str = "mrs-client") -> SyncClient:
    """Connect and attach, blocking. Use as a context manager or call close()."""
    return SyncClient(address, queue, program)
