"""The find-and-learn benchmark's quick run: every target but the timing is asserted here (the
timing is the benchmark's to report, tests/bench/README.md)."""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.bench._table import HEADER
from tests.bench.bench_learning import main


@pytest.fixture(scope="module")
def quick_run() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["--quick"])
    return out.getvalue()


@pytest.mark.loadbearing
def test_every_target_but_the_timing_is_met(quick_run: str) -> None:
    assert HEADER in quick_run
    rows = [line for line in quick_run.splitlines() if line.startswith("| seed ")]
    assert len(rows) == 7, quick_run
    for row in rows:
        if "rounds, offline" not in row:
            assert row.endswith("| yes |"), row
