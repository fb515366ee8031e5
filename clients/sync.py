"""`connect_sync`: the same client, blocking, for scripts and REPLs.

A background thread runs trio and owns the connection; each blocking call hands its
coroutine to that thread with `trio.from_thread.run` and waits for the answer. A
call interrupted in the caller's thread (KeyboardInterrupt) is cancelled in the trio
thread too, so an interrupted get is withdrawn on the server and takes no message;
one whose message had already come (the interrupt landed while it was handed over)
keeps it for the next get, in order -- unless the connection it came on was lost
since: a recoverable message then comes again from the server (POSSDUPL), as the
async client's held messages do (clients.pending.Requests.lose).

Any thread may call it (calls from several run at once); a process forked after the
connect has no such thread, so its calls are refused; a client dropped without
close() is closed when it is collected (`_Life`).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import trio

from clients.batch import PutItem
from clients.connecting import connect
from clients.connection import Client, JournalEvent
from clients.journal_reader import JournalRecord
from clients.journal_remote import PcjState, RemoteJournalReader
from clients.journal_status import RefusedRecord
from clients.requests import built
from clients.saf_journal import REFUSED_LISTED_DEFAULT
from clients.selective import take_held
from mrs import protocol as wire
from mrs.core.selection import Selection
from mrs.errors import BadParameter, ConnectionLost, MrsError, ReplyTimeout
from mrs.limits import CLIENT_CLOSE_WAIT_S, GIVE_BACK_WAIT_S
from mrs.model import Address, ForceJrn, Message, Psb, Status


@dataclass(slots=True)
class _Call:
    """One blocking call's state, read and written in the trio thread only."""

    scope: trio.CancelScope | None = None
    abandoned: bool = False
    """The caller was interrupted: it will not read the result."""
    result: object = None
    has_result: bool = False
    """The result is on its way to the caller (taken back if it is abandoned)."""
    reconnects: int = 0
    """`Client.reconnects` when the result came: the connection its messages came on."""


@dataclass(slots=True)
class SyncMessage(Message):
    """A message from a `SyncClient`: `confirm()` blocks until the server answered."""

    def confirm(  # type: ignore[override] - blocking twin of Message.confirm
        self,
        confirm_value: int = 0,
        force_j: ForceJrn = ForceJrn.DEFAULT_JRN,
        *,
        timeout: float | None = None,
    ) -> None:
        if self._confirm is None:
            raise ValueError("this message was not received through a client connection")
        self._confirm(self.seq, confirm_value=confirm_value, force_j=force_j, timeout=timeout)


_MESSAGE_FIELDS = tuple(f.name for f in fields(Message))


