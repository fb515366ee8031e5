"""What a junk-connection flood costs a well-behaved producer, measured in one run.

    python benchmarks/flood.py                      # 4 rounds of 5 s, defaults guards
    python benchmarks/flood.py --seconds 10 --rounds 6 --flood-tasks 64

One `mrs serve` process (one group, the default [group.guards] unless --relaxed)
and two client processes: a producer (one connection, `--in-flight` tasks putting
WF_DQF messages) and a flooder that, from another loopback address (127.0.0.2), opens
connections as fast as `--flood-tasks` tasks can and does something useless with
each: closes at once, sends random bytes, sends nothing, sends a Hello and half a
frame, or a Hello then garbage. Rounds alternate "producer alone" and "producer
while flooding" on the same server, so both see the same disk and the same noise;
the cost is 1 - (flooded rate / quiet rate), from the sums over all rounds.

`--relaxed` runs the same against a server whose flood guards are set out of reach
(accept limits, deadlines), to show what they buy. `--half-frames N` measures
memory instead: N connections each send a Hello and all but the last byte of a
maximal frame, then close; it reports the server's RSS before, at its peak while
they hold their frames, and a few seconds after they closed. The machine is shared: the
flooder's own CPU is part of what the producer loses, so the figure is an upper
bound of the server's share.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import random
import shutil
import socket as socket_module
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mrs.tools.cli_support import OneLineParser, positive_float, positive_int
from sim.processes import GroupProcess, write_single_group_config

FLOOD_ADDRESS = "127.0.0.2"
LINGER_RST = struct.pack("ii", 1, 0)
RELAXED = """[group.guards]
accepts_per_s = 1000000.0
accept_burst = 10000000
connections_per_peer_max = 10000000
handshake_s_max = 86400
frame_s_max = 86400
client_idle_s_max = 86400
"""
QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-out-of-order"
unconfirmed_max = 1000000
messages_max = 1000000
[[group.queue]]
id = 11
name = "PRODUCER"
"""


# ---------------------------------------------------------------------- producer
def produce(address: str, seconds: float, in_flight: int, body_bytes: int) -> dict:
    """Put WF_DQF messages for `seconds` from one connection; report the rate."""
    import trio

    from clients import DeliveryMode, Status, Uma, connect

    async def main() -> dict:
        stored = 0
        body = b"p" * body_bytes
        async with connect(address, "PRODUCER") as client:
            deadline = trio.current_time() + seconds
            started = trio.current_time()

            async def worker() -> None:
                nonlocal stored
                while trio.current_time() < deadline:
                    psb = await client.put(
                        body, target="1.10", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC
                    )
                    if psb.delivery_status == Status.STORED:
                        stored += 1

            async with trio.open_nursery() as nursery:
                for _ in range(in_flight):
                    nursery.start_soon(worker)
            elapsed = trio.current_time() - started
        return {"stored": stored, "seconds": elapsed}

    return trio.run(main)


# ---------------------------------------------------------------------- flooder
KINDS = ("close", "random", "silent", "half-frame", "garbage-frames")


def flood(
    address: str, seconds: float, tasks: int, seed: int, kinds: str = ",".join(KINDS)
) -> dict:
    """Open junk connections from FLOOD_ADDRESS for `seconds`; count what happened."""
    import trio

    from mrs import protocol as wire

    host, port = address.rsplit(":", 1)
    hello = wire.Connection("client").send(wire.Hello(wire.PROTOCOL_VERSION, "junk"))
    rng = random.Random(seed)
    counts = {"opened": 0, "refused_connect": 0, "kinds": {}, "connect_errors": {}}

    async def one() -> None:
        kind = rng.choice(kinds.split(","))
        sock = trio.socket.socket()
        try:
            await sock.bind((FLOOD_ADDRESS, 0))
            await sock.connect((host, int(port)))
        except OSError as error:
            counts["refused_connect"] += 1
            name = errno.errorcode.get(error.errno or 0, str(error.errno))
            counts["connect_errors"][name] = counts["connect_errors"].get(name, 0) + 1
            sock.close()
            return
        counts["opened"] += 1
        counts["kinds"][kind] = counts["kinds"].get(kind, 0) + 1
        stream = trio.SocketStream(sock)
        try:
            with trio.move_on_after(2.0):  # a junk peer does not wait long either
                if kind == "random":
                    await stream.send_all(rng.randbytes(rng.randrange(1, 400)))
                elif kind == "half-frame":
                    await stream.send_all(hello + b"\x00\x01\x00\x00" + b"\x92" * 50)
                elif kind == "garbage-frames":
                    await stream.send_all(hello + b"\x00\x00\x00\x05\xc1\xc1\xc1\xc1\xc1")
                if kind != "close":
                    await stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            # close with RST: no TIME_WAIT, so the flooder never runs out of ports
            sock.setsockopt(socket_module.SOL_SOCKET, socket_module.SO_LINGER, LINGER_RST)
            sock.close()

    async def main() -> dict:
        deadline = trio.current_time() + seconds

        async def worker() -> None:
            while trio.current_time() < deadline:
                await one()

        async with trio.open_nursery() as nursery:
            for _ in range(tasks):
                nursery.start_soon(worker)
        return counts

    return trio.run(main)


