"""What one sleep and wake-up costs in CPU on this machine, with and without trio.

Why: at a steady 1,000 msgs/s (peerbench's paced shape) the server spends about
600 µs of CPU per message and each client about 250, ten to twenty times what a
message costs under load. Under load a wake-up serves hundreds of messages; at a
low rate it serves one, so what a wake-up itself costs sets the CPU (and part of the
latency) of the paced shape. On a virtual machine that cost includes the exits to
the hypervisor for the timer and the idle CPU, which a process is charged for. This
measures it, so the paced figures can be read against it:

    .venv/bin/python benchmarks/wake_cost.py
    .venv/bin/python benchmarks/wake_cost.py --seconds 3

It prints the CPU time (user + system) and the wall time per cycle of:
- `time.sleep`: a plain 1 ms sleep (the floor of any wake-up);
- `trio.sleep`: the same in trio (its timeout machinery on top);
- `socket ping-pong`: a 16-byte message back and forth between two processes over
  loopback TCP, both blocked in recv between messages (the shape of a request and
  its answer at a low rate), CPU of both processes per round trip.
"""

from __future__ import annotations

import argparse
import os
import socket
import time

import trio

SLEEP_S = 0.001


def plain_sleeps(seconds: float) -> tuple[float, float]:
    """(CPU µs, wall µs) per time.sleep(1 ms)."""
    cycles = 0
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    while time.perf_counter() - wall_start < seconds:
        time.sleep(SLEEP_S)
        cycles += 1
    return _per_cycle(cpu_start, wall_start, cycles)


def trio_sleeps(seconds: float) -> tuple[float, float]:
    """(CPU µs, wall µs) per trio.sleep(1 ms)."""

    async def run() -> tuple[float, float]:
        cycles = 0
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        while time.perf_counter() - wall_start < seconds:
            await trio.sleep(SLEEP_S)
            cycles += 1
        return _per_cycle(cpu_start, wall_start, cycles)

    return trio.run(run)


def ping_pong(seconds: float) -> tuple[float, float]:
    """(CPU µs of both processes, wall µs) per round trip between two processes."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    child = os.fork()
    if child == 0:  # the echoing side: answer every message until the peer closes
        listener.close()
        echo = socket.create_connection(("127.0.0.1", port))
        echo.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := echo.recv(64):
            echo.sendall(data)
        os._exit(0)
    connection, _ = listener.accept()
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cycles = 0
    times_start = os.times()
    wall_start = time.perf_counter()
    while time.perf_counter() - wall_start < seconds:
        connection.sendall(b"x" * 16)
        connection.recv(64)
        cycles += 1
    wall_s = time.perf_counter() - wall_start
    connection.close()
    listener.close()
    os.waitpid(child, 0)
    times_end = os.times()
    cpu_s = sum(times_end[:4]) - sum(times_start[:4])  # ours and the reaped child's
    return 1e6 * cpu_s / cycles, 1e6 * wall_s / cycles


def _per_cycle(cpu_start: float, wall_start: float, cycles: int) -> tuple[float, float]:
    cpu_s = time.process_time() - cpu_start
    wall_s = time.perf_counter() - wall_start
    return 1e6 * cpu_s / cycles, 1e6 * wall_s / cycles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    args = parser.parse_args()
    for name, measure in (
        ("time.sleep", plain_sleeps),
        ("trio.sleep", trio_sleeps),
        ("socket ping-pong", ping_pong),
    ):
        cpu_us, wall_us = measure(args.seconds)
        print(f"{name:16}: {cpu_us:6.1f} µs CPU, {wall_us:7.1f} µs wall per cycle")


if __name__ == "__main__":
    main()
