"""End-to-end message protection in the style of IBM MQ AMS: per-queue policies, keys
held by the applications, bodies signed (integrity) or signed and encrypted (privacy)
in the client, so a group, its journals and the tools see only the headers.

- `keys`: an application's identity (Ed25519 signing + X25519 encryption key) and
  the public-key directory; `mrs keys new`.
- `envelope`: seal/open one body (standard constructions from `cryptography`).
- `policy`: the policy file (which queue needs what, who signs, who reads).
- `dead_letter`: what a group does with a message it puts on its own DLQ.

Layer: may import the root vocabulary, `core` and `config`; `clients` imports it, so
nothing here may reach the server's layers.
"""

from mrs.protection.envelope import MAGIC, is_protected
from mrs.protection.errors import PolicyError, ProtectionError

__all__ = ["MAGIC", "PolicyError", "ProtectionError", "is_protected"]
