"""The benchmark's quick mode: it runs in-process, prints its table, and every target holds.

One run serves both tests (a module fixture): the first says the benchmark works and reports all
four measures, the second that the pipeline meets the targets (it fails while a target is missed,
with the table in its message).
"""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.bench.bench_pipeline import HEADER, main


@pytest.fixture(scope="module")
def quick_run() -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--quick"])
    return code, out.getvalue()


def test_quick_benchmark_prints_the_table(quick_run: tuple[int, str]) -> None:
    _code, out = quick_run
    assert HEADER in out
    for measure in ("pipeline overhead", "projects at concurrency", "prompt size", "re-run"):
        assert measure in out, out


def test_quick_benchmark_meets_every_target(quick_run: tuple[int, str]) -> None:
    code, out = quick_run
    assert code == 0, out
