"""Client-side message protection: seal on put, verify/decrypt on get (IBM MQ AMS style).

The keys stay with the application: a put to a queue with a policy is signed (and
for privacy encrypted) here, before it leaves the process, so the group, its
journals, `mrs dump` and the audit see an opaque envelope; a get from a protected
queue is verified (and decrypted) here. A message that fails its queue's policy
(unsigned on an integrity queue, tampered, signed by someone the policy does not
name, only signed on a privacy queue, not encrypted to this reader) is never handed
to the application: as AMS moves it to SYSTEM.PROTECTION.ERROR.QUEUE, the client
puts it as it is on its group's DLQ with a dead-letter header (reason 2063,
MQRC_SECURITY_ERROR), confirms it on the queue, and the get raises ProtectionRefused.

    protection = Protection.load("protection.toml", identity="keys/SHOP.key")
    async with connect(address, queue="1.11", protection=protection) as q: ...
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from clients.errors import MrsError
from mrs.limits import QUEUE_NAME_CHARS_MAX
from mrs.model import (
    DEAD_LETTER_QUEUE,
    POSSIBLE_DUPLICATE_HEADER,
    REPLY_QUEUE_HEADER,
    Address,
    DeliveryMode,
    Message,
    Psb,
    Status,
    Uma,
)
from mrs.protection.envelope import Opened, Quality, is_protected, open_envelope, seal
from mrs.protection.errors import (
    MQRC_NOT_AUTHORIZED,
    MQRC_SECURITY_ERROR,
    PolicyError,
    ProtectionError,
)
from mrs.protection.keys import Identity, PublicKeys, load_identity
from mrs.protection.policy import Policy, PolicySet, load_policies, resolve_queue

log = logging.getLogger(__name__)


class ProtectedClient(Protocol):
    """What protection uses of its client (`clients.connection.Client`): a protocol,
    so this module does not import the connection that imports it."""

    _program: str
    refused_unconfirmed: list[int]
    """Refused messages moved to the DLQ whose confirm an in-order queue refused
    (older messages first): confirmed after the application's next confirms."""

    @property
    def queue(self) -> Address | None: ...

    refused_unmoved: dict[int, tuple[int, Message, ProtectionError]]
    """Refused messages the DLQ put failed for, left unconfirmed on the queue, by seq:
    (the client's `reconnects` when refused, the message, why). Moved again before
    the next get (`Protection.retry_unmoved`)."""

    @property
    def reconnects(self) -> int: ...

    async def put(self, body: bytes, target: str | Address, **options: Any) -> Psb: ...

    async def confirm(self, seq: int) -> Any: ...


PROTECTION_HEADER = "mrs_protection"
"""Header added to an opened message: {"signer": NAME, "quality": "integrity"|"privacy"}."""


class ProtectionRefused(ProtectionError):
    """PROTECTION_ERROR: a put could not be protected as its target's policy requires,
    or a got message failed the policy of this queue. `reason` is the MQRC code
    (2063 MQRC_SECURITY_ERROR, 2035 MQRC_NOT_AUTHORIZED); `seq` the refused message's
    seq on a get (None on a put); `dead_lettered` whether it is now on the DLQ (or
    the DLJ)."""

    status_prefix = True

    def __init__(
        self, message: str, reason: int, seq: int | None = None, dead_lettered: bool = False
    ) -> None:
        super().__init__(message, reason)
        self.seq = seq
        self.dead_lettered = dead_lettered


