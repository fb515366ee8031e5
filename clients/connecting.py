"""`connect`: the async context manager that opens a `Client`, runs its background
tasks (connection loops, reconnects, the SAF journal writer) and closes it."""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from clients.auth import ClientCredentials, authenticating_opener, default_credentials
from clients.connection import Client
from clients.errors import BadParameter, ConnectionLost, MrsError, QueueBusy, ReplyTimeout
from clients.lookup import queue_text
from clients.protection import Protection
from clients.reconnect import PASSING_REFUSALS, Reconnect
from clients.saf_drain import IDEMPOTENCY_HEADER
from clients.saf_journal import ClientJournal, JournalMismatch
from clients.tls import default_tls, tls_opener
from mrs.limits import (
    CLIENT_REQUEST_WAIT_S_DEFAULT,
    CLIENT_SAF_BYTES_MAX_DEFAULT,
    CLIENT_SAF_MESSAGES_MAX_DEFAULT,
    HEARTBEAT_S_DEFAULT,
    HEARTBEAT_S_INSTANCES_DEFAULT,
    PUT_ONCE_BUSY_RETRY_S,
    READ_AHEAD_MAX,
)
from mrs.model import Address, Psb, Status

if TYPE_CHECKING:
    from clients.link import _Link

RECONNECT_DEFAULT = Reconnect()


@asynccontextmanager
async def connect(
    address: str | Sequence[str],
    queue: str | int | Address | None,
    *,
    program: str = "mrs-client",
    connect_timeout_s: float = 10.0,
    open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] | None = None,
    reconnect: Reconnect | None = RECONNECT_DEFAULT,
    saf_journal: str | Path | None = None,
    saf_messages_max: int = CLIENT_SAF_MESSAGES_MAX_DEFAULT,
    saf_bytes_max: int = CLIENT_SAF_BYTES_MAX_DEFAULT,
    heartbeat_s: float | None = HEARTBEAT_S_DEFAULT,
    protection: Protection | None = None,
    tls: ssl.SSLContext | None = None,
    tls_server_name: str | None = None,
    credentials: ClientCredentials | None = None,
    read_ahead_max: int = READ_AHEAD_MAX,
    request_timeout_s: float = CLIENT_REQUEST_WAIT_S_DEFAULT,
) -> AsyncIterator[Client]:
    """Connect to a group server and attach to `queue` (e.g. "1.10" or "ORDERS").

    address: HOST:PORT, or a replicated group's instance addresses (a list, or
    "H1:P1,H2:P2,H3:P3"; `instance_addresses` reads them from the bus config): tried in
    turn on connect and on every reconnect, so the client follows the active.

    queue=None connects without attaching (enough for `status()`).
    reconnect: the backoff policy for reconnecting after a drop; None switches it off
    (the client then stays broken once its connection is lost).
    saf_journal: a directory for the client-side SAF journal (off by default). With
    it, attach succeeds while the server is unreachable (attach_status JOURNAL_ON)
    and recoverable puts are journaled there until the server is back; one process
    at a time may own a journal. saf_messages_max / saf_bytes_max cap it
    (JOURNAL_FULL, then the put's UMA: DISC/DISCL discard, others raise).
    heartbeat_s: ping a server quiet for this long; after 3 silent intervals the
    connection counts as lost (reconnect, JOURNAL_ON). None: never ping. Given
    several addresses, the default is 2 s (HEARTBEAT_S_INSTANCES_DEFAULT): an active that
    stops answering without closing (paused) is passed over within seconds.
    protection: a clients.protection.Protection (identity + policies): puts to
    protected queues are signed/encrypted and gets verified/decrypted in this process.
    tls: a context from `clients.tls_context(ca, cert, key)` for a group with
    [group.tls]; the server is verified as tls_server_name (default: the host).
    Without it, the process default (set by the `mrs` command from MRS_TLS_*), if any.
    credentials: a name and password for a group with auth on (clients.auth); without
    them, the process default (set by the `mrs` command from MRS_AUTH_*), if any.
    request_timeout_s: how long confirm, confirm_many, status, locate and pending
    wait for their answer when not given a `timeout=` of their own (60 s), then
    ReplyTimeout (clients.answer_waits); a finite number of seconds > 0.
    read_ahead_max: memory-only messages (MRS_ACKs, NN) a waiting get may bring
    beyond its own, held for the next gets (0..READ_AHEAD_MAX, docs/client-library.md
    "Read-ahead"); 0 switches read-ahead off, so a message of higher priority that
    arrives later is got before the ones behind it.

    Long because the signature and this docstring name every option; the body is
    four steps: the stream opener, the journal, the first link, the background tasks.
    """
    address = _address_text(address)
    queue = _queue_of(queue)
    if type(program) is not str:
        raise BadParameter(Status.BADPARAM, f"connect: program must be a str, got {program!r}")
    _check_options(
        reconnect=(reconnect, Reconnect),
        tls=(tls, ssl.SSLContext),
        tls_server_name=(tls_server_name, str),
        credentials=(credentials, ClientCredentials),
        protection=(protection, Protection),
    )
    _check_seconds("connect_timeout_s", connect_timeout_s, required=True)
    _check_seconds("heartbeat_s", heartbeat_s, required=False)
    _check_seconds("request_timeout_s", request_timeout_s, required=True)
    _check_read_ahead(read_ahead_max)
    if heartbeat_s == HEARTBEAT_S_DEFAULT and "," in address:
        heartbeat_s = HEARTBEAT_S_INSTANCES_DEFAULT  # a paused active passed over in seconds
    tls = tls if tls is not None else default_tls()
    if tls is not None and open_stream is None:
        open_stream = tls_opener(tls, tls_server_name)
    credentials = credentials or default_credentials()
    if credentials is not None:
        open_stream = authenticating_opener(credentials, open_stream)
    journal = (
        ClientJournal(saf_journal, messages_max=saf_messages_max, bytes_max=saf_bytes_max)
        if saf_journal is not None
        else None
    )
    try:
        client = Client(
            address,
            queue,
            program,
            reconnect=reconnect,
            connect_timeout_s=connect_timeout_s,
            open_stream=open_stream,
            journal=journal,
            heartbeat_s=heartbeat_s,
            protection=protection,
            read_ahead_max=read_ahead_max,
            request_timeout_s=float(request_timeout_s),
        )
        link = await _first_link(client, journal)
        if journal is not None:
            client.attach_status = Status.SUCCESS if link is not None else Status.JOURNAL_ON
        try:
            async with trio.open_nursery() as nursery:
                if journal is not None:
                    nursery.start_soon(journal.run_writer)
                # usable as soon as connect returns; a journal starts JOURNAL_ON
                client.lifetime.install(link, None if journal is None else Status.JOURNAL_ON)
                nursery.start_soon(client.lifetime.run, link)
                try:
                    yield client
                finally:
                    await client.lifetime.give_back_held()  # shielded, bounded
                    client.lifetime.stop()
                    nursery.cancel_scope.cancel()
                    client.closed()
        except BaseExceptionGroup as group:
            raise _single(group) from None
    finally:
        if journal is not None:
            journal.close()


