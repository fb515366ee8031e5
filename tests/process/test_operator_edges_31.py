"""Operator edges found in the thirty-first session: `mrs certs --out` under a missing
directory is refused in one line (as `mrs keys new` and `mrs creds` refuse one), and a
tool's MRS_TLS_* naming a file that is not there names the variable."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from tests.process.test_certs import mrs
from tests.process.test_tls import write_bus


def test_certs_under_a_missing_directory_is_refused_and_makes_no_tree(tmp_path) -> None:
    config = write_bus(tmp_path)
    out = tmp_path / "mistyped" / "certs"
    result = mrs("certs", "--config", str(config), "--out", str(out))
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"{tmp_path / 'mistyped'} does not exist (create it first)" in result.stderr
    assert not (tmp_path / "mistyped").exists()
    made = mrs("certs", "--config", str(config), "--out", str(tmp_path / "certs"))
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "certs" / "ca.pem").is_file()


def test_a_tool_names_the_tls_variable_whose_file_is_missing(tmp_path) -> None:
    """Before, `MRS_TLS_CERT=/nope` said "MRS_TLS_*: cannot load ..." and left the
    operator to work out which of the three variables was wrong."""
    config = write_bus(tmp_path)
    assert mrs("certs", "--config", str(config), "--out", str(tmp_path / "certs")).returncode == 0
    env = {
        **os.environ,
        "MRS_TLS_CA": str(tmp_path / "certs" / "ca.pem"),
        "MRS_TLS_CERT": str(tmp_path / "nope.pem"),
        "MRS_TLS_KEY": str(tmp_path / "certs" / "client.key"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "status", "--address", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"MRS_TLS_CERT={tmp_path / 'nope.pem'}: no such file" in result.stderr


IMPORTED_BY = """
import sys
from mrs.tools.cli import build_parser
build_parser(sys.argv[1])
print(" ".join(sorted(sys.modules)))
"""


def test_a_command_builds_its_own_parser_and_imports_no_other_commands_modules() -> None:
    """Before, every `mrs` command built every subcommand's parser and imported each
    one's module (Spark's glue, the certificate maker, the credential store): 0.5 s
    before `mrs admin` said anything, paid again by every tool a script runs."""
    others = {"mrs.audit.command", "mrs.tools.certs", "mrs.tools.creds", "mrs.dlq.command"}
    loaded = subprocess.run(
        [sys.executable, "-c", IMPORTED_BY, "admin"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "mrs.tools.admin" in loaded
    assert not others & set(loaded), others & set(loaded)


def test_every_command_is_in_the_table_and_builds_alone() -> None:
    from mrs.tools.cli import COMMANDS, build_parser
    from mrs.tools.cli_support import subparsers_of

    def names(parser) -> set[str]:
        return {
            name
            for action in parser._actions
            if isinstance(action, argparse._SubParsersAction)
            for name in action.choices
        }

    every = names(build_parser())
    assert every == {name for listed, _add in COMMANDS for name in listed}
    for listed, _add in COMMANDS:
        alone = build_parser(listed[0])
        assert names(alone) == set(listed)
        assert all(sub.prog.startswith("mrs ") for sub in subparsers_of(alone))
    assert names(build_parser("no-such-command")) == every  # argparse lists them all


def test_status_takes_an_address_pasted_with_spaces_as_admin_does() -> None:
    """`mrs admin --address ' HOST:PORT'` strips it; `mrs status` refused it as a
    usage mistake (exit 2), where it now asks that address."""
    result = mrs("status", "--address", " 127.0.0.1:1 ")
    assert result.returncode == 1, result.stderr
    assert "group at 127.0.0.1:1 did not answer" in result.stderr