@dataclass(frozen=True)
class Protection:
    """An application's identity (None: it can only read unprotected queues and put
    to unprotected ones) and the bus's policies."""

    policies: PolicySet
    identity: Identity | None = None
    bus: Any = None
    """A BusConfig, so targets can be written as names; None: GROUP.QUEUE only."""
    own_key_at_load: bool = dataclasses.field(default=False, init=False, compare=False)
    """keys_dir's NAME.pub held this application's own keys when it was made: a
    change of that file since means the key was rotated under it (`stale_identity`)."""

    own_keys: tuple[bytes, bytes] | None = dataclasses.field(
        default=None, init=False, compare=False, repr=False
    )
    """The identity's raw public keys, derived once (a check per put compares them)."""

    def __post_init__(self) -> None:
        if self.identity is not None:
            object.__setattr__(self, "own_keys", _raw_keys(self.identity.public))
        object.__setattr__(self, "own_key_at_load", self._own_key_published() is True)

    @classmethod
    def load(
        cls,
        policies: str | os.PathLike[str],
        identity: str | os.PathLike[str] | None = None,
        bus_config: str | os.PathLike[str] | None = None,
    ) -> Protection:
        """Read the policy file, this application's NAME.key and, optionally, the bus
        config (for queue names). Raises PolicyError naming the file and key."""
        bus = None
        if bus_config is not None:
            from mrs.config.bus import load_config

            bus = load_config(bus_config)
        return cls(
            load_policies(policies, bus),
            load_identity(identity) if identity is not None else None,
            bus,
        )

    def policy_for(self, target: str | Address, default_group: int) -> Policy | None:
        """The policy of the queue `target` names (None: unprotected)."""
        if isinstance(target, Address):
            return self.policies.for_queue(target)
        try:
            address = resolve_queue(str(target), self.bus, default_group)
        except LookupError as error:
            # Fail closed: an address we cannot resolve might name a protected queue.
            raise ProtectionRefused(
                f"cannot tell whether {target!r} is protected: {error}", MQRC_SECURITY_ERROR
            ) from None
        return self.policies.for_queue(address)

    def seal_for(self, target: str | Address, body: bytes, default_group: int) -> bytes:
        """The body to send to `target`: sealed as its policy requires, or as is when
        it has no policy or the body is protected already (never protected twice)."""
        policy = self.policy_for(target, default_group)
        if policy is None or is_protected(body):
            return body
        if self.identity is None:
            raise ProtectionRefused(
                f"{target} requires {policy.quality.value} protection and this application "
                "has no identity (Protection.load(..., identity=NAME.key))",
                MQRC_SECURITY_ERROR,
            )
        if not policy.allows_signer(self.identity.name):
            raise ProtectionRefused(
                f"{self.identity.name!r} may not put to {policy.queue}: the policy's signers "
                f"are {', '.join(policy.signers)}",
                MQRC_NOT_AUTHORIZED,
            )
        if (stale := self.stale_identity()) is not None:
            raise ProtectionRefused(f"{stale}: nothing was sent", MQRC_SECURITY_ERROR)
        try:
            recipients = [self.policies.keyring.get(name) for name in policy.recipients]
            if policy.quality is Quality.PRIVACY and self.identity.name not in policy.recipients:
                # The sender can open its own message when a group returns it (RTS):
                # a returned message is delivered only once its envelope verifies.
                recipients.append(self.identity.public)
            return seal(self.identity, policy.quality, body, recipients)
        except (PolicyError, ProtectionError) as error:
            raise ProtectionRefused(
                f"cannot protect for {policy.queue}: {error}", MQRC_SECURITY_ERROR
            ) from None

    def refuse_reading(self, queue: Address | None) -> None:
        """Raise ProtectionRefused (nothing taken) when this application could open no
        message of `queue`: its policy is privacy, tolerates no unprotected message,
        and the application has no identity to decrypt with. Why before the get: got,
        each message failed the policy and was moved to the DLQ, so a reader started
        without `identity=` emptied the queue of messages meant for its real readers.
        Also raised when the reader's key was rotated while it runs (`stale_identity`)."""
        if queue is None or queue.queue == DEAD_LETTER_QUEUE:
            return
        policy = self.policies.for_queue(queue)
        if policy is None or policy.quality is not Quality.PRIVACY:
            return
        if self.identity is not None:
            # A key rotated under a running reader: what is sealed for the new key
            # would be refused to the DLQ; it waits for the restarted reader instead.
            if (stale := self.stale_identity()) is not None:
                raise ProtectionRefused(f"{stale}: nothing was taken", MQRC_SECURITY_ERROR)
            return
        if policy.tolerate:
            return
        raise ProtectionRefused(
            f"{queue} has a privacy policy and this application has no identity to open "
            "its messages (Protection.load(..., identity=NAME.key)): nothing was taken",
            MQRC_NOT_AUTHORIZED,
        )

    def check(self, queue: Address, body: bytes, returned: bool = False) -> Opened | None:
        """Check a body got from `queue` against its policy: the opened envelope, or
        None to deliver the body as is (no policy, or tolerated unprotected).
        ProtectionError says why it fails the policy.

        `returned`: a message a group returned to this reader (UMA RTS). Its envelope
        must open and verify like any other, since any application can have a body
        that merely looks sealed returned here; one this reader signed itself passes
        whatever this queue's policy asks of others (it was sealed for the original
        target's policy)."""
        policy = self.policies.for_queue(queue)
        if policy is None:
            return self._own_returned(body) if returned else None
        if not is_protected(body):
            if policy.tolerate:
                return None
            raise ProtectionError(
                f"unprotected message on {queue}, whose policy requires {policy.quality.value} "
                "and does not tolerate unprotected messages"
            )
        opened = open_envelope(body, self.policies.keyring, self.identity)
        if returned and self.identity is not None and opened.signer == self.identity.name:
            return opened
        if opened.quality.rank < policy.quality.rank:
            raise ProtectionError(
                f"message protected for {opened.quality.value} only; {queue} requires "
                f"{policy.quality.value}"
            )
        if not policy.allows_signer(opened.signer):
            raise ProtectionError(
                f"signed by {opened.signer!r}, who is not a signer of {queue}'s policy"
            )
        return opened

    def _own_returned(self, body: bytes) -> Opened | None:
        """A body returned to a queue without a policy: opened when it is an envelope
        this reader sealed itself (a privacy one is sealed to its sender too), else
        None (delivered as is, as anything on such a queue). Why: a sender's own queue
        is seldom protected, and its returned messages came back as envelopes, though
        it can open them; it had to call `open(message, queue=original_target)`."""
        identity = self.identity
        if identity is None or not is_protected(body):
            return None
        try:
            opened = open_envelope(body, self.policies.keyring, identity)
        except ProtectionError:
            return None
        return opened if opened.signer == identity.name else None

    def open(self, message: Message, queue: str | Address | None = None) -> Message:
        """`message` with its body verified and opened, checked against the policy of
        `queue` (default: where it was got from). For explicit use, e.g. by a reader of
        a DLQ with its own policy. Raises ProtectionRefused."""
        address = message.target if queue is None else self._address(queue)
        try:
            opened = self.check(address, message.body)
        except ProtectionError as error:
            raise ProtectionRefused(str(error), error.reason, message.seq) from None
        return _without_marker(message) if opened is None else _with_opened(message, opened)

    async def deliver(self, client: ProtectedClient, message: Message) -> Message:
        """The client's get hook: the message opened, or refused (moved to the DLQ,
        confirmed, ProtectionRefused raised). DLQ messages pass as they are: a
        dead-letter handler works from the dead-letter header alone."""
        queue = client.queue
        if queue is None or queue.queue == DEAD_LETTER_QUEUE or _group_ack(message):
            return _without_marker(message)
        try:
            opened = self.check(queue, message.body, _returned(message))
        except ProtectionError as error:
            where, failure = await _to_dead_letter_queue(client, queue, message, error)
            if where is None and message.needs_confirm:
                client.refused_unmoved[message.seq] = (client.reconnects, message, error)
            raise _refusal(queue, message, error, where, failure) from None
        return _without_marker(message) if opened is None else _with_opened(message, opened)

    async def retry_unmoved(self, client: ProtectedClient) -> None:
        """Before a get: move again the refused messages a DLQ put failed for, and
        raise ProtectionRefused for the first that still cannot be moved (nothing is
        taken). Why: such a message is left unconfirmed on the queue, and on a queue
        that confirms implicitly the next Get confirmed it, so it was neither on the
        DLQ nor on the queue (at most in the PCJ, as if consumed) although the
        refusal said it stayed. As AMS backs a message it cannot move out to its
        queue, every get refuses it until it can be moved (a 'dlq' right granted
        while the reader runs applies at its next get). Entries of an earlier
        connection are dropped: the group gave those messages back to the queue."""
        queue = client.queue
        unmoved = client.refused_unmoved
        for seq, (reconnects, message, error) in list(unmoved.items()):
            if queue is None or reconnects != client.reconnects:
                del unmoved[seq]
                continue
            where, failure = await _to_dead_letter_queue(client, queue, message, error, True)
            if where is None:
                raise _refusal(queue, message, error, where, failure)
            del unmoved[seq]

    def stale_identity(self) -> str | None:
        """Why this application's keys are older than its NAME.pub in keys_dir, or None.

        True when that file held its keys when the application loaded them and holds
        others now: `mrs keys rotate` ran while it runs. Why refuse then: a running
        signer kept signing with the old key, and its readers, verifying with the new
        NAME.pub, refused each message to the DLQ, where no key could ever verify it
        (the old one is not kept on purpose); a running reader refused to the DLQ each
        message sealed for its new key. The file matching nothing at load (not copied
        yet, say) is not judged: which key is newer cannot be told then."""
        identity = self.identity
        if identity is None or not self.own_key_at_load or self._own_key_published() is not False:
            return None  # True: still its keys; None: no NAME.pub (a removed key is not judged)
        path = self.policies.keyring.directory / f"{identity.name}.pub"
        return (
            f"the key of {identity.name!r} was rotated after this application loaded it "
            f"({path} now holds another key): restart it with the new {identity.name}.key"
        )

    def _own_key_published(self) -> bool | None:
        """Whether keys_dir's NAME.pub holds this application's own public keys (None:
        no identity, or no readable NAME.pub of its own there)."""
        if self.identity is None:
            return None
        try:
            published = self.policies.keyring.get(self.identity.name)
        except PolicyError:
            return None
        return _raw_keys(published) == self.own_keys

    def _address(self, queue: str | Address) -> Address:
        if isinstance(queue, Address):
            return queue
        return resolve_queue(queue, self.bus)


