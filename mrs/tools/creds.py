"""`mrs creds`: add, rotate, grant, remove and list principals in the credentials file.

    mrs creds add app1 --config bus.toml --password-file app1.pw --attach 1.10 --put '2.*'
    mrs creds add-group 1 --config bus.toml      # group 1's link secret + principal group:1
    mrs creds rotate app1 --config bus.toml --password-stdin
    mrs creds grant app1 --config bus.toml --attach 1.10 --confirm 1.10 --admin status
    mrs creds remove app1 --config bus.toml
    mrs creds list --config bus.toml

The file (and every secret written) is owner-only (0600, directories 0700). A running
group reloads the file when it changes (or on SIGHUP): no restart.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from mrs.limits import CREDENTIALS_FILE_BYTES_MAX
from mrs.offline.journal_files import operator_path
from mrs.security import creds as store
from mrs.security import scram
from mrs.security.files import private_dir, write_private
from mrs.security.permissions import (
    ADMIN_RIGHTS,
    Permissions,
    grants_notes,
    grants_problem,
    parse_permissions,
)
from mrs.tools.cli_support import EXIT_USAGE, CommandError


def add_parser(commands) -> None:
    creds = commands.add_parser("creds", help="credentials file (hashed) and link secrets")
    actions = creds.add_subparsers(dest="creds_command", required=True, metavar="ACTION")

    add = actions.add_parser("add", help="add an application principal")
    add.add_argument("name")
    _where_options(add)
    _password_options(add)
    _grant_options(add)
    add.set_defaults(run=_add)

    group = actions.add_parser("add-group", help="make a group's link secret and principal")
    group.add_argument("group", type=int)
    _where_options(group)
    group.add_argument("--secrets", type=operator_path, help="link secrets directory (with --file)")
    group.add_argument(
        "--iterations",
        type=int,
        default=scram.ITERATIONS_DEFAULT,
        help="PBKDF2-HMAC-SHA256 rounds",
    )
    group.add_argument("--rotate", action="store_true", help="replace an existing secret")
    group.set_defaults(run=_add_group)

    rotate = actions.add_parser("rotate", help="new password for a principal (grants stay)")
    rotate.add_argument("name")
    _where_options(rotate)
    _password_options(rotate)
    rotate.set_defaults(run=_rotate)

    grant = actions.add_parser("grant", help="replace a principal's grants")
    grant.add_argument("name")
    _where_options(grant)
    _grant_options(grant)
    grant.set_defaults(run=_grant)

    remove = actions.add_parser("remove", help="remove a principal")
    remove.add_argument("name")
    _where_options(remove)
    remove.set_defaults(run=_remove)

    listing = actions.add_parser("list", help="principals and their grants (no secrets)")
    _where_options(listing)
    listing.set_defaults(run=_list)


def _where_options(parser: argparse.ArgumentParser) -> None:
    """--config or --file: where the credentials file is."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", type=operator_path, help="bus config: use its [auth] paths")
    where.add_argument("--file", type=operator_path, help="the credentials file itself")


