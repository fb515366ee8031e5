"""What a group does with a message it puts on its own DLQ, under AMS's channel rules.

`shared/reference/undelivered-messages-channels.txt`, for a message an MCA (here: the
group, for a UMA or a link's channel rules) puts on a DLQ:

- already protected: placed as is, never protected twice;
- the DLQ has no policy: placed as is (protected stays protected, plain stays plain);
- the DLQ has a policy and the group may protect (it has an identity, `group_key`,
  that the policy allows as a signer): the policy protects it;
- the group has an identity the policy does not allow: the put fails ("does not
  permit the user ID that the channel initiator is running under");
- the group has no identity (it does not protect, AMS's SPLPROT not ASPOLICY) and the
  policy does not tolerate unprotected messages: the put fails;
  tolerated: placed as is.

A failed DLQ put is the caller's DLQ_FAILED: the channel backs off into RETRY for a
recoverable message and a nonrecoverable one is discarded (its UMA failed).
The dead-letter header always travels beside the body, in clear, so a handler
matches on it without opening the body.
"""

from __future__ import annotations

from dataclasses import dataclass

from mrs.config.bus import BusConfig, ConfigError
from mrs.model import DEAD_LETTER_QUEUE, Address
from mrs.protection.envelope import is_protected, seal
from mrs.protection.errors import PolicyError
from mrs.protection.keys import Identity, Keyring, load_identity
from mrs.protection.policy import Policy, load_policies


class DeadLetterRefused(Exception):
    """The DLQ's policy refuses this message; the text says why (for the log)."""


@dataclass(frozen=True)
class DeadLetterProtection:
    """One group's DLQ policy and the identity it protects with (None: it does not)."""

    policy: Policy | None
    identity: Identity | None
    keyring: Keyring

    def place(self, body: bytes) -> bytes:
        """The body to put on the DLQ: as is, or protected by the DLQ's policy.
        DeadLetterRefused when the policy does not let it on."""
        policy = self.policy
        if is_protected(body) or policy is None:
            return body
        if self.identity is None:
            if policy.tolerate:
                return body
            raise DeadLetterRefused(
                f"the policy of DLQ {policy.queue} does not tolerate unprotected messages "
                "and this group has no group_key to protect them with"
            )
        if not policy.allows_signer(self.identity.name):
            raise DeadLetterRefused(
                f"the policy of DLQ {policy.queue} does not let this group's identity "
                f"{self.identity.name!r} protect messages (signers: {', '.join(policy.signers)})"
            )
        try:
            recipients = [self.keyring.get(name) for name in policy.recipients]
        except PolicyError as error:
            raise DeadLetterRefused(f"cannot protect for DLQ {policy.queue}: {error}") from None
        return seal(self.identity, policy.quality, body, recipients)


def dead_letter_protection(bus: BusConfig, group_id: int) -> DeadLetterProtection | None:
    """The DLQ protection of group `group_id`, or None when the bus has no policy
    file (`protection = "..."` in the bus config). ConfigError if it is wrong, so
    `mrs serve` refuses to start with one line saying what to fix."""
    path = bus.protection
    if path is None:
        return None
    try:
        policies = load_policies(path, bus)
        key_path = policies.group_keys.get(group_id)
        identity = load_identity(key_path) if key_path is not None else None
    except PolicyError as error:
        raise ConfigError(bus.path, "protection", str(error)) from None
    policy = policies.for_queue(Address(group_id, DEAD_LETTER_QUEUE))
    return DeadLetterProtection(policy, identity, policies.keyring)
