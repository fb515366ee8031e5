"""`mrs keys new APP --out DIR`: make an identity for end-to-end message protection;
`mrs keys rotate APP --out DIR`: new keys for it, the old decryption keys kept."""

from __future__ import annotations

import argparse

from mrs.offline.journal_files import operator_path
from mrs.protection.errors import PolicyError
from mrs.protection.keys import PREVIOUS_KEYS_MAX, Identity, rotate_identity, write_identity
from mrs.tools.cli_support import EXIT_USAGE, CommandError


def add_keys_parser(commands: argparse._SubParsersAction) -> None:
    keys = commands.add_parser(
        "keys", help="identity keys for end-to-end message protection (docs/security-protection.md)"
    )
    actions = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    new = actions.add_parser(
        "new", help="make NAME.key (private, 0600) and NAME.pub (give it to the others)"
    )
    new.add_argument("name", help="the identity's name: the signer name policies list")
    new.add_argument("--out", type=operator_path, required=True, help="directory to write them to")
    new.set_defaults(run=run_keys_new)
    rotate = actions.add_parser(
        "rotate",
        help="new keys for NAME in place: NAME.key keeps its old decryption keys, so "
        "messages sealed for them still open; copy the new NAME.pub to every keys_dir",
    )
    rotate.add_argument("name", help="the identity's name (DIR/NAME.key must exist)")
    rotate.add_argument(
        "--out", type=operator_path, required=True, help="the directory holding NAME.key"
    )
    rotate.set_defaults(run=run_keys_rotate)


def run_keys_new(args: argparse.Namespace) -> int:
    """Make the identity; a missing parent of --out is refused in one line, as `mrs
    creds add --file` refuses a missing directory (the directory --out names is made)."""
    try:
        private_path, public_path = write_identity(Identity.generate(args.name), args.out)
    except PolicyError as error:
        raise CommandError(str(error), EXIT_USAGE) from None
    except FileNotFoundError:
        raise CommandError(
            f"cannot write keys to {args.out}: {args.out.parent} does not exist (create it first)"
        ) from None
    except OSError as error:
        raise CommandError(f"cannot write keys to {args.out}: {error.strerror or error}") from None
    print(f"{private_path} (private: keep it with {args.name}, mode 0600)")
    print(f"{public_path} (public: copy it to the keys_dir of the policy file)")
    return 0


def run_keys_rotate(args: argparse.Namespace) -> int:
    try:
        private_path, public_path = rotate_identity(args.name, args.out)
    except PolicyError as error:
        raise CommandError(str(error), EXIT_USAGE) from None
    except OSError as error:
        raise CommandError(f"cannot rotate keys in {args.out}: {error.strerror or error}") from None
    print(
        f"{private_path} (private: new keys, and the decryption keys of up to "
        f"{PREVIOUS_KEYS_MAX} earlier rotations, so what was sealed for them still opens)"
    )
    print(f"{public_path} (public: copy it over the old one in every keys_dir)")
    return 0
