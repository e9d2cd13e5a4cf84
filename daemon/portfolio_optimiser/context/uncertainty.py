"""A cost as a distribution: triple estimates simulated together, with correlation, seeded.

Norwegian projects are steered by two quantiles of their cost, not by the base estimate: the
styringsramme (P50) and the kostnadsramme (P85), set from triple estimates (low / most likely /
high) of the cost's elements. This module computes those quantiles, and what a measure does to
them, by a Monte Carlo simulation that is a pure function of its inputs and its seed, so the
validator can recompute every figure exactly.

* **Marginals.** An element is PERT (a beta on ``[low, high]`` with its mode at ``likely``,
  shape ``1 + 4 (likely - low) / (high - low)`` and ``1 + 4 (high - likely) / (high - low)``) or
  triangular. A triangular quantile is closed-form; a PERT quantile is the element's
  distribution function, tabulated on ``GRID`` points, inverted linearly (the exact inverse,
  ``betaincinv``, costs two microseconds a sample: forty seconds for two thousand elements).
  Either is tabulated once a shape against the normal score it is drawn from (``SCORES``), and
  a draw interpolates that table.
  A normal element has its mean at ``likely`` and ``low`` and ``high`` as its P10 and P90 (it is
  symmetric, and unbounded). An event (``probability`` below 1) costs its draw when it happens
  and nothing otherwise.
* **Correlation** by a Gaussian copula with one factor a group: an element of a group with
  coefficient ``rho`` draws its normal score as ``sqrt(rho) F + sqrt(1 - rho) e``, so two elements
  of a group correlate at ``rho`` in their scores, and elements of different groups (or of none)
  are independent. Ignoring a correlation understates the spread, and so P85.
* **Common random numbers.** Each element's and each group's draws come from a generator seeded
  by the seed and the element's (or group's) own name: adding an element moves no other draw, and
  a measure is applied to the very samples the frame was computed on, so its effect is not
  drowned in sampling noise. Measures are applied alone (each one's effect) and as a set (their
  joint effect: effects do not add at a quantile).
* **Enough samples.** The sample count doubles from ``samples`` until P85's distribution-free
  95 % interval is within ``STABLE_TO`` of it, ``MAX_SAMPLES`` is reached, or a doubling does not
  narrow it (``NARROWS``: P85 on a jump); ``stable_to`` says how close it came.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "GRID",
    "MAX_SAMPLES",
    "QUANTILES",
    "SAMPLES",
    "STABLE_TO",
    "Delta",
    "Effect",
    "Element",
    "Simulation",
    "simulate",
]

Floats = NDArray[np.float64]
Distribution = Literal["pert", "triangular", "normal"]

QUANTILES: Final = {"p10": 0.10, "p50": 0.50, "p85": 0.85, "p90": 0.90}
SAMPLES: Final = 10_000
MAX_SAMPLES: Final = 320_000
STABLE_TO: Final = 0.005
"""P85's 95 % interval, as a share of P85, that the sample count must reach."""
NARROWS: Final = 0.85
"""A doubling of the samples must narrow P85's interval to this share of what it was, or the
doubling stops: P85 on a jump stays as wide however many samples are drawn."""
GRID: Final = 513
"""Points a PERT distribution function is tabulated on, to be inverted."""
SCORE_STEP: Final = 0.005
SCORES: Final = np.arange(-8.0, 8.0 + SCORE_STEP / 2, SCORE_STEP)
"""The normal scores each marginal is tabulated at: a draw beyond eight deviations (one in
10^15) takes the table's end."""
_SCORE_SHARES: Final = np.array([statistics.NormalDist().cdf(s) for s in SCORES.tolist()])
P90_SCORE: Final = statistics.NormalDist().inv_cdf(0.9)
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(8)
SYMMETRY_NOK: Final = 0.5
"""How far a normal element's most likely figure may stand from the middle of its range: the
rounding of a figure written to the krone."""
HELD_VALUES: Final = 4_000_000
"""Draws of one correlation group held at once (32 MB); a larger group is drawn again."""
CURVE_POINTS: Final = 101
"""The S-curve: the total at 0 %, 1 %, … 100 %."""