async def _first_link(client: Client, journal: ClientJournal | None) -> _Link | None:
    """The first connection, or None when the server is unreachable (or still holds a
    killed predecessor's connection: QUEUE_BUSY) and a journal lets the client attach
    now and keep dialing in the background. Without a journal, a replicated group's
    client waits for an active within `connect_timeout_s` (`Dialer.open_first`)."""
    try:
        return await client.lifetime.open(wait_for_active=journal is None)
    except ConnectionLost:
        if journal is None:
            raise
        return None
    except JournalMismatch:  # JOURNAL_FAIL, but no wait heals it: the journal is refused
        raise
    except MrsError as refused:
        # A refusal that heals by waiting (QUEUE_BUSY: a killed predecessor's connection
        # is not yet reaped; EXCEEDQUOTA: the server's admission bound): the journal
        # lets us attach now and retry in the background.
        if journal is None or refused.status not in PASSING_REFUSALS:
            raise
        return None


async def put_once(
    client: Client, body: bytes, target: str | Address, key: str, *, within_s: float = 60.0, **put
) -> Psb:
    """A put stored exactly once however often the connection drops before its answer
    (a failover of a replicated group): it carries the idempotency key `key`, and a put
    whose answer was lost (PutOutcomeUnknown) or that found no connection is re-sent
    under the same key once the client has reconnected (to whichever instance is
    active), until answered or `within_s` has passed. The group stores the first copy
    and answers a re-sent one with the first copy's seq (mrs.group.idempotency).

    A copy refused QUEUE_BUSY (an earlier one with this key is still being stored,
    and the group's copies waiting for theirs are at DEDUPE_WAITERS_MAX) is sent again
    after PUT_ONCE_BUSY_RETRY_S: that refusal is passing, and the next copy is
    answered with the stored one's seq.

    A client given several addresses (a replicated group) already re-sends its
    recoverable puts by itself (clients.resend), under keys it makes; `put_once` is
    still the way to choose the key (one the application can re-send under after a
    restart of its own) and to re-send on a single server's reconnect."""
    if type(within_s) not in (int, float) or not 0 <= within_s <= math.inf:
        raise BadParameter(  # trio's bare ValueError or TypeError before
            Status.BADPARAM,
            f"put_once: within_s must be a number of seconds >= 0, got {within_s!r}",
        )
    headers = {**(put.pop("headers", None) or {}), IDEMPOTENCY_HEADER: key}
    last: ConnectionLost | QueueBusy | None = None
    with trio.move_on_after(within_s):
        while True:
            try:
                return await client.put(body, target, headers=headers, **put)
            except ConnectionLost as lost:
                if lost.status != Status.LINK_DOWN:
                    raise
                last = lost
            except QueueBusy as busy:  # an earlier copy of this key is being stored
                last = busy
                await trio.sleep(PUT_ONCE_BUSY_RETRY_S)  # its commit answers the next copy
                continue
            await client.wait_connected()
    why = f": {last.message}" if last is not None else ""
    raise ReplyTimeout(
        Status.TIMEOUT,
        f"put_once {key!r}: not answered within {within_s:g} s{why}; the message may or "
        "may not be stored: put_once again with the same key stores it at most once",
    )


