"""The fit's compiled loops take logarithms and exponentials as ``math`` takes them, to the last
digit (numpy's own differ in the last place for about one value in twenty, which would move a
grade at a threshold away from what ``assess`` gives). The Theil-Sen kernel is held to the plain
fit in ``test_fit_arrays``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from portfolio_optimiser.context.fit_kernels import exps, logs


def test_exponentials_and_logarithms_are_maths_to_the_last_digit() -> None:
    rng = np.random.default_rng(7)
    exponents = np.r_[
        rng.normal(0, 3, 50_000), np.clip(rng.normal(0, 300, 5_000), -745, 709), [0.0, -0.0, 709.0]
    ]
    positives = np.r_[np.exp(rng.normal(0, 8, 50_000)), [1.0, 5e-324, 1.7e308]]
    assert exps(exponents).tolist() == [math.exp(v) for v in exponents.tolist()]
    assert logs(positives).tolist() == [math.log(v) for v in positives.tolist()]
    assert (np.exp(exponents) != exps(exponents)).any(), "numpy's would serve: no test here"


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_a_logarithm_of_no_positive_value_is_refused_as_math_refuses_it(bad: float) -> None:
    with pytest.raises(ValueError, match="math domain error"):
        logs(np.array([2.0, bad]))


def test_a_selection_puts_the_kth_value_in_its_place_whatever_the_ties() -> None:
    """The selection the medians rest on: the value at place ``k`` of the range sorted, with no
    larger value before it and no smaller after it (``middles`` selects on from there), and
    nothing outside the range touched — on values of few distinct prices, many, and none
    alike, as a class of one price and a project's slopes give them."""
    from portfolio_optimiser.context.compiled import _select

    rng = np.random.default_rng(11)
    for trial in range(3000):
        n = int(rng.integers(1, 120))
        values = [
            rng.integers(0, 3, n).astype(float),
            rng.integers(0, 40, n).astype(float),
            rng.standard_cauchy(n),
        ][trial % 3]
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