@dataclass(frozen=True)
class Element:
    """One uncertain part of a cost: its triple estimate, its distribution and its group."""

    id: str
    low: float
    likely: float
    high: float
    distribution: Distribution = "pert"
    group: str | None = None
    probability: float = 1.0
    """Below 1: an event, costing its draw with this probability and nothing otherwise."""

    def __post_init__(self) -> None:
        if not self.low <= self.likely <= self.high:
            raise ValueError(f"{self.id}: low, likely and high must be in rising order")
        if self.distribution == "normal" and not math.isclose(
            self.likely - self.low, self.high - self.likely, abs_tol=SYMMETRY_NOK
        ):
            raise ValueError(
                f"{self.id}: a normal element's likely must be midway from low to high"
            )
        if not 0.0 < self.probability <= 1.0:
            raise ValueError(f"{self.id}: a probability must be above 0 and at most 1")

    @property
    def mean(self) -> float:
        """The marginal's mean (PERT: ``(low + 4 likely + high) / 6``), times its probability."""
        mean: float
        if self.distribution == "pert":
            mean = (self.low + 4 * self.likely + self.high) / 6
        elif self.distribution == "normal":
            mean = self.likely
        else:
            mean = (self.low + self.likely + self.high) / 3
        return self.probability * mean


@dataclass(frozen=True)
class Effect:
    """A measure applied to the simulated cost: each sample is lowered by ``share`` of the sum of
    its elements' draws in that sample (a measure that cuts a share of a scope cuts the same share
    of its uncertainty)."""

    id: str
    shares: Mapping[str, float]
    """Element id → the share of that element the measure removes."""


@dataclass(frozen=True)
class Delta:
    """What a measure (or a set of them) does to the frame's quantiles: negative lowers them."""

    p50: float
    p85: float


@dataclass(frozen=True)
class Simulation:
    """The simulated total: its quantiles, S-curve, largest contributors and measures' deltas."""

    seed: int
    samples: int
    mean: float
    quantiles: Mapping[str, float]
    curve: tuple[float, ...]
    """The total at 0 %, 1 %, … 100 % of the samples (``CURVE_POINTS``)."""
    contributions: tuple[tuple[str, float], ...]
    """Each element's share of the total's standard deviation (its covariance with the total over
    the total's deviation: they add up to it), largest first."""
    deviation: float
    stable_to: float
    """Half P85's distribution-free 95 % interval, as a share of P85."""
    effects: Mapping[str, Delta] = field(default_factory=dict)
    joint: Delta | None = None
    """``together``'s effect: a set of measures applied at once."""


def _stream(seed: int, name: str) -> np.random.Generator:
    """A generator of its own for ``name``: a stable hash of it and the seed (never Python's
    ``hash``, which a process salts)."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
    return np.random.default_rng([seed & 0xFFFFFFFF, *words])


def _cdf_table(shape_a: float, shape_b: float) -> Floats:
    """A standard beta's distribution function on ``GRID`` evenly spaced points of [0, 1]: its
    density integrated over each step by eight-point Gauss-Legendre, summed, and divided by the
    whole (the beta function). Both shapes are at least 1, so the density is bounded, but where
    a shape is not whole it is not smooth at that end (``x ** 0.04`` near 0): the two end steps
    are integrated apart (``_end_step``). Within 1e-9 of ``scipy.special.betainc``, far below the
    table's own linear inversion (``_standard``).

    Not scipy itself: it held 13 MB in every daemon that had simulated a frame, over the idle
    daemon's target (``bench_daemon``); ``tests/test_uncertainty.py`` holds this to it."""
    edges = np.linspace(0.0, 1.0, GRID)
    step = edges[1] - edges[0]
    x = edges[:-1, None] + step / 2 * (_NODES + 1.0)
    steps = (x ** (shape_a - 1.0) * (1.0 - x) ** (shape_b - 1.0)) @ _WEIGHTS * (step / 2)
    steps[0], steps[-1] = _end_step(shape_a, shape_b, step), _end_step(shape_b, shape_a, step)
    cdf: Floats = np.concatenate(([0.0], np.cumsum(steps)))
    table: Floats = cdf / cdf[-1]
    return table


def _end_step(shape_a: float, shape_b: float, width: float) -> float:
    """The beta density's integral over [0, ``width``] (the last step's is the mirror one's,
    shapes swapped). With x = width · u^(1/a) it is (width^a / a) ∫₀¹ (1 − width · u^(1/a))^(b−1)
    du: the factor that is not smooth at 0 is gone, and what is left hardly moves."""
    u = (_NODES + 1.0) / 2
    inner = (1.0 - width * u ** (1.0 / shape_a)) ** (shape_b - 1.0)
    return float(width**shape_a / shape_a * (inner @ _WEIGHTS) / 2)