def _refusal(
    queue: Address, message: Message, error: ProtectionError, where: str | None, failure: str
) -> ProtectionRefused:
    """What a get raises for `message` refused by the policy of `queue`: where it went."""
    if where:
        moved = f"moved to {where}"
    elif message.needs_confirm:
        moved = (
            f"the DLQ put failed ({failure}): left on the queue, and refused "
            "again on every get until it can be moved"
        )
    else:  # got without a confirm: the queue no longer holds it
        moved = f"the DLQ put failed ({failure}): discarded, as a nonrecoverable message"
    return ProtectionRefused(
        f"message {message.seq} on {queue} refused: {error} ({moved})",
        error.reason,
        message.seq,
        where is not None,
    )


def _raw_keys(keys: PublicKeys) -> tuple[bytes, bytes]:
    return keys.verify_key.public_bytes_raw(), keys.encrypt_key.public_bytes_raw()


def _group_ack(message: Message) -> bool:
    """An MRS_ACK (from queue 0, where only a group sends from) carries no
    application's protection and passes as it is."""
    return message.is_mrs_ack and message.source.queue == 0


def _returned(message: Message) -> bool:
    """A message a group returned to its sender (MSGUNDEL, set only by a group). Its
    body is the envelope the sender sealed for the original target, or whatever an
    application that named this queue as its resp_q sent: checked as any other."""
    return message.delivery_status == Status.MSGUNDEL


