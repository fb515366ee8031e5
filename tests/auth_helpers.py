"""A two-group bus of real `mrs serve` processes with [auth] on, for the security tests.

Credentials are made with the real `mrs creds` command (in-process), with few KDF
rounds so the tests stay fast (the rounds are per credential, stored with it).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from clients import ClientCredentials
from mrs.tools.cli import main as mrs_main
from sim.ports import free_port
from sim.processes import GroupProcess

ITERATIONS = "1000"
QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-in-order"
[[group.queue]]
id = 11
name = "OTHER"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 13
name = "SENDER"
confirm = "explicit-out-of-order"
"""

PRINCIPALS: dict[str, list[str]] = {
    # name: grants (mrs creds add options)
    "producer": ["--attach", "1.13", "--put", "2.*", "--put", "1.10"],
    "consumer": ["--attach", "1.10", "--confirm", "1.10"],
    "reader": ["--attach", "1.10"],  # may get but not confirm
    "consumer2": ["--attach", "2.10", "--confirm", "2.10"],
    "thief": ["--attach", "1.11", "--put", "1.11", "--confirm", "1.11"],
    "ops": ["--admin", "status"],
    "dlqadmin": ["--admin", "dlq", "--attach", "1.13", "--put", "1.*"],
    "replayer": ["--admin", "replay", "--attach", "1.13", "--put", "1.*"],
}


def password_of(name: str) -> str:
    return f"pw-{name}-correct horse"


def creds(name: str, password: str | None = None) -> ClientCredentials:
    return ClientCredentials(name, password if password is not None else password_of(name))


def mrs(*argv: str) -> None:
    assert mrs_main(list(argv)) == 0, argv


def add_principal(config: Path, name: str, grants: list[str]) -> None:
    secret = config.parent / f"{name}.pw"
    secret.write_text(password_of(name))
    mrs("creds", "add", name, "--config", str(config), "--password-file", str(secret),
        "--iterations", ITERATIONS, *grants)  # fmt: skip


def group_config(group_id: int, port: int, extra: str = "") -> str:
    return textwrap.dedent(f"""\
        [[group]]
        id = {group_id}
        name = "G{group_id}"
        listen = "127.0.0.1:{port}"
        data_dir = "g{group_id}"
        pcj_default = true
        {extra}
        [group.guards]
        handshake_s_max = 2.0
        """) + textwrap.dedent(QUEUES)


@dataclass
class SecureBus:
    directory: Path
    group_ids: tuple[int, ...] = (1, 2)
    ports: dict[int, int] = field(default_factory=dict)
    processes: dict[int, GroupProcess] = field(default_factory=dict)
    config_path: Path | None = None

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ports = {group_id: free_port() for group_id in self.group_ids}
        self.config_path = self.write_config("bus.toml", "creds.toml")
        for group_id in self.group_ids:
            mrs("creds", "add-group", str(group_id), "--config", str(self.config_path),
                "--iterations", ITERATIONS)  # fmt: skip
        for name, grants in PRINCIPALS.items():
            add_principal(self.config_path, name, grants)
        for group_id in self.group_ids:
            self.processes[group_id] = GroupProcess(self.config_path, group_id)

    def write_config(self, name: str, credentials: str) -> Path:
        parts = [group_config(g, self.ports[g]) for g in self.group_ids]
        if len(self.group_ids) > 1:
            parts.append(f"[[link]]\ngroups = [{self.group_ids[0]}, {self.group_ids[1]}]\n")
        parts.append(f'[auth]\ncredentials = "{credentials}"\nlink_secrets = "secrets"\n')
        path = self.directory / name
        path.write_text("\n".join(parts))
        return path

    def start(self) -> None:
        for process in self.processes.values():
            process.start()

    def stop(self) -> None:
        for process in self.processes.values():
            if process.running:
                process.terminate()

    def address(self, group_id: int) -> str:
        return self.processes[group_id].address

    def log(self, group_id: int) -> str:
        return (self.directory / f"group{group_id}.log").read_text(errors="replace")
