"""Dialing for the client: open a stream, handshake and attach, and reconnect with
backoff after a drop (or give up, and leave the client broken).

`Dialer` is the part of `Client` (clients.connection) that does this. It writes what
the server said of itself and of the attached queue into the client's `Attachment`,
asks the request table for ids and records there why the client gave up, and hands
each new connection to the loops that serve it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import trio

from clients.errors import ConnectionLost, MrsError, error_for
from clients.link import _Link, _next_event
from clients.reconnect import PASSING_REFUSALS
from clients.saf_journal import JournalMismatch
from clients.tls import tls_refusal
from mrs import protocol as wire
from mrs.config.addresses import host_problem
from mrs.limits import (
    CLIENT_FRAME_BYTES_MAX,
    CONFIG_MESSAGE_BYTES_MAX,
    GROUP_ID_MAX,
    GROUP_ID_MIN,
    LINK_FRAME_OVERHEAD_BYTES,
    QUEUE_ID_MAX,
    QUEUE_ID_MIN,
)
from mrs.model import Address, Status
from mrs.protocol.errors import RemoteProtocolError
from mrs.transport.dial_reason import NOTHING_LISTENS, dial_reason

if TYPE_CHECKING:
    from clients.journal_status import JournalStatus
    from clients.pending import Requests
    from clients.reconnect import Reconnect


@dataclass(slots=True)
class Attachment:
    """What the server's Welcome and Attached said: the group, its body limit, and
    the queue this client is attached to (read by the client and its SAF drain)."""

    group_id: int = 0
    group_name: str = ""
    message_bytes_max: int = 0
    """The server's body limit, from its Welcome (0 = unknown)."""
    queue: Address | None = None


class _PassedOver(Exception):
    """One server of the list could not be dialled or did not answer the handshake as
    MRS: the next one is tried."""

    dial_failed = False
    """The dial itself failed: the message does not name the address."""
    refused = False
    """Its dial was refused: nothing listens at that address."""


START_ADVICE = "is the group's server running? (start it with `mrs serve`)"
"""Said once after the reasons when a dial was refused: the newcomer's first mistake
is a program started before its group, or given the wrong port."""


def dial_problem(error: BaseException) -> str:
    """Why a dial failed, in words: the OS error's meaning, not trio's wrapper.

    Why: trio's error says only that every attempt failed ("all attempts to connect
    to H:P failed"), the reason (refused, unreachable, an unknown host) in the
    exception group under it; an application's traceback ended on that line, where
    `mrs status` for the same address said "connection refused: nothing listens
    there; is it running?" (mrs.transport.dial_reason)."""
    return dial_reason(error) or str(error) or "no answer in time"


class Server(Protocol):
    """What runs a connection once it is open (clients.link.LinkLoops)."""

    async def serve(self, link: _Link) -> None: ...


@dataclass(slots=True)
class Dialing:
    """How to reach and attach: the client's options, as `connect` gave them."""

    address: str
    queue_text: str | None
    program: str
    connect_timeout_s: float
    open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]]
    reconnect: Reconnect | None
    journal_id: str = ""
    """The client SAF journal's id ("" without one): said in the Hello, which asks
    the group for its journals' incarnation in the Welcome."""
    check_home: Callable[[int, bytes], None] | None = None
    """With a journal: given each Welcome's group id and incarnation before anything
    is sent; raises JournalMismatch for a group that is not the journal's home
    (clients.saf_journal.ClientJournal.check_home)."""