@functools.lru_cache(maxsize=256)
def _standard(distribution: Distribution, r: float) -> Floats:
    """The standard marginal (on [0, 1], mode ``r``) at each of ``SCORES``: its quantile function
    composed with the normal distribution function, smooth in the score even where the quantile
    function is steep. Kept for the shapes last used (25 kB each): a project's lines share few."""
    u = _SCORE_SHARES
    if distribution == "triangular":
        found: Floats = np.where(u < r, np.sqrt(u * r), 1.0 - np.sqrt((1.0 - u) * (1.0 - r)))
    else:
        cdf = _cdf_table(1.0 + 4.0 * r, 1.0 + 4.0 * (1.0 - r))
        found = np.interp(u, cdf, np.linspace(0.0, 1.0, GRID))
    found.flags.writeable = False  # shared by every later call
    return found


def _draws_of(element: Element, score: Floats) -> Floats:
    """An element's draws from its normal scores: its standard marginal's table (``_standard``)
    interpolated linearly — a few passes over the samples, where a search of a table per sample
    took twelve times as long."""
    low, width = element.low, element.high - element.low
    if width <= 0:
        return np.full(len(score), float(low))
    if element.distribution == "normal":
        scaled: Floats = element.likely + (width / 2 / P90_SCORE) * score
        return scaled
    table = _standard(element.distribution, (element.likely - low) / width)
    at = np.clip((score - SCORES[0]) * (1.0 / SCORE_STEP), 0.0, len(SCORES) - 1.000001)
    k = at.astype(np.intp)
    before = table[k]
    standard = before + (at - k) * (table[k + 1] - before)
    drawn: Floats = low + width * standard
    return drawn


def _element_draws(
    element: Element, rho: Mapping[str, float], seed: int, n: int, factors: dict[str, Floats]
) -> Floats:
    """An element's ``n`` draws, the same each time they are asked for: its normal scores from its
    own stream (mixed with its group's factor, kept in ``factors``), then its marginal; an event's
    happening drawn after them from the same stream."""
    stream = _stream(seed, "element:" + element.id)
    score = stream.standard_normal(n)
    coefficient = rho.get(element.group, 0.0) if element.group else 0.0
    if coefficient > 0.0:
        assert element.group is not None
        factor = factors.get(element.group)
        if factor is None:
            factor = factors[element.group] = _stream(
                seed, "group:" + element.group
            ).standard_normal(n)
        score = math.sqrt(coefficient) * factor + math.sqrt(1.0 - coefficient) * score
    x = _draws_of(element, score)
    if element.probability < 1.0:
        x = np.where(stream.random(n) < element.probability, x, 0.0)
    return x


def _draws(
    elements: Sequence[Element],
    rho: Mapping[str, float],
    effects: Sequence[Effect],
    seed: int,
    n: int,
) -> tuple[Floats, Floats, list[Floats]]:
    """(the total of each sample, each element's covariance with it, each effect's removal in
    each sample).

    An element's covariance with the total is its covariance with its own group's sum (with
    itself, alone in no group): elements of different groups are independent, so that is what
    the rest of the total adds in expectation. The elements are drawn a group at a time; a
    group's draws are held for it while they fit in ``HELD_VALUES``, and drawn again otherwise
    (a table of thousands of lines in one group would need gigabytes)."""
    total = np.zeros(n)
    removed = [np.zeros(n) for _ in effects]
    covariance = np.zeros(len(elements))
    place = {element.id: i for i, element in enumerate(elements)}
    touching: dict[str, list[tuple[int, float]]] = {}
    for i, effect in enumerate(effects):
        for name, share in effect.shares.items():
            touching.setdefault(name, []).append((i, share))
    ordered = sorted(elements, key=lambda e: (e.group is not None, e.group or ""))
    for group, found in itertools.groupby(ordered, key=lambda e: e.group):
        members = list(found)
        factors: dict[str, Floats] = {}
        hold = group is not None and len(members) * n <= HELD_VALUES
        held: list[tuple[int, Floats]] = []
        summed = np.zeros(n)
        for element in members:
            x = _element_draws(element, rho, seed, n, factors)
            total += x
            for i, share in touching.get(element.id, ()):
                removed[i] += share * x
            if group is None:
                covariance[place[element.id]] = float(x.var())
                continue
            summed += x
            if hold:
                held.append((place[element.id], x))
        if group is None:
            continue
        centred = summed - summed.mean()
        again = (
            held
            if hold
            else ((place[e.id], _element_draws(e, rho, seed, n, factors)) for e in members)
        )
        for i, x in again:
            covariance[i] = float(np.dot(x - x.mean(), centred)) / n
    return total, covariance, removed