def burn(seconds: float) -> dict:
    """The control: no connections at all, only the flooder's CPU use (a busy loop)."""
    deadline = time.monotonic() + seconds
    loops = 0
    while time.monotonic() < deadline:
        loops += 1
    return {"opened": 0, "refused_connect": 0, "kinds": {"burn": loops}}


# ---------------------------------------------------------------------- the run
def _child(role: str, *args: object, nice: int = 0) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, "--child", role, *map(str, args)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: os.nice(nice)) if nice else None,
    )


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(options: argparse.Namespace) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="flood-", dir=options.scratch))
    config = write_single_group_config(
        scratch,
        queues=QUEUES,
        group_extra=RELAXED if options.relaxed else "",
        limits="dqf_messages_max = 10000000",
    )
    server = GroupProcess(config, 1)
    address = server.start()
    pid = server.process.pid
    quiet = {"stored": 0, "seconds": 0.0}
    flooded = {"stored": 0, "seconds": 0.0}
    floods: list[dict] = []
    rss_max_kib = 0
    server_cpu_s = {"quiet": 0.0, "flooded": 0.0}
    flooder_cpu_s = 0.0
    try:
        for round_number in range(options.rounds):
            flooding = round_number % 2 == 1
            producer = _child("produce", address, options.seconds, options.in_flight, 100)
            flooder = (
                _child(
                    "burn" if options.control_burn else "flood",
                    address,
                    options.seconds,
                    options.flood_tasks,
                    round_number,
                    options.kinds,
                    nice=options.flood_nice,
                )
                if flooding
                else None
            )
            cpu_before = _cpu_s(pid)
            flooder_cpu = 0.0
            while producer.poll() is None:
                rss_max_kib = max(rss_max_kib, _rss_kib(pid))
                if flooder is not None:
                    flooder_cpu = max(flooder_cpu, _cpu_s(flooder.pid))
                time.sleep(0.2)
            server_cpu_s["flooded" if flooding else "quiet"] += _cpu_s(pid) - cpu_before
            flooder_cpu_s += flooder_cpu
            result = json.loads(producer.stdout.read())
            total = flooded if flooding else quiet
            total["stored"] += result["stored"]
            total["seconds"] += result["seconds"]
            if flooder is not None:
                floods.append(json.loads(flooder.communicate()[0]))
            rate = result["stored"] / result["seconds"]
            label = "flooded" if flooding else "quiet  "
            print(f"round {round_number + 1} {label}: {rate:8.0f} puts/s", flush=True)
        log_text = (scratch / "group1.log").read_text(errors="replace")
    finally:
        server.terminate()
        shutil.rmtree(scratch, ignore_errors=True)
    quiet_rate = quiet["stored"] / quiet["seconds"]
    flooded_rate = flooded["stored"] / flooded["seconds"]
    opened = sum(item["opened"] for item in floods)
    flood_seconds = options.seconds * len(floods)
    return {
        "guards": "relaxed" if options.relaxed else "default",
        "flooder": "cpu burn only (control)" if options.control_burn else "junk connections",
        "kinds": options.kinds,
        "flood_nice": options.flood_nice,
        "quiet_puts_per_s": round(quiet_rate),
        "flooded_puts_per_s": round(flooded_rate),
        "cost_percent": round(100 * (1 - flooded_rate / quiet_rate), 1),
        "junk_connections_per_s": round(
            (opened + sum(item["refused_connect"] for item in floods)) / flood_seconds
        ),
        "junk_connections_past_connect_per_s": round(opened / flood_seconds),
        "junk_kinds": _merge([item["kinds"] for item in floods]),
        "connect_failures": sum(item["refused_connect"] for item in floods),
        "connect_errors": _merge([item.get("connect_errors", {}) for item in floods]),
        "server_rss_max_mib": round(rss_max_kib / 1024, 1),
        "server_cpu_share_quiet": round(server_cpu_s["quiet"] / max(quiet["seconds"], 1e-9), 2),
        "server_cpu_share_flooded": round(
            server_cpu_s["flooded"] / max(flooded["seconds"], 1e-9), 2
        ),
        "flooder_cpu_share": round(flooder_cpu_s / max(flooded["seconds"], 1e-9), 2),
        "refusal_log_lines": log_text.count("connection refused (EXCEEDQUOTA)"),
        "deadline_log_lines": log_text.count("closing connection (TIMEOUT)"),
        "protocol_error_log_lines": log_text.count("protocol error"),
    }