@dataclass(eq=False)
class SyncJournalReader:
    """A `RemoteJournalReader` read with `for`: each page is asked in the client's
    thread; `close()` or `with`."""

    _sync: SyncClient
    _reader: RemoteJournalReader

    @property
    def corrupt(self) -> list[str]:
        return self._reader.corrupt

    def read_page(self) -> list[JournalRecord]:
        """The next records: those read and not handed out yet, else the next page."""
        reader = self._reader
        if not reader.unread:
            self._sync._call(reader.fill)
        return [reader.take() for _ in range(reader.unread)]

    def __iter__(self) -> Iterator[JournalRecord]:
        # Each page is read into the reader in the client's thread and taken from it
        # here, one record at a time: a loop stopped part way (a `break`, Ctrl-C) and
        # iterated again goes on with the next record, not the next page.
        reader = self._reader
        while reader.unread or self._sync._call(reader.fill):
            yield reader.take()

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> SyncJournalReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Life:
    """The client's trio thread and what it shares with the caller's threads.

    The thread runs `run` of this object, which holds no reference to its SyncClient:
    a client dropped without close() is collected, and its finalizer closes it
    (`dropped`). Before, the thread's target was the SyncClient's own method, so a
    dropped client was never collected: its thread, connection and attach lived for
    the rest of the process, and every later attach to its queue met QUEUE_BUSY."""

    def __init__(self, address: str, queue: str | int | Address | None, options: dict) -> None:
        self.args = (address, queue, options)
        self.pid = os.getpid()
        """The process that connected: a forked child has a copy of this object but
        not the thread (`forked`)."""
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.client: Client | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self.stop: trio.Event | None = None
        self.opening: trio.CancelScope | None = None
        """Around the client's whole life in its thread: cancelled to give it up."""
        self.abandoned = False
        """`SyncClient.__init__` was interrupted: the thread must not keep a client
        nobody can close."""
        self.closing = False
        """close() was called: later calls are refused at once ("client closed"), also
        while a close made in the client's own thread (a journal listener) is still
        ending it (`close`)."""
        self.ended = threading.Event()
        """The trio thread has finished (set by `run` as it ends). Read in place of
        `Thread.is_alive()`: on Python < 3.13 a KeyboardInterrupt landing inside
        `is_alive()` or `join()` marks a thread that still runs as stopped (its
        `_wait_for_tstate_lock` releases the live thread's lock), and every later call
        raised ConnectionLost("client closed") while the client ran on in its thread,
        still attached, and `close()` left it so."""
        self.thread = threading.Thread(target=self.run, name="mrs-client", daemon=True)

    def forked(self) -> bool:
        """This is a child process forked after the connect: the client's thread and
        its trio run are not here (fork copies only the thread that called it)."""
        return os.getpid() != self.pid

    def run(self) -> None:
        try:
            trio.run(self.main)
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            if not self.ready.is_set():
                self.error = error
        finally:
            self.ended.set()
            self.ready.set()

    async def main(self) -> None:
        address, queue, options = self.args
        self.stop = trio.Event()
        with trio.CancelScope() as self.opening:
            self.token = trio.lowlevel.current_trio_token()
            if self.abandoned:  # interrupted before the token was there to cancel with
                return
            async with connect(address, queue, **options) as client:
                self.client = client
                self.ready.set()
                await self.stop.wait()

    def give_up_opening(self) -> None:
        """`SyncClient.__init__` was interrupted: close the client in its thread (or
        stop it attaching) and wait a moment for that, so the queue is free for the
        next attach. Before, the thread attached anyway and held the queue for the
        rest of the process, with no object left to close it: every retry met
        QUEUE_BUSY. (`main` reads `abandoned` after it sets `token`, and this reads
        `token` after it sets `abandoned`: one of the two sees the other.)"""
        self.abandoned = True
        if self.token is not None and self.opening is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self.opening.cancel, trio_token=self.token)
        self.ended.wait(CLIENT_CLOSE_WAIT_S + GIVE_BACK_WAIT_S)

    def close(self, wait_s: float | None = None) -> None:
        """Detach and stop the thread; wait for it (at most `wait_s`), unless called
        in the client's own thread (a journal listener): it ends once that returns.
        Before, a close made there waited for the thread it blocked, for ever. In a
        forked child, nothing: the connection is the parent's."""
        if self.forked() or self.ended.is_set() or self.stop is None or self.token is None:
            return
        self.closing = True
        with contextlib.suppress(trio.RunFinishedError):  # another thread closed it
            self.token.run_sync_soon(self.stop.set)
        if threading.current_thread() is not self.thread:
            self.ended.wait(wait_s)

    def dropped(self) -> None:
        """The SyncClient was collected, or the interpreter exits, without close():
        close it now, with a ResourceWarning as an unclosed file gives, so what it
        holds is given back and its queue is free for the next attach."""
        if self.forked() or self.ended.is_set():
            return
        queue = self.client.queue if self.client is not None else None
        warnings.warn(
            f"connect_sync client of queue {queue} was not closed: closing it now",
            ResourceWarning,
            stacklevel=1,
        )
        self.close(CLIENT_CLOSE_WAIT_S + GIVE_BACK_WAIT_S)


