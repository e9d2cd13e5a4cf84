"""A cost as a distribution: triple estimates and uncertainty drivers simulated together, with
correlation, seeded, each figure with its Monte Carlo error.

Norwegian projects are steered by two quantiles of their cost, not by the base estimate: the
styringsramme (P50) and the kostnadsramme (P85), set from triple estimates (low / most likely /
high) of the cost's elements and from general uncertainty drivers (market, complexity, estimate
maturity) that act on many elements at once. This module computes those quantiles, and what a
measure does to them, by a Monte Carlo simulation that is a pure function of its inputs and its
seed (``uncertainty_marginals`` draws the marginals).

* **Elements and drivers.** An element is a triple estimate in NOK (PERT, triangular or normal);
  an event (``probability`` below 1) costs its draw when it happens and nothing otherwise. A
  driver is a triple on a multiplier (0.95 / 1.00 / 1.15) that multiplies the draws of every
  element naming it: one draw a sample for all of them, so a driver's spread does not average
  out however finely the estimate is broken down.
* **Correlation** by a Gaussian copula with one factor a group: an element of a group with
  coefficient ``rho`` draws its normal score as ``sqrt(rho) F + sqrt(1 - rho) e``, so two elements
  of a group correlate at ``rho`` in their normal scores (not in their costs). An event of a group
  draws whether it happens the same way: events of a group tend to happen together. A group named
  as a driver is that driver's score: an element may follow a driver.
* **Common random numbers.** Each element's, driver's and group's draws come from a stream keyed
  by the seed and its own name (``uncertainty_marginals.Stream``): adding an element moves no
  other draw, and a measure is applied to the very samples the frame was computed on, so its
  effect is not drowned in noise.
* **Honest precision.** Quantiles are Harrell-Davis-smoothed (``uncertainty_figures``), and every figure
  carries its standard error, by the delete-a-group jackknife over ``BATCHES`` groups of the
  samples (the same module); the sample count doubles from ``samples`` until P85,
  the reserve (P85 - P50) and each measure's ΔP85 are within their targets (``TARGETS``), until
  ``MAX_SAMPLES``, or until three doublings do not narrow the worst of them (``NARROWS``: P85 on a
  jump, where an event's probability falls, stays as wide however many samples are drawn).
* **What drives the spread**, two ways, each for what it is: each element's and driver's share
  of the total's standard deviation (its covariance with the total over the total's deviation:
  the shares add up to it), and a swing (the expected total with that one held at its P10 and at
  its P90, the others drawn as usual).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from .uncertainty_draws import Draws, Mixing, draw, element_draws, joined, swing_of
from .uncertainty_figures import BATCHES, Figures, at, figures, forget_weights, jackknife, smoothed
from .uncertainty_marginals import Distribution, Floats, forget

__all__ = [
    "BATCHES",
    "MAX_SAMPLES",
    "QUANTILES",
    "SAMPLES",
    "STABLE_TO",
    "TARGETS",
    "Delta",
    "Driver",
    "Effect",
    "Element",
    "Simulation",
    "Swing",
    "simulate",
]

QUANTILES: Final = {"p10": 0.10, "p50": 0.50, "p85": 0.85, "p90": 0.90}
SAMPLES: Final = 10_000
MAX_SAMPLES: Final = 320_000
Z95: Final = 1.96
TARGETS: Final = {"p85": 0.005, "reserve": 0.02, "delta_p85": 0.05, "delta_p85_nok": 20_000.0}
"""Half the 95 % interval each figure must reach: P85 and the reserve as a share of themselves,
a measure's ΔP85 as a share of itself or within 20 000 NOK, whichever is wider."""
STABLE_TO: Final = TARGETS["p85"]
NARROWS: Final = 0.85
"""Each doubling of the samples must narrow the widest figure's interval to about this share of
what it was (twice the samples narrow it by about 1/sqrt(2)): over three doublings, to its
cube, or the doubling stops."""
SYMMETRY_NOK: Final = 0.5
"""How far a normal element's most likely figure may stand from the middle of its range: the
rounding of a figure written to the krone."""
CURVE_POINTS: Final = 101
"""The S-curve: the total at 0 %, 1 %, … 100 %."""


