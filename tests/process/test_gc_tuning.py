"""The server's collector settings (mrs.server.gc_tuning): the operator's switch is parsed
strictly, and tuning freezes what is alive and sets the thresholds asked for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mrs.exit_status import EXIT_USAGE, CommandError
from mrs.server.gc_tuning import GC_ENV, SERVER_GC_THRESHOLDS, thresholds_from
from mrs.server.harness import serve_options_from

ROOT = Path(__file__).resolve().parents[2]
positive = st.integers(min_value=1, max_value=10**9)


def test_unset_is_the_measured_default_and_off_leaves_cpython_alone() -> None:
    assert thresholds_from({}) == SERVER_GC_THRESHOLDS
    assert serve_options_from({}).gc_thresholds == SERVER_GC_THRESHOLDS
    assert thresholds_from({GC_ENV: "off"}) is None
    assert serve_options_from({GC_ENV: " OFF "}).gc_thresholds is None


@given(positive, positive, positive, st.sampled_from([",", ", ", " , "]))
def test_three_positive_integers_are_taken_as_given(gen0, gen1, gen2, comma) -> None:
    text = comma.join(str(n) for n in (gen0, gen1, gen2))
    assert thresholds_from({GC_ENV: text}) == (gen0, gen1, gen2)


@given(
    st.text(max_size=30).filter(
        lambda text: (
            text.strip().lower() not in ("", "off")
            and not (
                len(parts := [p.strip() for p in text.split(",")]) == 3
                and all(p.isascii() and p.isdigit() and int(p) >= 1 for p in parts)
            )
        )
    )
)
def test_anything_else_is_one_line_for_the_operator(text) -> None:
    with pytest.raises(CommandError) as refused:
        thresholds_from({GC_ENV: text})
    assert str(refused.value).startswith(GC_ENV)
    assert "\n" not in str(refused.value).replace(repr(text), "")


def test_tuning_freezes_what_is_alive_and_sets_the_thresholds() -> None:
    # A fresh interpreter: freezing this test process's heap would outlive the test.
    script = (
        "import gc; from mrs.server.gc_tuning import tune_gc_for_server, SERVER_GC_THRESHOLDS\n"
        "before = gc.get_threshold(); previous = tune_gc_for_server()\n"
        "assert previous == before, (previous, before)\n"
        "assert gc.get_threshold() == SERVER_GC_THRESHOLDS, gc.get_threshold()\n"
        "assert gc.isenabled() and gc.get_freeze_count() > 1000, gc.get_freeze_count()\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_mrs_serve_refuses_a_bad_switch_in_one_line() -> None:
    config = "docs/examples/bus.toml"
    done = subprocess.run(
        [sys.executable, "-m", "mrs", "serve", "--config", config, "--group", "1"],
        capture_output=True,
        text=True,
        env={**os.environ, GC_ENV: "1,2"},
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == EXIT_USAGE
    assert done.stderr.strip().splitlines() == [
        "mrs: MRS_GC_THRESHOLDS: '1,2' is not 'off' or three integers gen0,gen1,gen2"
    ]