def _without_marker(message: Message) -> Message:
    """A body delivered as is: a `mrs_protection` header can only be a sender's
    forgery (only this library sets it, after verifying), so it is dropped."""
    if not message.headers or PROTECTION_HEADER not in message.headers:
        return message
    headers = {k: v for k, v in message.headers.items() if k != PROTECTION_HEADER}
    return dataclasses.replace(message, headers=headers or None)


def _with_opened(message: Message, opened: Opened) -> Message:
    marker = {"signer": opened.signer, "quality": opened.quality.value}
    headers = {**(message.headers or {}), PROTECTION_HEADER: marker}
    return dataclasses.replace(message, body=opened.data, headers=headers)


def _dead_letter_headers(
    program: str, queue: Address, message: Message, error: ProtectionError
) -> dict[str, Any]:
    """The headers of a refused message's copy on the DLQ: its dead-letter header, the
    key that stores it once, and the possible-duplicate mark for a redelivery."""
    header = {
        "reason": error.reason,
        "dest_q_name": str(queue.queue),
        "dest_q_mgr_name": str(queue.group),
        "format": "MRS",
        "put_appl_type": "MRS",
        "put_appl_name": program,
        "text": f"refused by the protection policy of {queue}: {error}",
        "original_seq": message.seq,
        "original_source": str(message.source),
    }
    headers: dict[str, Any] = {
        "dead_letter_header": header,
        # once however often it is refused: a reader that cannot confirm it (an
        # in-order queue, a lost connection) gets it again, and so may another
        "idempotency_key": f"protection-refused {queue} {message.seq}",
    }
    if (reply_queue := _reply_queue_text(message)) is not None:
        headers[REPLY_QUEUE_HEADER] = reply_queue
    if message.delivery_status == Status.POSSDUPL:
        # Delivered before: an earlier reader may have dead-lettered it already. A
        # memory DLQ hands it to the DLJ, where the key does not dedupe, so this copy
        # is marked as the DLQ handler marks its forwards (delivered POSSDUPL).
        headers[POSSIBLE_DUPLICATE_HEADER] = True
    return headers


