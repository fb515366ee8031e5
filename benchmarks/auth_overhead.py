"""What authentication and permission checks cost: put throughput and connect time
with [auth] on, and with [auth] and TLS on, against off, in one run on three servers
of the same shape.

    python benchmarks/auth_overhead.py [--seconds 3] [--rounds 3]
    python benchmarks/auth_overhead.py --check

Rounds alternate between the servers so drift on a shared machine hits both alike. Puts are
WF_DQF (durable: one fsync per group commit) to a local queue, from 4 connections
with 32 puts in flight each; connect time is connect + authenticate + attach, with
the default 100,000 PBKDF2 rounds (paid by the client, once per connection).

--check times the server's grant check of one put in process (mrs.security.gate):
remembered, and decided afresh (resolve the target, spell it every way the resolver
reads it, match each put pattern against each spelling), for a put without headers
and for one carrying a new idempotency key each time, as a resending client's do.
The grants match only the bare name, so every pattern meets every spelling.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clients import ClientCredentials, DeliveryMode, Uma, connect, tls_context  # noqa: E402
from mrs import protocol as wire  # noqa: E402
from mrs.config.bus import load_config  # noqa: E402
from mrs.security.session_auth import build  # noqa: E402
from mrs.tools.cli import main as mrs_main  # noqa: E402
from sim.processes import GroupProcess  # noqa: E402

CONNECTIONS = 4
IN_FLIGHT = 32
CREDS = ClientCredentials("bench", "bench-password")


MODES = ("off", "auth", "auth+tls")


def make_server(directory: Path, mode: str) -> tuple[GroupProcess, dict]:
    """A one-group server; (process, connect options) for `mode`."""
    directory.mkdir(parents=True)
    config = directory / "bus.toml"
    config.write_text(
        textwrap.dedent("""\
        [[group]]
        id = 1
        name = "B"
        listen = "127.0.0.1:0"
        data_dir = "g1"
        [group.limits]
        dqf_messages_max = 10000000
        journal_bytes_max = 4294967296
        [group.guards]
        requests_in_flight_max = 1024
        [[group.queue]]
        id = 10
        name = "IN"
        messages_max = 10000000
        """)
        + "".join(f'[[group.queue]]\nid = {11 + n}\nname = "OUT{n}"\n' for n in range(CONNECTIONS))
    )
    options: dict = {}
    if mode == "auth+tls":
        certs = directory / "certs"
        assert mrs_main(["certs", "--config", str(config), "--out", str(certs), "--apply"]) == 0
        options["tls"] = tls_context(certs / "ca.pem", certs / "client.pem", certs / "client.key")
    if mode != "off":
        with config.open("a") as text:
            text.write('\n[auth]\ncredentials = "creds.toml"\nlink_secrets = "secrets"\n')
        password = directory / "bench.pw"
        password.write_text(CREDS.password)
        argv = ["creds", "add", "bench", "--config", str(config), "--password-file"]
        argv += [str(password), "--attach", "1.1[1-9]", "--put", "1.10"]
        assert mrs_main(argv) == 0
        options["credentials"] = CREDS
    server = GroupProcess(config, 1)
    server.start()
    return server, options


async def put_round(address: str, options: dict, seconds: float) -> float:
    """Puts per second once every connection is up (connect time is measured apart)."""
    count = 0
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(connect(address, f"1.{11 + n}", **options))
            for n in range(CONNECTIONS)
        ]
        deadline = trio.current_time() + seconds

        async def worker(client) -> None:
            nonlocal count
            while trio.current_time() < deadline:
                await client.put(b"x" * 100, target="1.10", delivery=DeliveryMode.WF_DQF,
                                 uma=Uma.DISC)  # fmt: skip
                count += 1

        async with trio.open_nursery() as nursery:
            for client in clients:
                for _ in range(IN_FLIGHT):
                    nursery.start_soon(worker, client)
    return count / seconds


async def connect_time_ms(address: str, options: dict, times: int = 10) -> float:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        async with connect(address, "1.11", **options):
            samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def measure(servers: dict, seconds: float, rounds: int) -> None:
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            server, options = servers[mode]
            rates[mode].append(await put_round(server.address, options, seconds))
    connects = {
        mode: await connect_time_ms(servers[mode][0].address, servers[mode][1]) for mode in MODES
    }
    base = statistics.median(rates["off"])
    print(f"WF_DQF puts/s, {CONNECTIONS} connections x {IN_FLIGHT} in flight, median of {rounds}")
    for mode in MODES:
        rate = statistics.median(rates[mode])
        print(
            f"  {mode:9} {rate:7.0f} ({rate / base:.3f} of off)   rounds "
            f"{[round(r) for r in rates[mode]]}   connect+attach {connects[mode]:.1f} ms"
        )


CHECKS = 100_000


def check_cost(directory: Path) -> None:
    """Microseconds per grant check of a put (see the module docstring)."""
    config = directory / "bus.toml"
    config.write_text(
        '[[group]]\nid = 1\nname = "B"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n'
        '[[group.queue]]\nid = 10\nname = "IN"\n[[group.queue]]\nid = 11\nname = "OUT"\n'
        '[auth]\ncredentials = "creds.toml"\nlink_secrets = "secrets"\n'
    )
    (directory / "bench.pw").write_text(CREDS.password)
    argv = ["creds", "add", "bench", "--config", str(config), "--password-file"]
    argv += [str(directory / "bench.pw"), "--put", "B.OUT*", "--put", "1.2*", "--put", "IN"]
    assert mrs_main(argv) == 0
    bus = load_config(config)
    _, gate = build(bus, bus.groups[1])
    assert gate is not None
    session = type("Session", (), {"principal": "bench", "attached": None, "peer": "bench"})()
    plain = [wire.Put(n + 1, "IN", b"x", 1, 1, 0, 0, 0, 0, b"", "") for n in range(CHECKS)]
    keyed = [
        wire.Put(n + 1, "IN", b"x", 1, 1, 0, 0, 0, 0, b"", "", {"idempotency_key": f"app:{n}"})
        for n in range(CHECKS)
    ]
    for name, puts in (("no headers", plain), ("a new idempotency key each", keyed)):
        for how, forget in (("remembered", False), ("decided afresh", True)):
            started = time.perf_counter()
            for put in puts:
                if forget:
                    gate.forget_decisions()
                gate.check(session, put)
            each_us = (time.perf_counter() - started) / CHECKS * 1e6
            print(f"  put, {name:26} {how:15} {each_us:6.2f} us per check")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="time the grant check alone")
    args = parser.parse_args()
    if args.check:
        with tempfile.TemporaryDirectory() as scratch:
            check_cost(Path(scratch))
        return
    with tempfile.TemporaryDirectory() as scratch:
        servers = {
            mode: make_server(Path(scratch) / mode.replace("+", "-"), mode) for mode in MODES
        }
        try:
            trio.run(measure, servers, args.seconds, args.rounds)
        finally:
            for server, _ in servers.values():
                server.terminate()


if __name__ == "__main__":
    main()
