"""The protection policy file: which queue needs what protection, who signs, who reads.

One TOML file, read by the applications (to seal on put and check on get) and by the
groups (to protect what they put on their own DLQ), as AMS's `setmqspl` policies
are read by every interceptor:

    keys_dir = "keys"              # NAME.pub of every identity named below

    [[policy]]
    queue = "1.10"                 # GROUP.QUEUE, or names ("NYC.ORDERS") with the bus config
    protection = "privacy"         # "integrity": signed; "privacy": signed and encrypted
    signers = ["SHOP"]             # who may put (empty: anyone with a key in keys_dir)
    recipients = ["BILLING"]       # privacy: who can read
    tolerate = false               # true: a get also accepts unprotected messages

    [[group_key]]                  # the identity a group protects its DLQ copies with
    group = 1
    key = "keys/NYC.key"           # private: present on that group's machine only

Paths are relative to the policy file. A queue without a policy is not protected.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrs.config.bus import overlong_number
from mrs.limits import GROUP_ID_MAX
from mrs.model import Address
from mrs.protection.envelope import Quality
from mrs.protection.errors import PolicyError
from mrs.protection.keys import Keyring, check_name

_TOP_KEYS = frozenset({"keys_dir", "policy", "group_key"})
_POLICY_KEYS = frozenset({"queue", "protection", "signers", "recipients", "tolerate"})
_GROUP_KEY_KEYS = frozenset({"group", "key"})
POLICIES_MAX = 10_000


@dataclass(frozen=True)
class Policy:
    """The protection one queue requires (AMS: a security policy named after it)."""

    queue: Address
    quality: Quality
    signers: tuple[str, ...] = ()
    recipients: tuple[str, ...] = ()
    tolerate: bool = False

    def allows_signer(self, name: str) -> bool:
        return not self.signers or name in self.signers


@dataclass(frozen=True)
class PolicySet:
    """All policies of a bus, by queue, with the public keys they name."""

    path: Path
    keyring: Keyring
    policies: dict[Address, Policy] = field(default_factory=dict)
    group_keys: dict[int, Path] = field(default_factory=dict)

    def for_queue(self, address: Address) -> Policy | None:
        return self.policies.get(address)


def load_policies(path: str | os.PathLike[str], bus: Any = None) -> PolicySet:
    """Read and check a policy file. `bus` (a BusConfig) lets queues be given by
    name; without it they must be GROUP.QUEUE numbers. PolicyError names the key."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise PolicyError(f"{path}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise PolicyError(f"{path}: not UTF-8 text") from None
    return parse_policies(text, path, bus)


def parse_policies(text: str, path: Path, bus: Any = None) -> PolicySet:
    """The policies in `text`, as if read from `path` (relative paths resolve beside
    it). PolicyError for anything wrong."""
    try:
        document = tomllib.loads(text.removeprefix("\ufeff"))  # as the bus file's: an editor's BOM
    except tomllib.TOMLDecodeError as error:
        raise PolicyError(f"{path}: not valid TOML: {error}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise PolicyError(f"{path}: not valid TOML: nested too deep") from None
    except ValueError:  # int() of a number too long; `mrs serve` said "unexpected error"
        raise PolicyError(f"{path}: {': '.join(overlong_number(text))}") from None
    _check_keys(path, document, "", _TOP_KEYS)
    base = path.absolute().parent
    keys_dir = _string(path, document, "keys_dir", "", default="keys")
    policies: dict[Address, Policy] = {}
    raw_policies = _tables(path, document, "policy")
    if len(raw_policies) > POLICIES_MAX:
        raise PolicyError(f"{path}: more than {POLICIES_MAX} policies")
    for index, raw in enumerate(raw_policies):
        policy = _policy(path, raw, f"policy[{index}]", bus)
        if policy.queue in policies:
            raise PolicyError(f"{path}: policy[{index}].queue: {policy.queue} has two policies")
        policies[policy.queue] = policy
    group_keys: dict[int, Path] = {}
    for index, raw in enumerate(_tables(path, document, "group_key")):
        where = f"group_key[{index}]"
        _check_keys(path, raw, where, _GROUP_KEY_KEYS, required=("group", "key"))
        group = raw["group"]
        if isinstance(group, str) and bus is not None:
            try:
                group = bus.group_by_name(group).id
            except LookupError as error:
                raise PolicyError(f"{path}: {where}.group: {error}") from None
        if not isinstance(group, int) or isinstance(group, bool) or not 1 <= group <= GROUP_ID_MAX:
            raise PolicyError(
                f"{path}: {where}.group must be a group id (1..{GROUP_ID_MAX}), got {group!r:.40}"
            )
        group_keys[group] = base / _string(path, raw, "key", where)
    return PolicySet(path.absolute(), Keyring(base / keys_dir), policies, group_keys)


def resolve_queue(text: str, bus: Any, default_group: int = 0) -> Address:
    """An address as applications write it: GROUP.QUEUE numbers always; names with
    the bus config. LookupError when it cannot be resolved."""
    if bus is not None:
        return bus.resolve(text, default_group)
    try:
        return Address.parse(text)
    except ValueError:
        raise LookupError(
            f"{text!r} is not GROUP.QUEUE; give the bus config to use queue names"
        ) from None


def _policy(path: Path, raw: dict, where: str, bus: Any) -> Policy:
    _check_keys(path, raw, where, _POLICY_KEYS, required=("queue", "protection"))
    try:
        queue = resolve_queue(_string(path, raw, "queue", where), bus)
    except LookupError as error:
        raise PolicyError(f"{path}: {where}.queue: {error}") from None
    quality_text = _string(path, raw, "protection", where)
    try:
        quality = Quality(quality_text)
    except ValueError:
        raise PolicyError(
            f'{path}: {where}.protection must be "integrity" or "privacy", got {quality_text!r}'
        ) from None
    if quality is Quality.NONE:
        raise PolicyError(f'{path}: {where}.protection "none": leave the queue out instead')
    signers = _names(path, raw, "signers", where)
    recipients = _names(path, raw, "recipients", where)
    if quality is Quality.PRIVACY and not recipients:
        raise PolicyError(f"{path}: {where}.recipients: a privacy policy needs recipients")
    tolerate = raw.get("tolerate", False)
    if not isinstance(tolerate, bool):
        raise PolicyError(f"{path}: {where}.tolerate must be true or false")
    return Policy(queue, quality, signers, recipients, tolerate)


def _names(path: Path, raw: dict, key: str, where: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicyError(f"{path}: {where}.{key} must be a list of identity names")
    try:
        return tuple(check_name(v) for v in value)
    except PolicyError as error:
        raise PolicyError(f"{path}: {where}.{key}: {error}") from None


def _check_keys(
    path: Path, table: dict, where: str, allowed: frozenset[str], required: tuple[str, ...] = ()
) -> None:
    prefix = f"{where}." if where else ""
    for key in table:
        if key not in allowed:
            raise PolicyError(
                f"{path}: {prefix}{key}: unknown key; allowed keys: {', '.join(sorted(allowed))}"
            )
    for key in required:
        if key not in table:
            raise PolicyError(f"{path}: {prefix}{key}: required key is missing")


def _tables(path: Path, document: dict, key: str) -> list[dict]:
    value = document.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise PolicyError(f"{path}: {key}: must be an array of tables ([[{key}]])")
    return value


def _string(path: Path, table: dict, key: str, where: str, default: str | None = None) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or not value:
        prefix = f"{where}." if where else ""
        raise PolicyError(f"{path}: {prefix}{key} must be a non-empty string")
    return value