def half_frames(options: argparse.Namespace) -> dict:
    """N connections each hold all but one byte of a maximal frame, then close: what
    the server's memory does (partial_frames_bytes_max bounds it; the heap trim
    gives it back)."""
    from mrs import protocol as wire
    from mrs.group.link_session import FRAME_OVERHEAD_BYTES, TRANSFER_BYTES_MAX

    scratch = Path(tempfile.mkdtemp(prefix="flood-", dir=options.scratch))
    config = write_single_group_config(
        scratch, queues=QUEUES, group_extra=RELAXED if options.relaxed else ""
    )
    server = GroupProcess(config, 1)
    host, port = server.start().rsplit(":", 1)
    pid = server.process.pid
    frame_bytes = max(1 << 20, TRANSFER_BYTES_MAX) + FRAME_OVERHEAD_BYTES
    hello = wire.Connection("client").send(wire.Hello(wire.PROTOCOL_VERSION, "junk"))
    payload = hello + struct.pack(">I", frame_bytes) + b"\x92" * (frame_bytes - 1)
    before_kib = _rss_kib(pid)
    peak_kib = before_kib
    socks = []
    try:
        for _ in range(options.half_frames):
            sock = socket_module.create_connection((host, int(port)))
            with contextlib.suppress(OSError):  # an evicted one may be reset mid-send
                sock.sendall(payload)
            socks.append(sock)
            peak_kib = max(peak_kib, _rss_kib(pid))
        deadline = time.monotonic() + options.seconds
        while time.monotonic() < deadline:  # the server reads what is still buffered
            peak_kib = max(peak_kib, _rss_kib(pid))
            time.sleep(0.1)
        for sock in socks:
            sock.close()
        time.sleep(options.seconds)
        after_kib = _rss_kib(pid)
        log_text = (scratch / "group1.log").read_text(errors="replace")
    finally:
        server.terminate()
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "guards": "relaxed" if options.relaxed else "default",
        "half_frames": options.half_frames,
        "bytes_sent_mib": round(options.half_frames * len(payload) / 2**20),
        "server_rss_before_mib": round(before_kib / 1024, 1),
        "server_rss_peak_mib": round(peak_kib / 1024, 1),
        "server_rss_after_close_mib": round(after_kib / 1024, 1),
        "evicted_log_lines": log_text.count("unfinished frames hold"),
    }


def _merge(dicts: list[dict]) -> dict:
    merged: dict = {}
    for item in dicts:
        for key, value in item.items():
            merged[key] = merged.get(key, 0) + value
    return merged


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        role, address, seconds, *rest = sys.argv[2:]
        if role == "produce":
            result = produce(address, float(seconds), int(rest[0]), int(rest[1]))
        elif role == "burn":
            result = burn(float(seconds))
        else:
            result = flood(address, float(seconds), int(rest[0]), int(rest[1]), *rest[2:])
        print(json.dumps(result))
        return
    parser = OneLineParser(prog="flood.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=positive_float, default=5.0, help="length of each round")
    parser.add_argument(
        "--rounds", type=positive_int, default=4, help="quiet/flooded rounds, alternating"
    )
    parser.add_argument(
        "--in-flight", type=positive_int, default=16, help="producer's puts in flight"
    )
    parser.add_argument("--flood-tasks", type=int, default=32, help="flooder's concurrent tasks")
    parser.add_argument(
        "--flood-nice",
        type=int,
        default=0,
        help="niceness of the flooder (19: it only gets CPU the others leave, as if it ran "
        "on another host)",
    )
    parser.add_argument(
        "--control-burn",
        action="store_true",
        help="control run: the 'flooder' only burns CPU, opens no connection",
    )
    parser.add_argument("--relaxed", action="store_true", help="flood guards set out of reach")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"junk connection kinds to draw from, comma-separated (default: {','.join(KINDS)})",
    )
    parser.add_argument(
        "--half-frames",
        type=int,
        default=0,
        help="measure memory instead: this many connections each hold all but one byte "
        "of a maximal frame, then close (--seconds: how long they hold, and wait after)",
    )
    parser.add_argument("--scratch", default=None, help="directory on the disk to measure")
    options = parser.parse_args()
    print(f"cpus {os.cpu_count()}, python {sys.version.split()[0]}", flush=True)
    print(json.dumps(half_frames(options) if options.half_frames else run(options), indent=2))


if __name__ == "__main__":
    main()