def _reply_queue_text(message: Message) -> str | None:
    """The refused message's reply queue as its DLQ copy carries it (`reply_q`): the
    sender's `message.resp_q` (its own source when it named none). Why: the copy is
    put from the reader's queue, so without it `Message.resp_q` and the DLQ handler's
    REPLYQ and `&REPLYQ` read the queue that refused the message, and a rule returning
    dead letters to their senders forwarded it back there to be refused again. A
    sender's text longer than any queue address is left out (None): carried, it could
    take the copy's headers past their bound, and the refused message could never be
    moved."""
    reply_queue = str(message.resp_q)
    return reply_queue if 0 < len(reply_queue) <= QUEUE_NAME_CHARS_MAX else None


async def _to_dead_letter_queue(
    client: ProtectedClient,
    queue: Address,
    message: Message,
    error: ProtectionError,
    again: bool = False,
) -> tuple[str | None, str]:
    """Put the refused message, as it is, on this group's DLQ, then confirm it here.

    A recoverable message stays durable: it is put WF_DQF with UMA DLJ, so a
    journaled DLQ (`dead_letter_queue_recoverable`) stores it, and a memory DLQ
    (which takes no recoverable put: NO_DQF) hands it to the DLJ with its header.
    (where it went: "the DLQ", "the DLJ ...", None), and when it could not be moved,
    why: the refusal repeats on every get, so the reader must be told what to fix
    (e.g. the principal lacks the admin right 'dlq')."""
    recoverable = message.delivery.recoverable
    headers = _dead_letter_headers(client._program, queue, message, error)
    try:
        psb = await client.put(
            message.body,
            target=Address(queue.group, DEAD_LETTER_QUEUE),
            delivery=DeliveryMode.WF_DQF if recoverable else DeliveryMode.WF_MEM,
            uma=Uma.DLJ if recoverable else Uma.DISC,
            msg_class=message.msg_class,
            msg_type=message.msg_type,
            priority=message.priority,
            correlation_id=message.correlation_id,
            headers=headers,
            protect=False,
        )
    except MrsError as failed:
        stored, failure = False, str(failed) or type(failed).__name__
    except trio.Cancelled:  # the get was given up while the DLQ put was on its way
        _unmoved_when_given_up(client, message, error)
        raise
    else:
        stored = isinstance(psb.delivery_status, Status) and psb.delivery_status.ok
        failure = ""
        if not stored and psb.uma_status != Status.DLJ_SUCCESS:
            failure = f"{_name(psb.delivery_status)}, {_name(psb.uma_status)}"
    if failure:
        # `again`: a get retrying the move (Protection.retry_unmoved) said it once
        level = logging.DEBUG if again else logging.ERROR
        log.log(level, "refused message %d not moved to the DLQ: %s", message.seq, failure)
        return None, failure
    if message.needs_confirm:
        # Shielded (one round trip, bounded by the confirm's own wait): given up here,
        # a BADSEQ answer (an in-order queue wants older ones first) was never kept
        # for `confirm_refused`, and the queue jammed as below.
        with trio.CancelScope(shield=True):
            await _confirm_refused_now(client, message.seq)
    where = "the DLQ" if stored else "the DLJ (the DLQ is memory only)"
    log.warning("message %d on %s refused (%s): moved to %s", message.seq, queue, error, where)
    return where, ""