class Dialer:
    """A client's dial, handshake, attach and reconnect loop."""

    def __init__(
        self,
        dialing: Dialing,
        requests: Requests,
        status: JournalStatus,
        attachment: Attachment,
        server: Server,
    ) -> None:
        self.address = dialing.address
        self._servers = [_split_address(one) for one in dialing.address.split(",")]
        """A replicated group's instances (comma-separated): tried in turn from the
        one that answered last, since only the active listens (docs/replication.md)."""
        self._queue_text = dialing.queue_text
        self._program = dialing.program
        self._connect_timeout_s = dialing.connect_timeout_s
        self._open_stream = dialing.open_stream
        self._reconnect = dialing.reconnect
        self._journal_id = dialing.journal_id
        self._check_home = dialing.check_home
        self._requests = requests
        self._status = status
        self._attachment = attachment
        self._server = server
        self.reconnects = 0

    async def open(self) -> _Link:
        """Dial, handshake and attach, trying the servers in turn from the one that
        answered last. ConnectionLost if none would; MrsError if one refused (its
        answer: a missing queue or a wrong password is the same on every instance).

        Why the handshake is tried per server too, not only the dial: an address of
        the list that takes the connection and does not answer as MRS (another
        program on a reused port, a paused process) ended the whole connect after
        `connect_timeout_s` while the active listened at the next address (found by
        a probe: etcd's port first in the list)."""
        problems = []
        why: BaseException | None = None
        refused = False
        for _attempt in range(len(self._servers)):
            host, port = self._servers[0]
            try:
                return await self._open_one(host, port)
            except _PassedOver as passed:
                several = len(self._servers) > 1 and passed.dial_failed
                problems.append(f"{host}:{port}: {passed}" if several else str(passed))
                refused = refused or passed.refused
                why = passed.__cause__  # the OS error: `mrs status` words it
                self._servers.append(self._servers.pop(0))
        advice = f"; {START_ADVICE}" if refused else ""
        raise ConnectionLost(
            Status.LINK_DOWN, f"cannot connect to {self.address}: {'; '.join(problems)}{advice}"
        ) from why

    async def open_first(self, *, wait_for_active: bool) -> _Link:
        """`connect`'s first link. With `wait_for_active`, a replicated group's
        instances (several addresses) and reconnecting on, it keeps trying them with
        the reconnect backoff for `connect_timeout_s` while none answers.

        Why: only the active listens, and a failover leaves none listening for the
        lease's TTL and a second (3-6 s): an application started then was refused
        at once (LINK_DOWN) where one started a moment earlier would have waited
        for the new active. A wrong address still fails, `connect_timeout_s` later.
        One address, or reconnecting off: one round, as before."""
        if not wait_for_active or len(self._servers) < 2 or self._reconnect is None:
            return await self.open()
        give_up_s = trio.current_time() + self._connect_timeout_s
        delays = self._reconnect.delays()
        while True:
            try:
                return await self.open()
            except ConnectionLost:
                delay_s = next(delays, None)
                if delay_s is None or trio.current_time() + delay_s > give_up_s:
                    raise
                await trio.sleep(delay_s)

    async def _open_one(self, host: str, port: int) -> _Link:
        try:
            with trio.fail_after(self._connect_timeout_s):
                stream = await self._open_stream(host, port)
        except (OSError, trio.TooSlowError) as error:
            passed = _PassedOver(dial_problem(error))
            passed.dial_failed, passed.refused = True, str(passed) == NOTHING_LISTENS
            raise passed from error
        link = _Link(stream, wire.Connection("client", frame_bytes_max=CLIENT_FRAME_BYTES_MAX))
        try:
            with trio.fail_after(self._connect_timeout_s):
                await self._handshake(link)
        except (
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            OSError,
            trio.TooSlowError,
            RemoteProtocolError,
            ConnectionLost,
        ) as error:
            await trio.aclose_forcefully(stream)
            if (refused := tls_refusal(error, f"{host}:{port}")) is not None:
                raise refused from None
            raise _PassedOver(
                f"handshake with {host}:{port} failed: {str(error) or 'no answer in time'}"
            ) from error
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return link

    async def _handshake(self, link: _Link) -> None:
        # answer_batches: this client reads AnswerBatch frames (clients.pending.Requests.dispatch)
        # With a SAF journal the Hello says its id (`incarnation`), and a group of this
        # release answers with its journals' incarnation; without one it keeps the
        # shape servers of releases before the link incarnation read.
        said = self._journal_id.encode()
        hello = wire.Hello(wire.PROTOCOL_VERSION, self._program, "app", 0, True, said)
        await link.send_now(hello)
        welcome = await _next_event(link)
        if isinstance(welcome, wire.Fatal):
            raise error_for(welcome.status, welcome.message)
        if not isinstance(welcome, wire.Welcome):
            raise _unexpected("Hello", welcome)
        if not GROUP_ID_MIN <= welcome.group_id <= GROUP_ID_MAX:
            raise RemoteProtocolError(
                f"the server answered Hello as group {welcome.group_id}, no group id "
                f"({GROUP_ID_MIN}..{GROUP_ID_MAX})"
            )
        attachment = self._attachment
        if attachment.group_id and welcome.group_id != attachment.group_id:
            # Another group's server at one of the addresses (a wrong bus file, a port
            # reused): attaching there moved the client to that group's queue of the
            # same name, silently, and its re-sent puts to a group that never saw
            # their idempotency keys. Passed over, as an instance that is not up.
            raise ConnectionLost(
                Status.LINK_DOWN,
                f"it is group {welcome.group_id} ({welcome.group_name}), not group "
                f"{attachment.group_id} ({attachment.group_name}) this client is attached to",
            )
        if self._check_home is not None:  # JournalMismatch: nothing sent, nothing changed
            self._check_home(welcome.group_id, welcome.incarnation)
        attachment.group_id, attachment.group_name = welcome.group_id, welcome.group_name
        # A limit below 1 says nothing (0 = not stated): a broken server's negative one
        # made every put MSGTOOBIG ("exceeds the group's message_bytes_max -5").
        attachment.message_bytes_max = max(0, welcome.message_bytes_max)
        link.connection.frame_bytes_max = frame_bytes_max_for(attachment.message_bytes_max)
        if self._queue_text is None:
            return
        attach = wire.Attach(self._requests.next_id(), self._queue_text)
        await link.send_now(attach)
        attached = await _next_event(link)
        if isinstance(attached, wire.Failure | wire.Fatal):
            raise error_for(attached.status, attached.message)
        if not isinstance(attached, wire.Attached):
            raise _unexpected("Attach", attached)
        if not _is_queue_address(attached.group, attached.queue):
            # A broken or hostile server: before, "-1.1000000" became the queue this
            # client is attached to (its MRS_ACKs' and SAF drain's resp_q, `pending`'s own).
            raise RemoteProtocolError(
                f"the server answered Attach with {attached.group}.{attached.queue}, no "
                f"queue address (groups {GROUP_ID_MIN}..{GROUP_ID_MAX}, queues "
                f"{QUEUE_ID_MIN}..{QUEUE_ID_MAX})"
            )
        attachment.queue = Address(attached.group, attached.queue)

    async def run(self, link: _Link | None) -> None:
        """Serve the connection; when it drops, reconnect with backoff (if enabled)."""
        while True:
            if link is not None:
                await self._server.serve(link)
                if link.went_silent:  # a paused or cut-off active: the others first
                    self._servers.append(self._servers.pop(0))
            if self._requests.broken is not None:  # ended by the server NOTAUTHORIZED (`_lose`)
                self._status.wake()
                return
            if self._reconnect is None:
                self._requests.broken = ConnectionLost(
                    Status.LINK_DOWN, f"connection to {self.address} lost (reconnect is off)"
                )
                self._status.wake()
                return
            link = await self._reconnect_once(self._reconnect)
            if link is None:
                return

    async def _reconnect_once(self, reconnect: Reconnect) -> _Link | None:
        attempts = 0
        for delay_s in reconnect.delays():
            await trio.sleep(delay_s)
            attempts += 1
            try:
                link = await self.open()
            except ConnectionLost:
                continue
            except JournalMismatch as mismatch:  # JOURNAL_FAIL, but no wait heals it
                self._requests.broken = mismatch
                self._status.fail(str(mismatch))
                return None
            except MrsError as refused:
                if refused.status in PASSING_REFUSALS:
                    continue  # e.g. QUEUE_BUSY: our old connection is not yet noticed closed
                self._requests.broken = refused
                self._status.wake()
                return None
            self.reconnects += 1
            return link
        self._requests.broken = ConnectionLost(
            Status.LINK_DOWN, f"gave up reconnecting to {self.address} after {attempts} attempts"
        )
        self._status.wake()
        return None