@dataclass(frozen=True)
class Element:
    """One uncertain part of a cost: its triple estimate, its distribution, its group and the
    drivers that multiply it."""

    id: str
    low: float
    likely: float
    high: float
    distribution: Distribution = "pert"
    group: str | None = None
    probability: float = 1.0
    """Below 1: an event, costing its draw with this probability and nothing otherwise."""
    drivers: tuple[str, ...] = ()
    account: str | None = None
    """The account (NS 3451 building part) the element is part of: each account's own
    quantiles are reported (its P-curve)."""

    def __post_init__(self) -> None:
        _ordered(self.id, self.low, self.likely, self.high, self.distribution)
        if not 0.0 < self.probability <= 1.0:
            raise ValueError(f"{self.id}: a probability must be above 0 and at most 1")

    @property
    def mean(self) -> float:
        """The marginal's mean (PERT: ``(low + 4 likely + high) / 6``), times its probability."""
        return self.probability * _mean(self.low, self.likely, self.high, self.distribution)


@dataclass(frozen=True)
class Driver:
    """A general uncertainty: a triple on a multiplier of the elements that name it."""

    id: str
    low: float
    likely: float
    high: float
    distribution: Distribution = "pert"

    def __post_init__(self) -> None:
        _ordered(self.id, self.low, self.likely, self.high, self.distribution)
        if self.low < 0:
            raise ValueError(f"{self.id}: a driver multiplies a cost; its low must be at least 0")


def _ordered(name: str, low: float, likely: float, high: float, distribution: str) -> None:
    if not low <= likely <= high:
        raise ValueError(f"{name}: low, likely and high must be in rising order")
    if distribution == "normal" and not math.isclose(
        likely - low, high - likely, abs_tol=SYMMETRY_NOK
    ):
        raise ValueError(f"{name}: a normal element's likely must be midway from low to high")


def _mean(low: float, likely: float, high: float, distribution: str) -> float:
    if distribution == "pert":
        return (low + 4 * likely + high) / 6
    if distribution == "normal":
        return likely
    return (low + likely + high) / 3


@dataclass(frozen=True)
class Effect:
    """A measure applied to the simulated cost: each sample is lowered by ``fixed`` (sums off its
    elements, their spread kept) and by ``shares`` of its elements' draws in that sample (a share
    of a scope, and so of its spread), the whole times the measure's own draw of its size when it
    has a ``spread`` (its low, likely and high as multipliers of its size, e.g. 0.5 / 1 / 1.2).
    Applied together, measures never take more off an element than its most likely figure (the
    sums) or its whole draw (the shares)."""

    id: str
    shares: Mapping[str, float] = field(default_factory=dict)
    """Element id → the share of that element the measure removes."""
    fixed: Mapping[str, float] = field(default_factory=dict)
    """Element id → the sum the measure takes off that element."""
    spread: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class Delta:
    """What a measure (or a set of them) does to the frame's quantiles: negative lowers them;
    each with its standard error."""

    p50: float
    p85: float
    p50_error: float = 0.0
    p85_error: float = 0.0


@dataclass(frozen=True)
class Swing:
    """The expected total with one element or driver held at its P10 and at its P90."""

    id: str
    at_p10: float
    at_p90: float

    @property
    def width(self) -> float:
        return abs(self.at_p90 - self.at_p10)