def _password_options(parser: argparse.ArgumentParser) -> None:
    """Where the password comes from, and its hashing rounds."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--password-file", type=operator_path, help="read the password from a file")
    source.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin"
    )
    source.add_argument(
        "--generate", action="store_true", help="generate a password and print it once"
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=scram.ITERATIONS_DEFAULT,
        help="PBKDF2-HMAC-SHA256 rounds",
    )


def _grant_options(parser: argparse.ArgumentParser) -> None:
    """The grants a principal gets: queue patterns per right, admin rights."""
    for kind, what in (
        ("attach", "queue pattern it may attach to and get from"),
        ("put", "target pattern it may put to"),
        ("confirm", "queue pattern on which it may confirm"),
        ("manage", "queue pattern it may administer (mrs admin)"),
    ):
        parser.add_argument(f"--{kind}", action="append", metavar="PATTERN", help=what)
    parser.add_argument(
        "--admin",
        action="append",
        choices=sorted(ADMIN_RIGHTS),
        help="an admin right",
    )


def _paths(args: argparse.Namespace) -> tuple[Path, Path | None]:
    if args.file is not None:
        return args.file, getattr(args, "secrets", None)
    from mrs.config.bus import load_config

    bus = load_config(args.config)
    if bus.auth is None:
        raise CommandError(f"{args.config} has no [auth] table (or enabled = false)", EXIT_USAGE)
    return bus.auth.credentials_path, bus.auth.link_secrets_dir


def _password(args: argparse.Namespace) -> str:
    if args.password_file is not None:
        return store.read_secret(args.password_file, store.PASSWORD_FILE)
    if args.password_stdin:
        return _stdin_password()
    if args.generate:
        return store.generate_password()  # printed once saved (`_saved`)
    if not sys.stdin.isatty():
        raise CommandError(
            "give the password with --password-file, --password-stdin or --generate", EXIT_USAGE
        )
    first = getpass.getpass("password: ")
    if not first or first != getpass.getpass("again: "):
        raise CommandError("passwords empty or not the same", EXIT_USAGE)
    if first != first.strip():
        # A password file and --password-stdin are stripped: this one could be
        # given to no tool (MRS_AUTH_PASSWORD_FILE) or application (from_file).
        raise CommandError(
            "a password that begins or ends with a space: a password file is read "
            "stripped, so it could never log in from one; type it without",
            EXIT_USAGE,
        )
    return first


def _stdin_password() -> str:
    """The password on stdin, read as a password file is (`store.secret_text`): all
    of a pipe or a redirected file, so `--password-stdin < app.pw` registers what
    `--password-file app.pw` and `ClientCredentials.from_file` read (it took the
    first line of a two-line file, which the others took whole); one line typed at a
    terminal."""
    bound = CREDENTIALS_FILE_BYTES_MAX  # as a password file's: /dev/zero must end
    text = sys.stdin.readline(bound) if sys.stdin.isatty() else sys.stdin.read(bound + 1)
    if len(text) > bound:
        raise CommandError(f"stdin holds more than {bound >> 20} MiB: no password", EXIT_USAGE)
    if not text.strip():
        raise CommandError("no password on stdin", EXIT_USAGE)
    return store.secret_text(text, "the password on stdin")


def _grants(args: argparse.Namespace) -> Permissions:
    """The grants the options give; each must have a queue's shape (`grants_problem`:
    "1." was stored and granted nothing), and with --config a name in one must be a
    group's or a queue's of the bus (a typo, or a group's name, was accepted and
    granted nothing); a number the bus does not have (yet) is said on stderr, and
    taken. With --file there is no bus to check names against: the group warns of
    such a grant when it loads the file."""
    perms = parse_permissions(
        {
            "attach": args.attach or [],
            "put": args.put or [],
            "confirm": args.confirm or [],
            "admin": args.admin or [],
            "manage": args.manage or [],
        }
    )
    if isinstance(perms, str):
        raise CommandError(perms, EXIT_USAGE)
    if (problem := grants_problem(perms, None)) is not None:  # the shape: no bus needed
        raise CommandError(problem, EXIT_USAGE)
    if args.config is not None:
        from mrs.config.bus import load_config

        bus = load_config(args.config)
        problem = grants_problem(perms, bus)
        if problem is not None:
            raise CommandError(f"{args.config}: {problem}", EXIT_USAGE)
        for note in grants_notes(perms, bus):
            print(f"note: {note}; granted all the same, for when it is added", file=sys.stderr)
    return perms


def _iterations(args: argparse.Namespace) -> int:
    if not scram.ITERATIONS_MIN <= args.iterations <= scram.ITERATIONS_MAX:
        raise CommandError(
            f"--iterations must be {scram.ITERATIONS_MIN}..{scram.ITERATIONS_MAX}", EXIT_USAGE
        )
    return args.iterations


def _add(args: argparse.Namespace) -> int:
    path, _ = _paths(args)
    creds = store.load_or_empty(path)
    iterations = _iterations(args)
    # Every check comes before _password, which may read stdin or ask twice.
    if (problem := store.name_problem(args.name)) is not None:
        raise CommandError(problem, EXIT_USAGE)
    if args.name.startswith(store.LINK_PREFIX):
        raise CommandError("group principals are made by `mrs creds add-group N`", EXIT_USAGE)
    if args.name in creds.principals:
        raise CommandError(
            f"principal {args.name!r} exists in {path}: use `mrs creds rotate` or `grant`",
            EXIT_USAGE,
        )
    grants = _grants(args)
    password = _password(args)
    store.add(creds, args.name, password, grants, iterations)
    _saved(path, creds, password if args.generate else None)
    print(f"added {args.name} to {path}", file=sys.stderr)
    return 0


def _add_group(args: argparse.Namespace) -> int:
    path, secrets = _paths(args)
    if secrets is None:
        raise CommandError("give --secrets DIR (or --config with [auth])", EXIT_USAGE)
    if not 1 <= args.group <= 32000:
        raise CommandError("group must be 1..32000", EXIT_USAGE)
    creds = store.load_or_empty(path)
    name = store.link_principal(args.group)
    password = store.generate_password()
    if name in creds.principals:
        if not args.rotate:
            raise CommandError(f"{name} exists: add --rotate to replace its secret", EXIT_USAGE)
        store.rotate(creds, name, password, _iterations(args))
    else:
        store.add(creds, name, password, Permissions(), _iterations(args))
    secret_path = private_dir(secrets) / f"group-{args.group}.secret"
    write_private(secret_path, (password + "\n").encode("ascii"))
    _saved(path, creds)
    print(f"{name}: secret in {secret_path}, verifier in {path}", file=sys.stderr)
    return 0


def _rotate(args: argparse.Namespace) -> int:
    path, _ = _paths(args)
    creds = store.load(path)
    _known(creds, args.name, path)  # before _password reads stdin or asks
    if args.name.startswith(store.LINK_PREFIX):
        # Its verifier alone changed: the group's secret file kept the old password,
        # so the group could no longer load the file (every later `mrs creds` change,
        # a removal included, was not applied; a restart refused to start) and its
        # peers refused its link.
        raise CommandError(
            f"{args.name} is a group's link credential: rotate it with `mrs creds "
            f"add-group {args.name.removeprefix(store.LINK_PREFIX)} --rotate`, which "
            "writes the group's secret file too",
            EXIT_USAGE,
        )
    iterations = _iterations(args)
    password = _password(args)
    store.rotate(creds, args.name, password, iterations)
    _saved(path, creds, password if args.generate else None)
    print(f"rotated {args.name} in {path}", file=sys.stderr)
    return 0


def _grant(args: argparse.Namespace) -> int:
    path, _ = _paths(args)
    creds = store.load(path)
    _known(creds, args.name, path)
    store.grant(creds, args.name, _grants(args))
    _saved(path, creds)
    print(f"grants of {args.name} replaced in {path}", file=sys.stderr)
    return 0


def _remove(args: argparse.Namespace) -> int:
    path, _ = _paths(args)
    creds = store.load(path)
    _known(creds, args.name, path)
    store.remove(creds, args.name)
    _saved(path, creds)
    print(f"removed {args.name} from {path}", file=sys.stderr)
    return 0


def _saved(path: Path, creds: store.Credentials, generated: str | None = None) -> None:
    """Write the file; then print the password `--generate` made (`generated`). Why: it was printed
    before the write, so `mrs creds add app --file /etc/mrs/creds.toml --generate` with
    no /etc/mrs printed a password no file held (an operator hands it on), and the one
    line named the write's temporary file (`/etc/mrs/.creds.toml.x1y2z3: No such file
    or directory`), not the credentials file."""
    try:
        store.save(path, creds)
    except OSError as error:
        problem = error.strerror or str(error)
        if isinstance(error, FileNotFoundError):
            problem = f"{path.parent} does not exist (create it first)"
        elif isinstance(error, NotADirectoryError):
            problem = f"{path.parent} is not a directory"
        raise CommandError(f"cannot write the credentials file {path}: {problem}") from None
    if generated is not None:
        print(generated)


def _known(creds: store.Credentials, name: str, path: Path) -> None:
    """A principal rotate, grant and remove act on must be in the file: the same one
    line and exit status 2 for the three (as `add` of one that is already there)."""
    if name not in creds.principals:
        raise CommandError(f"no principal {name!r} in {path}: add it first", EXIT_USAGE)


def _list(args: argparse.Namespace) -> int:
    path, _ = _paths(args)
    creds = store.load(path)
    for name in sorted(creds.principals):
        grants = creds.principals[name].permissions.as_dict()
        shown = " ".join(f"{kind}={','.join(values)}" for kind, values in grants.items() if values)
        print(f"{name}\t{shown or '(no grants)'}")
    return 0
