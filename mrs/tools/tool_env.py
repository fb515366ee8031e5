"""The environment a tool's connections take, read once at the command line's edge:
MRS_AUTH_* (credentials) and MRS_TLS_* (TLS) for every tool that talks to a group
(`mrs status --address`, `jplay`, `dlq-handler`, ...).

Why a module of its own: every `mrs` command reads them, and they lived beside `mrs
certs` and `mrs creds`, whose imports (cryptography's X.509, the credential store)
every command then paid for, set or not. Here nothing is imported unless a variable
is set.
"""

from __future__ import annotations

import os

from mrs.exit_status import EXIT_USAGE, CommandError


def tool_environment(environ) -> None:
    """Both: the credentials, then the TLS (mrs.tools.cli, before a command runs)."""
    tool_credentials_from_env(environ)
    tool_tls_from_env(environ)


def tool_credentials_from_env(environ) -> None:
    """At the CLI edge: MRS_AUTH_NAME with MRS_AUTH_PASSWORD_FILE (or MRS_AUTH_PASSWORD)
    become the credentials every tool's connect() uses (`mrs status`, `jplay`, ...)."""
    name = environ.get("MRS_AUTH_NAME")
    if not name:
        return
    from clients.auth import ClientCredentials, set_default
    from mrs.security.creds import CredsError, name_problem

    if (problem := name_problem(name)) is not None:
        raise CommandError(f"MRS_AUTH_NAME: {problem}", EXIT_USAGE)
    password_file = environ.get("MRS_AUTH_PASSWORD_FILE")
    password = environ.get("MRS_AUTH_PASSWORD")
    if not password_file and not password:
        raise CommandError(
            "MRS_AUTH_NAME is set: set MRS_AUTH_PASSWORD_FILE (or MRS_AUTH_PASSWORD) too",
            EXIT_USAGE,
        )
    try:
        if password_file:
            set_default(ClientCredentials.from_file(name, password_file))
        else:
            set_default(ClientCredentials(name, password))
    except CredsError as error:
        # Name the variable, as MRS_TLS_* refusals do: the line said "password file
        # op.pw: No such file or directory" (exit 1) and no command named that file.
        variable = "MRS_AUTH_PASSWORD_FILE" if password_file else "MRS_AUTH_PASSWORD"
        raise CommandError(f"{variable}: {error}", EXIT_USAGE) from None


def tool_tls_from_env(environ) -> None:
    """At the CLI edge: MRS_TLS_CA (with MRS_TLS_CERT and MRS_TLS_KEY when the group
    asks for a client certificate) becomes the TLS every tool's connect() uses when
    it has none from the config (`mrs status --address`, `jplay`, `dlq-handler`)."""
    ca, cert, key = (environ.get(f"MRS_TLS_{name}") for name in ("CA", "CERT", "KEY"))
    if not (ca or cert or key):
        return
    if not ca or bool(cert) != bool(key):
        raise CommandError(
            "MRS_TLS_*: set MRS_TLS_CA, and MRS_TLS_CERT with MRS_TLS_KEY or neither",
            EXIT_USAGE,
        )
    for name in ("CA", "CERT", "KEY"):
        value = environ.get(f"MRS_TLS_{name}")
        if value and not os.path.isfile(value):  # name the variable, not only the file
            raise CommandError(f"MRS_TLS_{name}={value}: no such file", EXIT_USAGE)
    from clients.errors import BadParameter
    from clients.tls import set_default_tls, tls_context

    try:
        set_default_tls(tls_context(ca, cert, key))
    except BadParameter as error:  # "tls_context: cannot load FILES: why"
        raise CommandError(
            f"MRS_TLS_*: {error.message.removeprefix('tls_context: ')}", EXIT_USAGE
        ) from None
