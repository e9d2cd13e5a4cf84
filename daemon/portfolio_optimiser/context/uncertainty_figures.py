"""A simulation's figures from its samples: quantiles read as ``np.quantile`` reads them (the
S-curve), Harrell-Davis-smoothed (every figure a frame reports), and their standard errors by
the delete-a-group jackknife."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from .uncertainty_marginals import Floats

__all__ = ["BATCHES", "Figures", "at", "figures", "forget_weights", "jackknife", "smoothed"]

BATCHES: Final = 20
"""Groups the samples are cut into, each left out in turn, to measure a figure's error."""


def at(ordered: Floats, shares: Sequence[float] | Floats) -> Floats:
    """Sorted samples' quantiles at ``shares`` (the last axis), as ``np.quantile`` takes them
    (linearly between the two order statistics about ``share * (n - 1)``)."""
    count = ordered.shape[-1]
    place = np.asarray(shares, dtype=np.float64) * (count - 1)
    below = np.floor(place).astype(np.intp)
    above = np.minimum(below + 1, count - 1)
    low, high = ordered[..., below], ordered[..., above]
    found: Floats = low + (place - below) * (high - low)
    return found


_REACH: Final = 6.0
"""Standard deviations of an order statistic's rank the smoothing weights reach to."""


@functools.lru_cache(maxsize=64)
def _weights(count: int, share: float) -> tuple[int, Floats]:
    """Harrell-Davis weights in their normal limit: the order statistics about rank
    ``share * (count - 1)``, each weighted by how likely it is to be the quantile's rank (a
    normal with the order statistic's own deviation, ``sqrt(count * share * (1 - share))``)."""
    centre = share * (count - 1)
    deviation = max(math.sqrt(count * share * (1.0 - share)), 0.5)
    first = max(0, math.floor(centre - _REACH * deviation))
    last = min(count - 1, math.ceil(centre + _REACH * deviation))
    ranks = np.arange(first, last + 1, dtype=np.float64)
    weights = np.exp(-0.5 * ((ranks - centre) / deviation) ** 2)
    found: Floats = weights / weights.sum()
    return first, found


def smoothed(ordered: Floats, shares: Sequence[float]) -> Floats:
    """Sorted samples' quantiles (the last axis) as a weighted average of the order statistics
    about each (``_weights``), not the one or two at its rank: a measure's ΔP85 on the same
    samples is then an average of its removal over the hundreds of samples about P85, not over
    two, and needs some tens of times fewer samples to be as exact. A constant shift of every
    sample shifts it by exactly that (the weights add up to 1)."""
    count = ordered.shape[-1]
    found = []
    for share in shares:
        first, weights = _weights(count, float(share))
        found.append(ordered[..., first : first + len(weights)] @ weights)
    stacked: Floats = np.stack(found, axis=-1)
    return stacked


@dataclass(frozen=True)
class Figures:
    full: Floats
    """The quantiles over every sample."""
    left: Floats
    """The quantiles with each of ``BATCHES`` groups of the samples left out, a row a group."""


def figures(values: Floats, shares: Sequence[float]) -> tuple[Figures, Floats]:
    """The samples' quantiles at ``shares``, all and with each group left out (and the samples,
    sorted)."""
    order = np.argsort(values)
    ordered = values[order]
    group = order % BATCHES
    left = np.stack([smoothed(ordered[group != b], shares) for b in range(BATCHES)])
    return Figures(smoothed(ordered, shares), left), ordered


def jackknife(left: Floats) -> Floats:
    """Standard errors by the delete-a-group jackknife (each group a twentieth of the samples:
    unlike the delete-one jackknife, consistent for a quantile), one a column of ``left``.
    Batches' own spread would not do: a smoothed quantile of a twentieth of the samples is not
    the same estimator as that of all of them."""
    count = left.shape[0]
    spread = ((left - left.mean(axis=0)) ** 2).sum(axis=0)
    found: Floats = np.sqrt((count - 1) / count * spread)
    return found


def forget_weights() -> None:
    """Let go of the smoothing weights one simulation kept."""
    _weights.cache_clear()