def _is_queue_address(group: int, queue: int) -> bool:
    """Whether (group, queue) is an address a bus file can give (mrs.limits)."""
    return GROUP_ID_MIN <= group <= GROUP_ID_MAX and QUEUE_ID_MIN <= queue <= QUEUE_ID_MAX


def _unexpected(request: str, answer: object) -> ConnectionLost:
    """A handshake answered with another event than its own: this server is passed
    over (and dialled again later) instead of the client failing on a missing field."""
    return ConnectionLost(
        Status.LINK_DOWN, f"the server answered {request} with {type(answer).__name__}"
    )


_PORT = re.compile(r"[0-9]{1,5}")
"""A port as an address spells it: ASCII digits, at most five."""


def _split_address(address: str) -> tuple[str, int]:
    """(host, port) of one HOST:PORT, or BADPARAM before anything is dialed.

    Why the port's range and a URL's scheme are refused here: `127.0.0.1:70011` (a
    digit too many) was dialed and told "connection refused: nothing listens there;
    is the group's server running?", and `http://HOST:PORT` "cannot resolve the host
    name": a typo read as a server that is down. A port of thousands of digits, or of
    digits `int()` does not take (`7²`), raised a bare ValueError from the client.
    Port 0 stays: the in-process bus (`mrs.testing`) is reached at the `listen` of
    its bus file, an ephemeral port's "HOST:0"."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not _PORT.fullmatch(port) or not int(port) < 1 << 16:
        raise error_for(
            Status.BADPARAM,
            "server address must be HOST:PORT (a port up to 65535, no URL scheme), "
            f"got {address!r}",
        )
    host = host.strip("[]")
    if (problem := host_problem(host)) is not None:  # the socket's UnicodeError otherwise
        raise error_for(Status.BADPARAM, f"server address {address!r}: {problem}")
    return host, int(port)


def frame_bytes_max_for(message_bytes_max: int) -> int:
    """The largest frame a client takes from and sends to a group whose Welcome said
    `message_bytes_max`: CLIENT_FRAME_BYTES_MAX, or that message with the room every
    frame carrying one has around its body (as the group's own bound), whichever is
    larger. Why: a group may take messages up to 1 GiB (`CONFIG_MESSAGE_BYTES_MAX`),
    but a put of one over 64 MiB was refused by the client itself with PROTOCOL_ERROR
    ("Put frame ... exceeds frame_bytes_max 67108864"), and a delivery of one would
    have ended the connection."""
    carried = min(message_bytes_max, CONFIG_MESSAGE_BYTES_MAX) + LINK_FRAME_OVERHEAD_BYTES
    return max(CLIENT_FRAME_BYTES_MAX, carried)