class SyncClient:
    """Blocking twin of `Client`: put, get, confirm, status, iteration.

    One client may be shared by any number of threads: each call is handed to the
    client's trio thread, so calls from several threads run at once on its one
    connection, as tasks share an async Client."""

    def __init__(self, address: str, queue: str | int | Address | None, options: dict) -> None:
        life = self._life = _Life(address, queue, options)
        self._given_back: deque[Message] = deque()
        """Messages an interrupted call had got (`_call`) on a client with protection
        (opened already; without protection the client holds them: `_give_back`): the
        next gets return them. Read and written in the trio thread only
        (`_give_back`, `_next_messages`)."""
        self._given_back_reconnects = 0
        """`Client.reconnects` when they were given back: the connection they came on."""
        try:
            life.thread.start()  # waits for the thread, which may be dialing already
            life.ready.wait()
        except BaseException:  # Ctrl-C while it connects: no client object is returned
            life.give_up_opening()
            raise
        if life.error is not None:
            life.ended.wait()
            raise life.error
        assert life.client is not None  # set before `ready` when no error
        self._client: Client = life.client
        weakref.finalize(self, life.dropped)  # dropped unclosed: closed (`_Life.dropped`)

    def _call(
        self,
        function: Callable[..., Any],
        *args: Any,
        convert: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """`function(*args, **kwargs)` run in the client's trio thread; its result
        (through `convert`, in the same guard). Interrupted here (KeyboardInterrupt),
        the call is cancelled there; messages it had already got, which the caller
        will not see, are kept for the next get (`_given_back`), whether the interrupt
        came before or after they arrived: the trio thread alone decides, so no
        message falls between the two threads."""
        life = self._life
        if life.forked():  # before: the call waited for a thread the child has not
            raise _forked(life.pid)
        if life.closing or life.ended.is_set():
            raise ConnectionLost(Status.LINK_DOWN, "client closed")
        if trio.lowlevel.in_trio_task():
            raise _called_from_trio()
        call = _Call()

        async def run() -> Any:
            with trio.CancelScope() as scope:
                call.scope = scope
                if call.abandoned:  # interrupted before it started
                    scope.cancel()
                result = await function(*args, **kwargs)
                if call.abandoned:
                    self._give_back(result, self._client.reconnects)
                    return None
                call.result, call.has_result = result, True
                call.reconnects = self._client.reconnects
                return result
            return None  # cancelled after an interrupt: nobody reads this

        try:
            result = trio.from_thread.run(run, trio_token=life.token)
            return result if convert is None else convert(result)
        except (trio.RunFinishedError, trio.Cancelled):  # another thread closed it meanwhile
            raise ConnectionLost(Status.LINK_DOWN, "client closed") from None
        except BaseException:
            if not life.ended.is_set():  # e.g. KeyboardInterrupt: stop it there
                with contextlib.suppress(trio.RunFinishedError):
                    trio.from_thread.run_sync(self._abandon, call, trio_token=life.token)
            raise

    def _abandon(self, call: _Call) -> None:
        """In the trio thread: the caller will not read `call`'s result."""
        call.abandoned = True
        if call.has_result:
            call.has_result = False
            self._give_back(call.result, call.reconnects)
        elif call.scope is not None:
            call.scope.cancel()

    def _give_back(self, result: object, reconnects: int) -> None:
        """In the trio thread: messages a caller did not see, first in line for its
        next get: held again by the client (`Client.hold_again`, `reconnects` naming
        the connection they came on), so a selective get on an implicit queue does
        not confirm them unseen and a close gives back the memory-only ones; with
        protection (opened already), kept here."""
        if isinstance(result, Message):
            messages = [result]
        elif isinstance(result, list):
            messages = [item for item in result if isinstance(item, Message)]
        else:
            return
        if self._client.protection is None:
            self._client.hold_again(messages, reconnects)
            return
        self._drop_stale()
        self._given_back.extendleft(reversed(messages))

    def _drop_stale(self) -> None:
        """Forget the given-back messages that need a confirm once the connection they
        came on is gone: the server delivers each again, marked POSSDUPL. Handed out,
        the old copy (marked CONFIRMREQ) was a second delivery without the mark, and
        its confirm failed BADSEQ (the async client drops its held ones the same way)."""
        client = self._client
        assert client is not None  # set before __init__ returns
        if client.reconnects != self._given_back_reconnects or not client.connected:
            kept = [message for message in self._given_back if not message.needs_confirm]
            self._given_back = deque(kept)
        self._given_back_reconnects = client.reconnects

    async def _next_messages(
        self, count_max: int | None, timeout: float | None, select: Selection | None
    ) -> Message | list[Message]:
        """In the trio thread: the messages given back first (up to count_max; None:
        one, as `get`), else the client's get or get_many. Taken here, not in the
        caller's thread, so two threads never take the same one, and the result goes
        back through `_call` like any other: an interrupt cannot lose it."""
        self._drop_stale()
        given_back = self._given_back
        if given_back and select is None:
            if count_max is None:
                return given_back.popleft()
            built(wire.GetBatch, 1, count_max, 0)  # a bad count refused, as Client.get_many does
            return [given_back.popleft() for _ in range(min(count_max, len(given_back)))]
        if given_back and isinstance(select, Selection):  # else refused by the client's get
            if count_max is not None:
                built(wire.GetBatch, 1, count_max, 0)
            # The ones it matches first, as the client's selective get takes its held
            # ones: before, it passed over them, and on an in-order queue the message it
            # returned could not be confirmed (BADSEQ: the given-back one came first).
            taken = take_held(given_back, select, 1 if count_max is None else count_max)
            if taken:
                return taken[0] if count_max is None else taken
        client = self._client
        assert client is not None  # set before __init__ returns
        if count_max is None:
            return await client.get(timeout, select)
        return await client.get_many(count_max, timeout, select)

    @property
    def queue(self) -> Address | None:
        return self._client.queue

    @property
    def attach_status(self) -> Status:
        return self._client.attach_status

    # The async client's plain facts, read as they are (ints and strs: no call into
    # the trio thread). Why: docs/client-library.md names `q.reconnects` beside
    # `q.connected`, and a blocking script that sized its body by `message_bytes_max`
    # (the limit +1 is MSGTOOBIG) met an AttributeError on each.
    @property
    def group_id(self) -> int:
        return self._client.group_id

    @property
    def group_name(self) -> str:
        return self._client.group_name

    @property
    def message_bytes_max(self) -> int:
        """The server's body limit, from its Welcome (0 = unknown)."""
        return self._client.message_bytes_max

    @property
    def reconnects(self) -> int:
        """Connections opened again after a drop."""
        return self._client.reconnects

    @property
    def resent_puts(self) -> int:
        """Puts re-sent under their idempotency keys after a failover (clients.resend)."""
        return self._client.resent_puts

    @property
    def journal_status(self) -> Status | None:
        return self._client.journal_status

    @property
    def journal_backlog(self) -> int:
        return self._client.journal_backlog

    def add_journal_listener(self, listener: Callable[[JournalEvent], None]) -> None:
        """`listener` runs in the client's trio thread: keep it short."""
        self._client.add_journal_listener(listener)

    @property
    def journal_refused(self) -> int:
        return self._client.journal_refused

    def refused_records(self, limit: int = REFUSED_LISTED_DEFAULT) -> list[RefusedRecord]:
        """`Client.refused_records`, read in the client's thread."""

        async def read() -> list[RefusedRecord]:
            return self._client.refused_records(limit)

        return self._call(read)

    def redrive_refused(self, seqs: Collection[int] | None = None) -> dict[int, int]:
        """`Client.redrive_refused`: {old client seq: new client seq}."""
        return self._call(self._client.redrive_refused, seqs)

    def discard_refused(self, seqs: Collection[int]) -> int:
        """`Client.discard_refused`: how many were dropped."""
        return self._call(self._client.discard_refused, seqs)

    def wait_journal_status(self, status: Status, timeout: float | None = None) -> None:
        """Block until journal_status is `status`; ReplyTimeout (a TimeoutError and an
        MrsError, status TIMEOUT) if `timeout` passes first."""
        wait_s = _wait_s(timeout, "wait_journal_status")

        async def wait() -> None:
            with trio.move_on_after(wait_s):
                return await self._client.wait_journal_status(status)
            raise _not_within(f"wait_journal_status: not {status.name}", wait_s)

        self._call(wait)

    @property
    def connected(self) -> bool:
        return not self._life.forked() and self._client.connected

    def wait_connected(self, timeout: float | None = None) -> None:
        """Block until the client is attached again after a drop (`Client.wait_connected`);
        raises ReplyTimeout (a TimeoutError and an MrsError, status TIMEOUT) if
        `timeout` passes first, the client's error if it gave up. Before, both waits
        raised trio's TooSlowError, neither a TimeoutError nor an MrsError."""
        client = self._client
        wait_s = _wait_s(timeout, "wait_connected")

        async def wait() -> None:
            with trio.move_on_after(wait_s):
                return await client.wait_connected()
            raise _not_within("wait_connected: not connected", wait_s)

        self._call(wait)

    def put(self, body: bytes, target: str | Address, **options: Any) -> Psb:
        return self._call(self._client.put, body, target, **options)

    def put_many(self, items: Sequence[PutItem]) -> list[Psb | MrsError]:
        return self._call(self._client.put_many, items)

    def get(self, timeout: float | None = None, select: Selection | None = None) -> SyncMessage:
        return self._call(self._next_messages, None, timeout, select, convert=self._sync_message)

    def _sync_message(self, message: Message) -> SyncMessage:
        values = {name: getattr(message, name) for name in _MESSAGE_FIELDS}
        values["_confirm"] = self.confirm
        return SyncMessage(**values)

    def get_many(
        self, count_max: int, timeout: float | None = None, select: Selection | None = None
    ) -> list[SyncMessage]:
        if type(count_max) is not int:  # None would be read as a get's (one message)
            built(wire.GetBatch, 1, count_max, 0)  # BADPARAM naming the field
        return self._call(
            self._next_messages, count_max, timeout, select, convert=self._sync_messages
        )

    def _sync_messages(self, messages: list[Message]) -> list[SyncMessage]:
        return [self._sync_message(message) for message in messages]

    def confirm(
        self,
        seq: int,
        confirm_value: int = 0,
        force_j: ForceJrn = ForceJrn.DEFAULT_JRN,
        *,
        timeout: float | None = None,
    ) -> None:
        """`Client.confirm`, blocking: at most `timeout` (None: the connection's
        `request_timeout_s`), then ReplyTimeout (the confirm may still be recorded)."""
        self._call(self._client.confirm, seq, confirm_value, force_j, timeout=timeout)

    def confirm_many(
        self,
        seqs: Sequence[int],
        force_j: ForceJrn = ForceJrn.DEFAULT_JRN,
        *,
        confirm_values: Sequence[int] | None = None,
        timeout: float | None = None,
    ) -> list[MrsError | None]:
        return self._call(
            self._client.confirm_many,
            seqs,
            force_j,
            confirm_values=confirm_values,
            timeout=timeout,
        )

    def status(self, *, timeout: float | None = None) -> dict:
        return self._call(self._client.status, timeout=timeout)

    def admin(self, action: str, **args: object) -> dict:
        """An operator's action on the group (`Client.admin`)."""
        return self._call(self._client.admin, action, **args)

    def locate(self, name: str | Address, *, timeout: float | None = None) -> Address:
        """The queue's address by its name (`Client.locate`)."""
        return self._call(self._client.locate, name, timeout=timeout)

    def pending(
        self, queues: Sequence[str | Address], *, timeout: float | None = None
    ) -> list[int]:
        """Messages waiting on each queue, in order (`Client.pending`): the attached
        queue's count includes the messages kept from an interrupted get, which the
        next get returns (before, they were left out, as if already taken)."""
        return self._call(self._pending, queues, timeout)

    async def _pending(self, queues: Sequence[str | Address], timeout: float | None) -> list[int]:
        """In the trio thread, where `_given_back` is kept."""
        client = self._client
        assert client is not None  # set before __init__ returns
        self._drop_stale()
        return await client.pending(queues, kept=len(self._given_back), timeout=timeout)

    def set_pcj(self, default: bool | ForceJrn | None = None, roll: bool = False) -> PcjState:
        """MRS_SET_PCJ (`Client.set_pcj`)."""
        return self._call(self._client.set_pcj, default, roll)

    def open_journal(self, journal: str = "pcj", **selection: Any) -> SyncJournalReader:
        """The group's PCJ or DLJ over the wire (`Client.open_journal`), blocking."""
        return SyncJournalReader(self, self._client.open_journal(journal, **selection))

    def __iter__(self) -> Iterator[SyncMessage]:
        while True:
            yield self.get()

    def close(self) -> None:
        """Detach and stop the client's thread; from any thread, also from inside a
        trio task (where `trio.from_thread` refuses to run: the close raised
        RuntimeError and left the queue attached for the rest of the process), and
        from a journal listener (`_Life.close`). Again: nothing. In a process forked
        after the connect: nothing (the connection is the parent's)."""
        self._life.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _called_from_trio() -> BadParameter:
    """The refusal of a blocking call made inside a trio task: it would block that
    task's whole event loop, and `trio.from_thread` refuses it with a RuntimeError
    that named no way out."""
    return BadParameter(
        Status.BADPARAM,
        "connect_sync's client blocks: inside a trio task use `async with "
        "clients.connect(...)`, or call it through trio.to_thread.run_sync",
    )


def _forked(pid: int) -> BadParameter:
    """The refusal of a call in a process forked after the connect: the client's
    thread and connection stayed in the parent, so the call waited for ever."""
    return BadParameter(
        Status.BADPARAM,
        f"this connect_sync client belongs to process {pid}, which forked this one: "
        "connect again in this process (its close() here does nothing)",
    )


def _not_within(what: str, wait_s: float) -> ReplyTimeout:
    return ReplyTimeout(Status.TIMEOUT, f"{what} within {wait_s:g} s")


def _wait_s(timeout: Any, what: str) -> float:
    """A blocking wait's timeout in seconds (None: no bound); BADPARAM for what is no
    length of time. Before, "5" or -1 reached trio and raised its bare TypeError or
    ValueError from inside the client's thread."""
    if timeout is None:
        return math.inf
    if type(timeout) not in (int, float) or not 0 <= timeout <= math.inf:
        raise BadParameter(
            Status.BADPARAM, f"{what}: timeout must be a number of seconds >= 0, got {timeout!r}"
        )
    return float(timeout)


def connect_sync(
    address: str, queue: str | int | Address | None, *, program: str = "mrs-client", **options: Any
) -> SyncClient:
    """Connect and attach, blocking. Use as a context manager or call close().

    Takes the same options as `connect` (reconnect, saf_journal, ...)."""
    return SyncClient(address, queue, {"program": program, **options})
