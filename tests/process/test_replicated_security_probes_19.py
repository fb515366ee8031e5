"""Security of a replicated group across failovers, as real processes: etcd, three
`mrs serve --instance`, certificates from `mrs certs`, credentials from `mrs creds`.

What a user depends on: the instance that becomes active serves the certificate
files as they are on its disk now (a client that pins a rotated CA follows the
group to it), and the log says which credentials file is in force.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest
import trio

from clients import (
    ConnectionLost,
    DeliveryMode,
    NotAuthorized,
    connect,
    instance_addresses,
    tls_context,
)
from mrs.config.bus import load_config
from mrs.model import Status
from mrs.tools.certs import make_certs
from sim.etcd import InstanceProcess, wait_active, write_replicated_config
from tests.auth_helpers import add_principal, creds, password_of
from tests.cli_helpers import run_mrs
from tests.conftest import STANDARD_QUEUES
from tests.etcd_helpers import etcd
from tests.process.test_replication import FAILOVER_S_MAX, wait_in_sync
from tests.process.test_replication_tls import tls_group

__all__ = ["etcd"]  # the fixture, used by name


def _switch(config: Path, to: str) -> None:
    """A planned switch-over to `to` (`mrs failover --to`), answered."""
    done = run_mrs("failover", "--config", str(config), "NYC", "--to", to)
    assert done.returncode == 0, done.stderr


def test_a_certificate_replaced_while_a_replica_is_served_once_it_becomes_active(
    etcd, tmp_path
) -> None:
    """`[group.tls]` on: every instance has been active once, then `mrs certs --force`
    replaces the CA and the group's certificate on disk. The instance handed the
    group next serves the new certificate, a client that pins the new CA puts
    there, and after a SIGKILL of that active the client follows the group to the
    next one, whose replication link proves itself with the new certificates too.
    Before, an instance kept the certificate it had loaded at its first term: the
    client was refused (`certificate verify failed`) by every instance that had
    been active before the rotation."""
    config = tls_group(tmp_path, etcd.endpoint)
    certs = tmp_path / "certs"
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    for process in processes.values():
        process.start()
    try:
        first = wait_active(processes, 30)
        second = next(name for name in processes if name != first)
        addresses = instance_addresses(config, "NYC")

        async def all_in_sync(ca: Path) -> None:
            async with connect(addresses, None, tls=tls_context(ca)) as client:
                await wait_in_sync(client, {"a", "b", "c"})

        trio.run(all_in_sync, certs / "ca.pem")
        _switch(config, second)  # `second` builds its client-port context
        trio.run(all_in_sync, certs / "ca.pem")
        _switch(config, first)
        make_certs(load_config(config), certs, overwrite=True)  # a new CA on disk
        trio.run(all_in_sync, certs / "ca.pem")  # the active and its links, new files
        _switch(config, second)

        async def put_kill_put() -> tuple[list[bytes], str]:
            async with connect(addresses, "ORDERS", tls=tls_context(certs / "ca.pem")) as client:
                assert (await client.status())["replication"]["instance"] == second
                await client.put(b"before", "ORDERS", delivery=DeliveryMode.WF_DQF)
                processes[second].kill()
                psb = await client.put(b"after", "ORDERS", delivery=DeliveryMode.WF_DQF)
                assert psb.delivery_status == Status.STORED
                bodies = []
                for _ in range(2):
                    message = await client.get(timeout=FAILOVER_S_MAX)
                    bodies.append(message.body)
                    await client.confirm(message.seq)
                now = (await client.status())["replication"]["instance"]
                return bodies, now

        bodies, third = trio.run(put_kill_put)
        assert bodies == [b"before", b"after"] and third != second
        log = (tmp_path / f"{second}.log").read_text()
        assert "[group.tls] files" in log and "changed: new connections use them" in log
    finally:
        for process in processes.values():
            process.terminate()


def _machines(tmp_path: Path, endpoint: str) -> dict[str, Path]:
    """[auth] on, each instance with its own copy of the bus file, the credentials
    file and the link secrets, as on three machines: name -> its bus file."""
    home = tmp_path / f"m_{tmp_path.name}"  # the etcd prefix: this test's own
    write_replicated_config(home, endpoint, STANDARD_QUEUES)
    config = home / "bus.toml"
    config.write_text(
        config.read_text() + '[auth]\ncredentials = "creds.toml"\nlink_secrets = "secrets"\n'
    )
    add_principal(config, "owner", ["--admin", "config", "--admin", "status"])
    add_principal(config, "consumer", ["--attach", "1.10", "--confirm", "1.10"])
    files = {"a": config}
    for name in ("b", "c"):
        machine = tmp_path / f"m_{name}"
        machine.mkdir()
        for each in ("bus.toml", "creds.toml"):
            shutil.copy2(home / each, machine / each)
        files[name] = machine / "bus.toml"
    return files


def test_a_revocation_holds_after_a_kill_and_the_log_names_the_copy_in_force(
    etcd, tmp_path
) -> None:
    """`mrs admin grant` takes a consumer's attach right away on the active: its
    parked get is refused at once; after a SIGKILL of the active, the new active
    refuses the consumer's attach too (its machine's file brought up to the grant),
    and its log names the credentials file in force, with the SHA-256 of that
    machine's copy, so an operator can tell which copy each instance enforces.
    Before, the log said which file only when it was reloaded, never at the start
    of a term, and never which copy (no digest to compare the machines' files)."""
    files = _machines(tmp_path, etcd.endpoint)
    instances = {name: InstanceProcess(files[name], name) for name in files}
    for process in instances.values():
        process.start()
    try:
        first = wait_active(instances, 30)
        addresses = instance_addresses(files["a"], "NYC")

        async def revoke_while_parked() -> None:
            async with connect(addresses, None, credentials=creds("owner")) as owner:
                await wait_in_sync(owner, {"a", "b", "c"})
                async with connect(addresses, "ORDERS", credentials=creds("consumer")) as q:
                    refused: list[NotAuthorized] = []

                    async def parked_get() -> None:
                        try:
                            await q.get(timeout=FAILOVER_S_MAX)
                        except NotAuthorized as error:
                            refused.append(error)

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(parked_get)
                        granted = await trio.to_thread.run_sync(
                            lambda: run_mrs(
                                "admin", "grant", "consumer", "--none", "--config", str(files["a"]),
                                env={"MRS_AUTH_NAME": "owner",
                                     "MRS_AUTH_PASSWORD": password_of("owner")},
                            )
                        )  # fmt: skip
                        assert granted.returncode == 0, granted.stderr
                    assert refused, "the parked get was not refused"
                await wait_in_sync(owner, {"a", "b", "c"})  # the grant's commit is on all

        trio.run(revoke_while_parked)
        instances[first].kill()
        second = wait_active({n: p for n, p in instances.items() if n != first}, FAILOVER_S_MAX)

        async def attach_as_consumer() -> None:
            with pytest.raises(NotAuthorized, match="attach to 1.10 is not granted"):
                async with connect(addresses, "ORDERS", credentials=creds("consumer")):
                    pass

        trio.run(attach_as_consumer)
    finally:
        for process in instances.values():
            process.terminate()
    own = files[second].parent / "creds.toml"
    digest = hashlib.sha256(own.read_bytes()).hexdigest()[:16]
    log = (files[second].parent / f"{second}.log").read_text()
    in_force = re.findall(r"credentials in force: 2 principals from (\S+) \(sha256 (\w+)\)", log)
    assert in_force[-1] == (str(own), digest), in_force


def test_an_instance_whose_credentials_do_not_load_takes_no_term(etcd, tmp_path) -> None:
    """A planned switch-over to an instance whose credentials file does not load (a
    typo on its machine): it won the term, could not start its server, exited, and
    the in-sync record named only it, so the group stayed without an active. It is
    now no candidate while the file does not load (one line saying why); the hand-over
    goes back to the active, which keeps answering."""
    files = _machines(tmp_path, etcd.endpoint)
    instances = {name: InstanceProcess(files[name], name) for name in files}
    for process in instances.values():
        process.start()
    try:
        first = wait_active(instances, 30)
        target = next(name for name in ("a", "b", "c") if name != first)
        broken = files[target].parent / "creds.toml"
        broken.write_text(broken.read_text() + "\n[principal\n")
        switched = run_mrs(
            "failover", "--config", str(files[first]), "NYC", "--to", target, "--wait", "5"
        )
        assert switched.returncode != 0, switched.stdout

        async def answered() -> None:
            addresses = instance_addresses(files["a"], "NYC")
            with trio.fail_after(60):
                while True:  # another process's state: nothing to await but a dial
                    try:
                        async with connect(addresses, None, credentials=creds("owner")) as owner:
                            status = await owner.status()
                        break
                    except ConnectionLost:
                        await trio.sleep(0.5)
            assert status["replication"]["instance"] != target

        trio.run(answered)
        assert instances[target].process is not None
        assert instances[target].process.poll() is None
    finally:
        for process in instances.values():
            process.terminate()
    log = (files[target].parent / f"{target}.log").read_text()
    assert f"instance {target} is not a candidate: credentials file" in log, log[-2000:]