@dataclass(frozen=True)
class Simulation:
    """The simulated total: its quantiles and their errors, S-curve, what drives its spread and
    the measures' deltas."""

    seed: int
    samples: int
    mean: float
    quantiles: Mapping[str, float]
    errors: Mapping[str, float]
    """Each quantile's, the mean's and the reserve's (``reserve``: P85 - P50) standard error."""
    curve: tuple[float, ...]
    """The total at 0 %, 1 %, … 100 % of the samples (``CURVE_POINTS``)."""
    contributions: tuple[tuple[str, float], ...]
    """Each element's and driver's share of the total's standard deviation (they add up to it),
    largest first."""
    swings: tuple[Swing, ...]
    """Each element's and driver's swing, widest first."""
    deviation: float
    stable_to: float
    """Half P85's 95 % interval, as a share of P85."""
    effects: Mapping[str, Delta] = field(default_factory=dict)
    joint: Delta | None = None
    """``together``'s effect: a set of measures applied at once."""
    accounts: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """Each account's own P10, P50, P85 and P90 (they do not add up to the total's)."""


_SHARES: Final = [QUANTILES["p50"], QUANTILES["p85"]]
_ALL: Final = list(QUANTILES.values())


def _delta(after: Floats, base: Figures) -> Delta:
    """What a removal does to P50 and P85 (``after``: the samples less it), and the errors of
    both: on the same samples, most of the noise cancels."""
    moved, _ordered = figures(after, _SHARES)
    full = moved.full - base.full[1:3]
    errors = jackknife(moved.left - base.left[:, 1:3])
    return Delta(
        p50=float(full[0]),
        p85=float(full[1]),
        p50_error=float(errors[0]),
        p85_error=float(errors[1]),
    )


def _short(
    quantiles: Mapping[str, float], errors: Mapping[str, float], deltas: Sequence[Delta]
) -> float:
    """How far the widest figure is from its target: 1 or less, every one is within it."""

    def ratio(error: float, allowed: float) -> float:
        return 0.0 if error == 0 else Z95 * error / allowed if allowed > 0 else math.inf

    found = [
        ratio(errors["p85"], TARGETS["p85"] * abs(quantiles["p85"])),
        ratio(errors["reserve"], TARGETS["reserve"] * abs(quantiles["p85"] - quantiles["p50"])),
    ]
    found += [
        ratio(d.p85_error, max(TARGETS["delta_p85"] * abs(d.p85), TARGETS["delta_p85_nok"]))
        for d in deltas
    ]
    return max(found)


def simulate(
    elements: Sequence[Element],
    *,
    drivers: Sequence[Driver] = (),
    correlation: Mapping[str, float] | None = None,
    effects: Sequence[Effect] = (),
    together: Sequence[str] = (),
    between: Mixing | None = None,
    seed: int,
    samples: int = SAMPLES,
) -> Simulation:
    """The total of ``elements`` simulated from ``seed``: quantiles, S-curve, what drives the
    spread, each of ``effects`` alone, and those named in ``together`` applied at once
    (``joint``: effects do not add at a quantile), all on the same samples. ``between``:
    (factor names, their correlation matrix) across groups and drivers, positive semi-definite
    (``context.correlation`` checks and repairs it)."""
    rho = dict(correlation or {})
    for group, coefficient in rho.items():
        if not 0.0 <= coefficient <= 1.0:
            raise ValueError(f"correlation of {group}: {coefficient} is not between 0 and 1")
    ids = [element.id for element in elements] + [driver.id for driver in drivers]
    if len(set(ids)) != len(ids):
        raise ValueError("two elements or drivers share an id")
    known = {driver.id for driver in drivers}
    for element in elements:
        for name in element.drivers:
            if name not in known:
                raise ValueError(f"{element.id}: driver {name!r} is not one of the drivers given")
    try:
        return _simulated(elements, drivers, rho, effects, together, between, seed, samples)
    finally:
        forget()
        forget_weights()