def _at(ordered: Floats, shares: Sequence[float] | Floats) -> Floats:
    """Sorted samples' quantiles at ``shares``, as ``np.quantile`` takes them (linearly between
    the two order statistics about ``share * (n - 1)``), without sorting again for each."""
    place = np.asarray(shares, dtype=np.float64) * (len(ordered) - 1)
    below = np.floor(place).astype(np.intp)
    above = np.minimum(below + 1, len(ordered) - 1)
    found: Floats = ordered[below] + (place - below) * (ordered[above] - ordered[below])
    return found


def _quantiles(ordered: Floats) -> dict[str, float]:
    found = _at(ordered, list(QUANTILES.values()))
    return {name: float(v) for name, v in zip(QUANTILES, found, strict=True)}


def _stability(ordered: Floats) -> float:
    """Half the distribution-free 95 % interval of P85 (its order statistics), as a share of it."""
    half = 1.96 * math.sqrt(0.85 * 0.15 / len(ordered))
    lo, p85, hi = _at(ordered, [max(0.85 - half, 0.0), 0.85, min(0.85 + half, 1.0)]).tolist()
    return (hi - lo) / 2 / abs(p85) if p85 else 0.0


def _delta(total: Floats, removed: Floats, base: Mapping[str, float]) -> Delta:
    """What removing ``removed`` from each sample does to P50 and P85, read as the base was."""
    after = _at(np.sort(total - removed), [QUANTILES["p50"], QUANTILES["p85"]])
    return Delta(p50=float(after[0]) - base["p50"], p85=float(after[1]) - base["p85"])


def simulate(
    elements: Sequence[Element],
    *,
    correlation: Mapping[str, float] | None = None,
    effects: Sequence[Effect] = (),
    together: Effect | None = None,
    seed: int,
    samples: int = SAMPLES,
) -> Simulation:
    """The total of ``elements`` simulated from ``seed``: quantiles, S-curve, contributors, each
    of ``effects`` alone, and ``together`` (a set of measures as one effect: ``joint``), all on
    the same samples."""
    rho = dict(correlation or {})
    for group, coefficient in rho.items():
        if not 0.0 <= coefficient <= 1.0:
            raise ValueError(f"correlation of {group}: {coefficient} is not between 0 and 1")
    ids = [element.id for element in elements]
    if len(set(ids)) != len(ids):
        raise ValueError("two elements share an id")
    n = max(int(samples), 100)
    before = math.inf
    while True:
        total, covariance, removed = _draws(
            elements, rho, [*effects, *([together] if together else [])], seed, n
        )
        ordered = np.sort(total)
        stable_to = _stability(ordered)
        # Twice the samples narrow the interval by about 1/sqrt(2); one that does not narrow
        # sits on a jump (an event's probability at P85), which no sample count smooths.
        if stable_to <= STABLE_TO or n >= MAX_SAMPLES or stable_to > NARROWS * before:
            break
        before, n = stable_to, min(n * 2, MAX_SAMPLES)
    quantiles = _quantiles(ordered)
    deviation = float(total.std())
    order = np.argsort(-covariance, kind="stable")
    contributions = tuple(
        (ids[i], float(covariance[i]) / deviation if deviation else 0.0) for i in order.tolist()
    )
    curve = _at(ordered, np.linspace(0.0, 1.0, CURVE_POINTS))
    return Simulation(
        seed=seed,
        samples=n,
        mean=float(total.mean()),
        quantiles=quantiles,
        curve=tuple(float(v) for v in curve),
        contributions=contributions,
        deviation=deviation,
        stable_to=stable_to,
        effects={
            e.id: _delta(total, r, quantiles)
            for e, r in zip(effects, removed[: len(effects)], strict=True)
        },
        joint=_delta(total, removed[-1], quantiles) if together else None,
    )
