"""Long fuzz run: the decoders of mrs.testing.fuzz_targets under atheris (coverage-guided).

    python benchmarks/fuzz.py TARGET [--runs N] [--seconds S] [--corpus DIR]
    python benchmarks/fuzz.py all --runs N      # each target in turn, N inputs each

TARGET is one of protocol, record, config, rules, envelope, policies, or mixed
(all six in one process, the first byte picking one: what the test suite runs).
The corpus directory (default `fuzz-corpus/TARGET` under the current directory)
starts from the real sample inputs and keeps what libFuzzer finds interesting, so a
second run goes on from the first.
A finding (any exception but the decoder's own error) stops the run with the input
saved as `crash-*` in the current directory and exit status 1; replay it with
`python benchmarks/fuzz.py TARGET --replay crash-...`.

Without atheris (it has wheels for CPython up to 3.11/3.12 on Linux), `--mutate`
runs the same targets under mrs.testing.fuzz_targets' pure-Python mutation loop.

libFuzzer ends a run with "Done N runs" on stderr; `all` sums them into one line
`fuzz all: N inputs, F targets with findings`; `--mutate` prints
`fuzz TARGET: N inputs, F findings, S s`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

TARGET_NAMES = ("protocol", "record", "config", "rules", "envelope", "policies")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", choices=(*TARGET_NAMES, "mixed", "all"))
    parser.add_argument("--runs", type=int, default=0, help="inputs to try (0: no limit)")
    parser.add_argument("--seconds", type=int, default=0, help="stop after this long")
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("--replay", type=Path, default=None, help="run one saved input")
    parser.add_argument("--mutate", action="store_true", help="pure-Python mutation loop")
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    if options.target == "all":
        return _run_all(options)
    if options.replay is not None:
        return _replay(options.target, options.replay)
    if options.mutate:
        return _mutate(options)
    return _atheris(options)


def _run_all(options: argparse.Namespace) -> int:
    """Each target in its own process (atheris.Fuzz never returns); sum the counts."""
    total = 0
    failed = 0
    for target in TARGET_NAMES:
        command = [sys.executable, __file__, target, "--seed", str(options.seed)]
        for flag in ("runs", "seconds"):
            if getattr(options, flag):
                command += [f"--{flag}", str(getattr(options, flag))]
        if options.mutate:
            command.append("--mutate")
        result = subprocess.run(command, capture_output=True, text=True)
        inputs = _inputs_done(result.stdout + result.stderr)
        total += inputs
        print(f"fuzz {target}: {inputs} inputs, exit status {result.returncode}", flush=True)
        if result.returncode != 0:
            failed += 1
            print(result.stderr[-3000:], file=sys.stderr)
    print(f"fuzz all: {total} inputs, {failed} targets with findings")
    return 1 if failed else 0


def _inputs_done(output: str) -> int:
    """The count a run printed: libFuzzer's "Done N runs", or our own summary line;
    for a run stopped by a finding, libFuzzer's last "#N" status line."""
    for pattern in (r"^Done (\d+) runs", r"^fuzz \w+: (\d+) inputs", r"^#(\d+)\s"):
        found = re.findall(pattern, output, re.MULTILINE)
        if found:
            return int(found[-1])
    return 0


def _replay(target: str, path: Path) -> int:
    from mrs.testing.fuzz_targets import TARGETS, fuzz_mixed

    TARGETS.get(target, fuzz_mixed)(path.read_bytes())
    print(f"fuzz {target}: {path} decodes or is refused with the decoder's own error")
    return 0


def _mutate(options: argparse.Namespace) -> int:
    from mrs.testing.fuzz_targets import run_mutations

    started = time.monotonic()
    runs = options.runs or 1_000_000
    done = 0
    try:
        while done < runs:
            chunk = min(100_000, runs - done)
            done += run_mutations(options.target, chunk, options.seed + done)
            if options.seconds and time.monotonic() - started > options.seconds:
                break
    except Exception:
        _summary(options.target, done, 1, started)
        raise
    _summary(options.target, done, 0, started)
    return 0


def _atheris(options: argparse.Namespace) -> int:
    import atheris

    with atheris.instrument_imports(include=["mrs", "journals", "msgpack", "tomllib"]):
        import mrs.protection.envelope
        import mrs.protection.policy  # noqa: F401 - instrumented here, used lazily
        from mrs.testing import fuzz_targets

    run = fuzz_targets.TARGETS.get(options.target, fuzz_targets.fuzz_mixed)
    corpus = options.corpus or Path("fuzz-corpus") / options.target
    corpus.mkdir(parents=True, exist_ok=True)
    for index, seed in enumerate(fuzz_targets.seeds(options.target)):
        (corpus / f"seed-{index}").write_bytes(seed)
    arguments = [sys.argv[0], str(corpus), f"-seed={options.seed or 1}", "-print_final_stats=1"]
    if options.runs:
        arguments.append(f"-runs={options.runs}")
    if options.seconds:
        arguments.append(f"-max_total_time={options.seconds}")
    atheris.Setup(arguments, run)
    atheris.Fuzz()  # libFuzzer exits the process itself, printing "Done N runs"
    return 0


def _summary(target: str, inputs: int, findings: int, started: float) -> None:
    seconds = time.monotonic() - started
    print(f"fuzz {target}: {inputs} inputs, {findings} findings, {seconds:.0f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