def _simulated(
    elements: Sequence[Element],
    drivers: Sequence[Driver],
    rho: Mapping[str, float],
    effects: Sequence[Effect],
    together: Sequence[str],
    between: Mixing | None,
    seed: int,
    samples: int,
) -> Simulation:
    """Rounds of samples drawn until every figure is within its target."""
    n = max(int(samples), 100 * BATCHES // 10)
    shorts: list[float] = []
    rounds: list[Draws] = []
    while True:
        size = n - sum(len(r.total) for r in rounds)
        rounds.append(
            draw(elements, drivers, rho, effects, together, seed, size, len(rounds), between)
        )
        found = joined(rounds)
        base, ordered = figures(found.total, _ALL)
        quantiles = {name: float(v) for name, v in zip(QUANTILES, base.full, strict=True)}
        errors = {name: float(v) for name, v in zip(QUANTILES, jackknife(base.left), strict=True)}
        errors["reserve"] = float(jackknife(base.left[:, 2] - base.left[:, 1])[()])
        errors["mean"] = float(found.total.std() / math.sqrt(n))
        deltas = [_delta(found.total - removed, base) for removed in found.removed]
        shorts.append(_short(quantiles, errors, deltas[: len(effects)]))
        # Eight times the samples narrow every error to 0.35 of what it was; what they do not
        # narrow to NARROWS cubed sits on a jump (an event's probability at P85), which no
        # sample count smooths. Three doublings, not one: an error measured is itself noisy.
        stuck = len(shorts) >= 4 and shorts[-1] > NARROWS**3 * shorts[-4]
        if shorts[-1] <= 1.0 or n >= MAX_SAMPLES or stuck:
            break
        n = min(n * 2, MAX_SAMPLES)
    return _simulation(
        elements,
        drivers,
        rho,
        seed,
        found,
        ordered,
        quantiles,
        errors,
        deltas,
        effects,
        bool(together),
    )


def _simulation(
    elements: Sequence[Element],
    drivers: Sequence[Driver],
    rho: Mapping[str, float],
    seed: int,
    found: Draws,
    ordered: Floats,
    quantiles: Mapping[str, float],
    errors: Mapping[str, float],
    deltas: Sequence[Delta],
    effects: Sequence[Effect],
    joint: bool,
) -> Simulation:
    """The figures of the last draw, with what drives the spread: a second pass over the
    elements, against the total, on the first round's samples (the shares scaled to add up to
    the whole deviation)."""
    total, mean = found.total, float(found.total.mean())
    deviation = float(total.std())
    first = found.rounds[0]
    part = total[:first]
    centred = part - part.mean()
    variance = float(part.var())
    # Each one's covariance with the first round's total, over that total's variance: shares
    # of it that add up to 1, then of the whole deviation.
    scale = deviation / variance if variance else 0.0

    def share(x: Floats) -> float:
        return float(np.dot(x - x.mean(), centred)) / first * scale

    shares: list[tuple[str, float]] = []
    swings: list[Swing] = []
    for element in elements:
        x, multiplier = element_draws(element, rho, seed, found)
        shares.append((element.id, share(x)))
        swings.append(Swing(*swing_of(element, x, multiplier, mean)))
    for driver in drivers:
        shares.append((driver.id, share(found.added[driver.id][:first])))
        swings.append(Swing(*found.driver_swing(driver, mean)))
    stable_to = Z95 * errors["p85"] / abs(quantiles["p85"]) if quantiles["p85"] else 0.0
    return Simulation(
        seed=seed,
        samples=len(total),
        mean=mean,
        quantiles=quantiles,
        errors=errors,
        curve=tuple(float(v) for v in at(ordered, np.linspace(0.0, 1.0, CURVE_POINTS))),
        contributions=tuple(sorted(shares, key=lambda s: -s[1])),
        swings=tuple(sorted(swings, key=lambda s: -s.width)),
        deviation=deviation,
        stable_to=stable_to,
        effects={e.id: d for e, d in zip(effects, deltas[: len(effects)], strict=True)},
        accounts={
            name: dict(zip(QUANTILES, smoothed(np.sort(sums), _ALL).tolist(), strict=True))
            for name, sums in sorted(found.accounts.items())
        },
        joint=deltas[-1] if joint else None,
    )
