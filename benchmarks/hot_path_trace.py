"""Which files and how many Python calls each hot path crosses on the server.

Why: the layout is judged by how far a reader must follow a message. This runs the
real servers over real TCP in one process (pure Python, so every call is seen:
MRS_PURE_PYTHON=1 is set here), warms each path up, then traces one message with
`sys.setprofile` and counts the calls made in server-side files (`mrs/` without
`mrs/tools`, and `journals/`) and the distinct files they are in:

- put: a WF_DQF put to a local queue, from the server's read to its PutDone;
- get+confirm: a get of that message and its confirm;
- saf drain: a WF_SAF put to a queue of a linked group, until the receiving group
  has stored it and the sender has the link's answer (both groups' server code).

    .venv/bin/python benchmarks/hot_path_trace.py            # a table
    .venv/bin/python benchmarks/hot_path_trace.py --files    # and the files per path

Runs against the tree it sits in; `--root DIR` traces another checkout (its own
module paths are found by trying the layouts MRS has had).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ["MRS_PURE_PYTHON"] = "1"

BUS = """
[[group]]
id = 1
name = "ONE"
listen = "127.0.0.1:0"
data_dir = "g1"
[[group.queue]]
id = 10
name = "ORDERS"
[[group.queue]]
id = 11
name = "SENDER"
[[group]]
id = 2
name = "TWO"
listen = "127.0.0.1:{port2}"
data_dir = "g2"
[[group.queue]]
id = 20
name = "REMOTE"
[[link]]
groups = [1, 2]
"""


def _imports(root: Path):  # type: ignore[no-untyped-def]
    """GroupServer and load_config from whichever layout the checkout has."""
    try:
        from mrs.server.group_server import GroupServer
    except ImportError:
        from mrs.server import GroupServer  # type: ignore[attr-defined,no-redef]
    try:
        from mrs.config.bus import load_config
    except ImportError:
        from mrs.config import load_config  # type: ignore[attr-defined,no-redef]
    return GroupServer, load_config


class Tracer:
    """Counts Python calls in server-side files while on."""

    def __init__(self, root: Path) -> None:
        self.server_dirs = (str(root / "mrs") + os.sep, str(root / "journals") + os.sep)
        self.tools_dir = str(root / "mrs" / "tools") + os.sep
        self.calls: Counter[str] = Counter()

    def __call__(self, frame, event, arg):  # type: ignore[no-untyped-def]
        if event != "call":
            return
        file = frame.f_code.co_filename
        if file.startswith(self.server_dirs) and not file.startswith(self.tools_dir):
            self.calls[file] += 1

    def __enter__(self) -> Tracer:
        self.calls.clear()
        sys.setprofile(self)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)


async def _run(root: Path, show_files: bool) -> None:
    import trio

    from clients import connect
    from mrs.model import DeliveryMode, Uma

    GroupServer, load_config = _imports(root)
    with tempfile.TemporaryDirectory(prefix="mrs-trace-") as scratch:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port2 = probe.getsockname()[1]
        (Path(scratch) / "bus.toml").write_text(BUS.format(port2=port2))
        bus = load_config(Path(scratch) / "bus.toml")
        tracer = Tracer(root)
        results: dict[str, Counter[str]] = {}
        async with trio.open_nursery() as nursery:
            one = GroupServer(bus, bus.group(1))
            two = GroupServer(bus, bus.group(2))
            host1, port1 = await nursery.start(one.run)
            await nursery.start(two.run)
            async with (
                connect(f"{host1}:{port1}", "SENDER") as sender,
                connect(f"{host1}:{port1}", "ORDERS") as reader,
            ):
                for _ in range(20):  # warm up every path, the link included
                    await sender.put(b"w", "ORDERS")
                    message = await reader.get(timeout=5)
                    await message.confirm()
                    await sender.put(b"w", "TWO.REMOTE", delivery=DeliveryMode.WF_SAF, uma=Uma.DLJ)
                await trio.sleep(1)  # the link has drained the warm-up: only the traced path runs
                with tracer:
                    await sender.put(b"x" * 1024, "ORDERS")
                results["put (WF_DQF, local)"] = Counter(tracer.calls)
                with tracer:
                    message = await reader.get(timeout=5)
                    await message.confirm()
                results["get + confirm"] = Counter(tracer.calls)
                await trio.sleep(0.5)  # the confirm's commit and notices are done
                with tracer:
                    await sender.put(
                        b"x" * 1024, "TWO.REMOTE", delivery=DeliveryMode.WF_SAF, uma=Uma.DLJ
                    )
                    await trio.sleep(0.2)  # the link's answer comes back to the sender
                results["saf drain over a link"] = Counter(tracer.calls)
            nursery.cancel_scope.cancel()
    print(f"{'path':28} {'files':>5} {'calls':>6}")
    for name, calls in results.items():
        print(f"{name:28} {len(calls):5d} {sum(calls.values()):6d}")
        if show_files:
            for file, count in calls.most_common():
                print(f"    {count:5d}  {Path(file).relative_to(root)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--files", action="store_true", help="list the files of each path")
    args = parser.parse_args()
    sys.path.insert(0, str(args.root.resolve()))  # before anything of MRS is imported
    import trio

    trio.run(_run, args.root.resolve(), args.files)


if __name__ == "__main__":
    main()
