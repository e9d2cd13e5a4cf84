"""The fit's compiled loops take logarithms and exponentials as ``math`` takes them, to the last
digit (numpy's own differ in the last place for about one value in twenty, which would move a
grade at a threshold away from what ``assess`` gives). The Theil-Sen kernel is held to the plain
fit in ``test_fit_arrays``."""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest

from portfolio_optimiser.context import fit_kernels
from portfolio_optimiser.context.fit_kernels import MIDDLE, exps, logs

from .fresh import fresh_python


@pytest.fixture(params=["compiled", "numpy"])
def loops(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(fit_kernels, "COMPILED_FROM", 0 if request.param == "compiled" else 10**12)
    return str(request.param)


def test_exponentials_and_logarithms_are_maths_to_the_last_digit(loops: str) -> None:
    rng = np.random.default_rng(7)
    exponents = np.r_[
        rng.normal(0, 3, 50_000), np.clip(rng.normal(0, 300, 5_000), -745, 709), [0.0, -0.0, 709.0]
    ]
    positives = np.r_[np.exp(rng.normal(0, 8, 50_000)), [1.0, 5e-324, 1.7e308]]
    assert exps(exponents).tolist() == [math.exp(v) for v in exponents.tolist()]
    assert logs(positives).tolist() == [math.log(v) for v in positives.tolist()]
    if not (np.exp(exponents) != exps(exponents)).any():
        # numpy's own exponential differs from the C library's only where it has AVX-512 loops;
        # on a CPU without them the two agree, and the figures above are all there is to check.
        pytest.skip(
            "numpy's exp is the C library's on this CPU (no AVX-512): nothing to tell apart"
        )


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_a_logarithm_of_no_positive_value_is_refused_as_math_refuses_it(
    bad: float, loops: str
) -> None:
    with pytest.raises(ValueError, match="math domain error"):
        logs(np.array([2.0, bad]))


def _awkward(rng: np.random.Generator, n: int, trial: int) -> np.ndarray:
    """``n`` values of the trial's kind: few distinct (a class of one price), some, a heavy
    tail (a project's slopes), or a sorted run."""
    kind = trial % 4
    if kind < 2:
        return rng.integers(0, (3, 40)[kind], n).astype(float)
    return rng.standard_cauchy(n) if kind == 2 else np.sort(rng.normal(size=n))


def test_a_selection_puts_the_kth_value_in_its_place_whatever_the_ties() -> None:
    """The selection the medians rest on: the value at place ``k`` of the range sorted, with no
    larger value before it and no smaller after it (``middles`` selects on from there), and
    nothing outside the range touched — on values of few distinct prices, many, and none
    alike, as a class of one price and a project's slopes give them."""
    from portfolio_optimiser.context.compiled import _select

    rng = np.random.default_rng(11)
    for trial in range(3000):
        n = int(rng.integers(1, 120))
        values = _awkward(rng, n, trial)
        lo = int(rng.integers(0, n))
        hi = int(rng.integers(lo, n))
        k = int(rng.integers(lo, hi + 1))
        placed = values.copy()
        found = _select(placed, lo, hi, k)
        assert found == np.sort(values[lo : hi + 1])[k - lo] == placed[k]
        assert (placed[lo:k] <= found).all() and (placed[k + 1 : hi + 1] >= found).all()
        assert np.array_equal(placed[:lo], values[:lo]) and np.array_equal(
            placed[hi + 1 :], values[hi + 1 :]
        )
        assert sorted(placed[lo : hi + 1]) == sorted(values[lo : hi + 1])


def test_a_small_portfolio_never_loads_the_compiler() -> None:
    """Below ``COMPILED_FROM`` lines the fit runs over numpy arrays: numba, with the 110 MB it
    keeps in the process, is not loaded (a fresh interpreter, as a small daemon starts)."""
    script = (
        "import sys\n"
        "from portfolio_optimiser.context.reference import ReferenceIndex, Comparable\n"
        "classes = {(f'K{k}', 'm2'): tuple(Comparable(f'p{p}', 's', 100.0 + p * k, None)"
        " for p in range(30)) for k in range(12)}\n"
        "index = ReferenceIndex(classes)\n"
        "assert index.fit.assess('p3', None, [('K1.0', 'K1', 'm2', 900.0, 10.0)]).lines\n"
        "print('numba' in sys.modules)\n"
    )
    assert fresh_python(script).strip() == "False"


def test_numpy_asks_for_no_huge_pages_unless_the_user_says_so() -> None:
    """The package turns numpy's huge-page advice off before numpy is imported (the kernel's
    compaction at first touch stalled every event's fit); a value set by the user is kept."""
    script = (
        "import portfolio_optimiser.context.fit_kernels\n"
        "from numpy._core import multiarray\n"
        "print(multiarray._set_madvise_hugepage(False))\n"  # returns what it was
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    for given, advised in ((None, "False"), ("1", "True")):
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
            env=env if given is None else env | {"NUMPY_MADVISE_HUGEPAGE": given},
        )
        assert done.stdout.strip() == advised, done.stderr


def test_a_median_of_a_projects_slopes_is_the_median_of_statistics() -> None:
    """The median the levels take of a project's slopes (hundreds to thousands of them): the
    same as ``statistics.median`` on ties, heavy tails and sorted runs."""
    from portfolio_optimiser.context.compiled import _median

    rng = np.random.default_rng(7)
    for trial in range(600):
        n = int(rng.integers(1, 3000))
        values = _awkward(rng, n, trial)
        assert _median(values.copy(), n) == statistics.median(values.tolist())


def test_the_middle_places_of_a_class_of_thousands_are_its_sorted_values_there() -> None:
    from portfolio_optimiser.context.compiled import middles

    rng = np.random.default_rng(8)
    sizes = [0, 1, 2, 3, 255, 256, 999, 10_000]
    values = np.concatenate(
        [rng.integers(0, 5 + 50 * (g % 2), n).astype(float) for g, n in enumerate(sizes)]
    )
    order = rng.permutation(len(values)).astype(np.int64)
    start = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    out = np.full((len(sizes), MIDDLE), np.nan)
    middles(values, order, start, out)
    for g, n in enumerate(sizes):
        ordered = np.sort(values[order[start[g] : start[g + 1]]])
        first = max((n - 2) // 2, 0)
        expected = [ordered[first + t] if first + t < n else np.nan for t in range(MIDDLE)]
        assert np.array_equal(out[g], expected, equal_nan=True), n