def _unmoved_when_given_up(
    client: ProtectedClient, message: Message, error: ProtectionError
) -> None:
    """The get was given up (a cancel scope, Ctrl-C in the blocking client) while the
    refused message's DLQ put waited for its answer: the put may or may not be
    stored, and the message is unconfirmed on the queue, delivered on this
    connection. It is kept with the refused messages not moved yet, so the next get
    moves it again (`Protection.retry_unmoved`, under the same idempotency key) and
    confirms it; marked POSSDUPL, so that copy is marked a possible duplicate where
    the key does not dedupe (a memory DLQ hands it to the DLJ). Why: dropped, it was
    neither handed out nor confirmed, and on an in-order queue every later confirm
    on the connection was refused BADSEQ naming a message the application never
    saw, until a reconnect. A message that needs no confirm is gone either way."""
    if message.needs_confirm:
        marked = dataclasses.replace(message, delivery_status=Status.POSSDUPL)
        client.refused_unmoved[message.seq] = (client.reconnects, marked, error)


async def _confirm_refused_now(client: ProtectedClient, seq: int) -> None:
    """Confirm a refused message moved to the DLQ, or hold it for `confirm_refused`
    when an in-order queue wants older ones first. Held once: after a reconnect it
    comes again, POSSDUPL, and is refused again; held twice, its second confirm was
    answered BADSEQ (confirmed already) for good, and every refused message behind
    it stayed unconfirmed, so the application's later confirms were refused BADSEQ."""
    held = client.refused_unconfirmed
    try:
        await client.confirm(seq)
    except MrsError as failed:
        if failed.status != Status.BADSEQ:
            log.error("refused message %d moved, not confirmed: %s", seq, failed)
        elif seq not in held:  # an in-order queue: confirmed once the messages before it are
            held.append(seq)
        return
    if seq in held:  # held before a reconnect: confirmed now
        held.remove(seq)


def _name(status: Status | int) -> str:
    return status.name if isinstance(status, Status) else str(status)


__all__ = ["PROTECTION_HEADER", "Protection", "ProtectionRefused", "Quality"]


async def confirm_refused(client: ProtectedClient) -> None:
    """Confirm the refused messages (moved to the DLQ) an in-order queue would not let
    be confirmed yet, oldest first, as far as the queue now allows: after each of the
    application's confirms. Before, the refused message stayed unconfirmed, every
    later confirm was answered BADSEQ, and the next reader moved it to the DLQ again."""
    pending = client.refused_unconfirmed
    while pending:
        seq = pending.pop(0)  # taken first: a confirm that succeeds comes back here
        try:
            await client.confirm(seq)
        except MrsError as failed:
            if failed.status == Status.BADSEQ:
                pending.insert(0, seq)  # older messages still unconfirmed
                return
            log.error("refused message %d moved, not confirmed: %s", seq, failed)