def _address_text(address: object) -> str:
    """`connect`'s address as one string ("H:P" or "H1:P1,H2:P2"); BADPARAM for what is
    neither a string nor a list of strings (before, an int raised a bare TypeError)."""
    if isinstance(address, str):
        return address
    if address is None:
        return ""
    if isinstance(address, list | tuple) and all(isinstance(one, str) for one in address):
        return ",".join(address)
    raise BadParameter(
        Status.BADPARAM,
        f"connect: address must be HOST:PORT or a list of them, got {address!r}",
    )


def _check_options(**options: tuple[object, type]) -> None:
    """Each of `connect`'s objects is None or of its type; BADPARAM naming the option.
    Why: `reconnect=5` was taken, and the first drop (a server restart, the moment the
    client must carry on) ended the application with a bare AttributeError from the
    background reconnect; a wrong `tls`, `credentials` or `protection` raised one too."""
    for name, (value, wanted) in options.items():
        if value is not None and not isinstance(value, wanted):
            raise BadParameter(
                Status.BADPARAM,
                f"connect: {name} must be None or a {wanted.__name__}, got {value!r}",
            )


def _check_seconds(name: str, value: object, *, required: bool) -> None:
    """A length of time `connect` takes: a number of seconds above 0 (None too, where
    it means "never"). BADPARAM otherwise: a heartbeat of 0 declared every connection
    lost at once and reconnected for ever; NaN failed deep inside trio."""
    if value is None and not required:
        return
    if type(value) not in (int, float) or not 0 < value < math.inf:  # type: ignore[operator]
        raise BadParameter(
            Status.BADPARAM, f"connect: {name} must be a number of seconds > 0, got {value!r}"
        )


def _queue_of(queue: object) -> str | Address | None:
    """The queue `connect` attaches to: None, an Address, a `G.Q` or a name (checked
    as a put's target is, `clients.lookup.queue_text`), or a queue number (an int, as
    MessageQ's pams_attach_q takes it). BADPARAM for anything else, before anything is
    dialed. Why: its `str()` was sent, so `10.0` was refused NOSUCHQUEUE "queue 0 out
    of range", b"1.10" as a group named "b'1", and True as a queue named 'True'."""
    if queue is None or isinstance(queue, Address):
        return queue
    if type(queue) is int:
        return str(queue)
    if isinstance(queue, str):
        return queue_text(queue, "connect")
    raise BadParameter(
        Status.BADPARAM,
        "connect: queue must be a str (G.Q or a name), a queue number or an Address, "
        f"got {type(queue).__name__} {queue!r:.40}",
    )


def _check_read_ahead(value: object) -> None:
    """`read_ahead_max` is a whole number 0..READ_AHEAD_MAX (what a GetBatch carries);
    BADPARAM otherwise, before anything is dialed."""
    if type(value) is not int or not 0 <= value <= READ_AHEAD_MAX:
        raise BadParameter(
            Status.BADPARAM,
            f"connect: read_ahead_max must be a whole number 0..{READ_AHEAD_MAX} "
            f"(0: no read-ahead), got {value!r}",
        )


def instance_addresses(config: str | Path, group: str | int) -> list[str]:
    """The client addresses of a group's instances in the bus config at `config` (the
    group's one address when it is not replicated), for `connect`."""
    from mrs.config.bus import load_config

    bus = load_config(config)
    found = bus.group(group) if isinstance(group, int) else bus.group_by_name(group)
    return found.client_address.split(",")


def _single(group: BaseExceptionGroup) -> BaseException:
    """The one exception inside nested groups, so callers can `except MrsError`; the
    group itself when there really were several. Cancellations that rode along with
    a real error (a background task torn down as the error left) are dropped."""
    _, rest = group.split(trio.Cancelled)
    if rest is not None:
        group = rest
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = inner
    return group
