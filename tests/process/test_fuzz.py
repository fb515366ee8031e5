"""Short fuzz run: each decoder either decodes or raises its own error, nothing else.

The long coverage-guided run is `benchmarks/fuzz.py` (docs/security.md#fuzzing);
here every target gets random bytes (hypothesis), a few thousand mutations of real
sample inputs, and a short atheris run, plus the findings as regression tests.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journals.record import MAGIC, CorruptRecord, Record, decode_record, encode_record
from mrs.config.bus import ConfigError, parse_config
from mrs.testing.fuzz_targets import TARGETS, fuzz_record, mutate, run_mutations, seeds

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("target", sorted(TARGETS))
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400))
def test_random_bytes_decode_or_raise_the_decoders_own_error(target, data) -> None:
    TARGETS[target](data)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_mutated_samples_decode_or_raise_the_decoders_own_error(target) -> None:
    assert run_mutations(target, 3000, seed=15) == 3000


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_the_seeds_are_real_inputs_that_decode(target) -> None:
    """A seed the decoder refuses would leave the mutations outside the grammar."""
    for seed in seeds(target):
        TARGETS[target](seed)
    assert len(seeds(target)) >= 2


def test_mutation_is_reproducible_from_its_seed() -> None:
    import random

    first = mutate(b"abcdef", random.Random(3), [b"xyz"])
    again = mutate(b"abcdef", random.Random(3), [b"xyz"])
    assert first == again


def test_atheris_short_run_covers_every_target(tmp_path) -> None:
    """The long-run script itself: coverage-guided inputs spread over all targets,
    in one process (instrumenting the imports once is most of its cost). It leaves
    nothing in the temporary directory: each run used to leave its envelope keys there."""
    pytest.importorskip(
        "atheris", reason="atheris is in the [test] extra only for Python < 3.13 on Linux"
    )
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fuzz.py"), "mixed", "--runs", "6000"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Done 6000 runs" in result.stderr
    corpus = list((tmp_path / "fuzz-corpus" / "mixed").iterdir())
    assert {entry.read_bytes()[0] % len(TARGETS) for entry in corpus} == set(range(len(TARGETS)))
    assert list(scratch.iterdir()) == []


# -- findings ---------------------------------------------------------------------


def _with_checksum(values: list) -> bytes:
    payload = msgpack.packb(values, use_bin_type=True)
    return struct.pack(">BBI", MAGIC, 1, zlib.crc32(payload)) + payload


def test_finding_record_with_a_wrong_field_type_is_corrupt_not_a_record() -> None:
    """Fuzzing found records with a true checksum and a bytes priority or an int body
    decoding "fine", to crash whichever reader met them later."""
    good = msgpack.unpackb(encode_record(Record(1, 2, 20, 1, 10, body=b"x"))[6:])
    for index, wrong in ((8, b"orde"), (5, 11), (11, 17), (17, []), (0, "7"), (0, True)):
        values = list(good)
        values[index] = wrong
        with pytest.raises(CorruptRecord, match="not"):
            decode_record(_with_checksum(values), "DQF", b"\x01")
    assert decode_record(_with_checksum(good)).body == b"x"


def test_fuzz_record_checks_types_of_what_decodes() -> None:
    """The oracle itself: a well-typed record passes, and it sees every field."""
    fuzz_record(b"\x00" + encode_record(Record(2**63, 1, 1, 1, 1, extra={"a": 1})))


@pytest.mark.parametrize(
    "data_dir, problem",
    [("g\\u0000x", "must not contain a NUL"), ("~nosuchuser__mrs/g", "cannot expand")],
)
def test_finding_a_data_dir_the_os_refuses_is_a_config_error(data_dir, problem) -> None:
    """Fuzzing found `data_dir = "g\\u0000x"` escaping the loader as a ValueError from
    the OS (and `~nosuchuser` as a RuntimeError): both are one-line ConfigErrors."""
    text = f'[[group]]\nid = 1\nname = "A"\nlisten = "127.0.0.1:1"\ndata_dir = "{data_dir}"\n'
    with pytest.raises(ConfigError, match=f"group\\[0\\].data_dir: {problem}"):
        parse_config(text, "/nonexistent/bus.toml")
