"""An independent implementation of the frame's model, written with ``scipy.stats``, for the tests
to hold the product's simulation to: its own random numbers (one generator, drawn in its own
order), scipy's exact quantile functions (the product tabulates and interpolates its own), and
the model as the README states it:

* an element is a PERT (beta on [low, high], shapes 1 + 4 (mode - low) / range and
  1 + 4 (high - mode) / range), triangular or normal (low and high its P10 and P90) triple;
* a driver is such a triple on a multiplier of the elements that name it, one draw a sample;
* an element of a group with coefficient rho has the normal score sqrt(rho) F + sqrt(1 - rho) e,
  F the group's factor (a driver's own score where the group is named as a driver); an event of
  a group happens when its own such score (another e) lies above the normal quantile at 1 - p;
* the factors and drivers' scores named in ``between`` are drawn together from scipy's
  multivariate normal with that correlation matrix, the others independently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from scipy import stats

Floats = NDArray[np.float64]


@dataclass(frozen=True)
class Part:
    low: float
    likely: float
    high: float
    distribution: str = "pert"
    group: str | None = None
    probability: float = 1.0
    drivers: tuple[str, ...] = field(default=())


def quantile(part: Part, u: Floats) -> Floats:
    """The part's exact quantile function at shares ``u`` (scipy's)."""
    low, likely, high = part.low, part.likely, part.high
    if high == low:
        return np.full(len(u), float(low))
    if part.distribution == "normal":
        sd = (high - low) / 2 / stats.norm.ppf(0.9)
        return np.asarray(stats.norm.ppf(u, loc=likely, scale=sd), dtype=np.float64)
    if part.distribution == "triangular":
        c = (likely - low) / (high - low)
        return np.asarray(stats.triang.ppf(u, c, loc=low, scale=high - low), dtype=np.float64)
    a = 1 + 4 * (likely - low) / (high - low)
    b = 1 + 4 * (high - likely) / (high - low)
    return np.asarray(stats.beta.ppf(u, a, b, loc=low, scale=high - low), dtype=np.float64)


def totals(
    parts: Sequence[Part],
    drivers: Mapping[str, Part] | None = None,
    correlation: Mapping[str, float] | None = None,
    *,
    between: Mapping[tuple[str, str], float] | None = None,
    samples: int = 200_000,
    seed: int = 20_251,
) -> Floats:
    """Every sample's total."""
    rng = np.random.default_rng(seed)
    rho = dict(correlation or {})
    drivers = dict(drivers or {})
    factor = {name: rng.standard_normal(samples) for name in sorted({*drivers, *rho})}
    if between:
        names = sorted({name for pair in between for name in pair})
        matrix = np.eye(len(names))
        for (a, b), r in between.items():
            i, j = names.index(a), names.index(b)
            matrix[i, j] = matrix[j, i] = r
        joint = stats.multivariate_normal(cov=matrix, allow_singular=True).rvs(
            size=samples, random_state=rng
        )
        factor.update({name: joint[:, i] for i, name in enumerate(names)})
    multiplier = {
        name: quantile(part, stats.norm.cdf(factor[name])) for name, part in drivers.items()
    }
    total = np.zeros(samples)
    for part in parts:
        c = rho.get(part.group, 0.0) if part.group else 0.0

        def score(c: float = c, part: Part = part) -> Floats:
            own = rng.standard_normal(samples)
            if part.group is None or c == 0:
                return own
            return np.sqrt(c) * factor[part.group] + np.sqrt(1 - c) * own

        value = quantile(part, stats.norm.cdf(score()))
        if part.probability < 1:
            value = np.where(score() > stats.norm.ppf(1 - part.probability), value, 0.0)
        for name in part.drivers:
            value = value * multiplier[name]
        total += value
    return total


def p(values: Floats, share: float) -> float:
    return float(np.quantile(values, share))
