"""The benchmark's quick mode runs end to end and prints its table.

Speed targets are not asserted here: timings on a shared two-core machine are the benchmark's to
report (tests/bench/README.md), not a test's to gate. The two measures that are not timings — the
prompt stays bounded, an unchanged project consults no checker, and a first-turn approval costs
at most two model calls a candidate — are asserted.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.bench._table import HEADER
from tests.bench.bench_pipeline import main


@pytest.fixture(scope="module")
def quick_run() -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--quick"])
    return code, out.getvalue()


def test_quick_benchmark_prints_the_table(quick_run: tuple[int, str]) -> None:
    _code, out = quick_run
    assert HEADER in out
    for measure in (
        "our own time per model call",
        "Agent Framework and the SDK alone",
        "against a reasoning store of",
        "projects at concurrency",
        "prompt size",
        "re-run",
    ):
        assert measure in out, out


def _row(out: str, measure: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"| {measure}"))


def test_the_prompt_stays_a_fraction_of_the_bundle(quick_run: tuple[int, str]) -> None:
    _code, out = quick_run
    assert _row(out, "prompt size").endswith("| yes |"), out


def test_rerunning_an_unchanged_project_consults_no_checker(quick_run: tuple[int, str]) -> None:
    _code, out = quick_run
    assert _row(out, "re-run").endswith("| yes |"), out


def test_a_checker_approving_at_once_costs_at_most_two_calls_a_candidate(
    quick_run: tuple[int, str],
) -> None:
    _code, out = quick_run
    assert _row(out, "model calls per candidate").endswith("| yes |"), out
