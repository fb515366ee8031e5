"""`mrs keys new APP --out DIR`: make an identity for end-to-end message protection."""

from __future__ import annotations

import argparse
from pathlib import Path

from mrs.protection.errors import PolicyError
from mrs.protection.keys import Identity, write_identity
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
    new.add_argument("--out", type=Path, required=True, help="directory to write them to")
    new.set_defaults(run=run_keys_new)


def run_keys_new(args: argparse.Namespace) -> int:
    try:
        private_path, public_path = write_identity(Identity.generate(args.name), args.out)
    except PolicyError as error:
        raise CommandError(str(error), EXIT_USAGE) from None
    except OSError as error:
        raise CommandError(f"cannot write keys to {args.out}: {error.strerror or error}") from None
    print(f"{private_path} (private: keep it with {args.name}, mode 0600)")
    print(f"{public_path} (public: copy it to the keys_dir of the policy file)")
    return 0
