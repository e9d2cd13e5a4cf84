"""The portfolio's fit over arrays: every comparable of the index at once (``price_fit`` says
what is fitted and why; this module only makes it fast).

A portfolio of ten thousand projects holds hundreds of thousands of comparables, and the fit is
taken again whenever one of them moves. Each step here is the plain per-line arithmetic of
``price_fit``, done on whole arrays — or, where an array would hold far more than the answer
(every pair of a project's points, every class sorted for the three values about its middle),
one project or one class at a time in ``fit_kernels``' loops (compiled for a large portfolio).
The same operations in the same order, so the figures are the ones a loop over the lines gives,
to the last digit.
Medians are taken as ``statistics.median`` takes them (the middle value, or the mean of the two
middle ones); logarithms as ``math.log`` takes them (numpy's may differ in the last place); and
sums of squares with ``math.fsum``. ``tests/price_fit_plain.py`` keeps the plain loop these are
held to.

It also holds what one project's lines are measured with, a value at a time: a median without
one value, the robust line through one project's points, and a class's spread.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import statistics
from bisect import bisect_left
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .fit_kernels import Block, levels, medians, middles

__all__ = [
    "MAD_TO_SIGMA",
    "Entries",
    "Groups",
    "Levels",
    "Partition",
    "Spread",
    "class_rank",
    "dense_ranks",
    "median_without",
    "theil_sen_points",
]

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]

MIN_LINES_FOR_LEVEL: Final = 5
"""Among fewer lines, two overpriced ones would move even a median-based level toward them."""
SLOPE_LINES: Final = 6
"""A slope (how much more the volatile codes lean) needs this many lines of distinct spreads."""
MAX_SLOPE_LINES: Final = 60
"""Theil-Sen is quadratic: a project's slope is taken from this many of its lines at most."""
BLOCK: Final = 128
"""Projects fitted by one call of the kernel; the blocks are shared among the threads. Small
enough that a thousand projects keep two cores busy, and that the numpy form's arrays of pairs
stay about 2 MB, reused, not 14 MB faulted in afresh (one more project at 1 000: 0.6 → 0.4 s)."""
THREADS: Final = max(min(os.cpu_count() or 1, 4), 1)
"""Blocks of projects fitted at once."""


MAD_TO_SIGMA: Final = 1.4826
"""Scales a median absolute deviation to σ for normal data (Iglewicz and Hoaglin)."""


def median_without(ordered: Sequence[float], value: float) -> float | None:
    """The median of ``ordered`` (sorted) with one occurrence of ``value`` left out."""
    gone = bisect_left(ordered, value)
    n = len(ordered) - 1
    if n <= 0:
        return None

    def at(i: int) -> float:
        return ordered[i] if i < gone else ordered[i + 1]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


def quantile_without(ordered: Sequence[float], value: float | None, q: float) -> float | None:
    """The ``q`` quantile of ``ordered`` (sorted) with one occurrence of ``value`` left out
    (none when ``value`` is None), interpolated between neighbours as ``numpy.quantile`` is by
    default."""
    gone = bisect_left(ordered, value) if value is not None else len(ordered)
    n = len(ordered) - (1 if value is not None else 0)
    if n <= 0:
        return None

    def at(i: int) -> float:
        return ordered[i] if i < gone else ordered[i + 1]

    place = q * (n - 1)
    low = int(place)
    if low + 1 >= n:
        return at(n - 1)
    below, above, t = at(low), at(low + 1), place - low
    # numpy's own interpolation, from the nearer neighbour: the same figure to the last bit.
    return below + (above - below) * t if t < 0.5 else above - (above - below) * (1 - t)


def class_rank(key: tuple[str, str]) -> int:
    """A class's place in the order a project's lines are sampled in for its slope: fixed by the
    class alone, so the lines sampled never change with the spreads of other projects' prices."""
    digest = hashlib.sha256(f"{key[0]}\x00{key[1]}".encode()).digest()
    return int.from_bytes(digest[:7], "big")


def dense_ranks(rank: Ints, x: Floats) -> Ints:
    """Each class's place in the order of (class rank, x): equal pairs share a place."""
    order = np.lexsort((x, rank))
    r, v = rank[order], x[order]
    new = np.r_[True, (r[1:] != r[:-1]) | (v[1:] != v[:-1])] if len(order) else order
    dense = np.empty(len(order), dtype=np.int64)
    dense[order] = np.cumsum(new) - 1
    return dense


def theil_sen_points(points: Sequence[tuple[int, float, float]]) -> tuple[float, float]:
    """One project's (intercept, slope) of a robust line through its points (class rank, x, y);
    slope 0 when the x are too few or too alike to tell one. The slope is taken from the
    ``MAX_SLOPE_LINES`` lines first by class rank: the same lines whatever the portfolio (a sample
    spread by x moved with every other project's prices, and the level with it)."""
    ys = [y for _r, _x, y in points]
    distinct = {round(x, 9) for _r, x, _y in points}
    if len(points) < SLOPE_LINES or len(distinct) < 3:
        return statistics.median(ys), 0.0
    sample = sorted(points)[:MAX_SLOPE_LINES]
    slopes = [
        (y2 - y1) / (x2 - x1)
        for i, (_r1, x1, y1) in enumerate(sample)
        for _r2, x2, y2 in sample[i + 1 :]
        if abs(x2 - x1) > 1e-9
    ]
    slope = statistics.median(slopes) if slopes else 0.0
    return statistics.median(y - slope * x for _r, x, y in points), slope


TRUNCATE_AT: Final = 3.0
TRUNCATED_TO_SIGMA: Final = 1.0136
"""1 / sqrt(E[Z² | |Z| < 3]): the root mean square of normal residuals within 3σ, scaled to σ."""


class Spread:
    """A class's spread: the root mean square of its residuals within ``TRUNCATE_AT`` robust
    deviations (the MAD's). As steady as a standard deviation (the MAD alone swings ±15 % at 60
    comparables, and every low swing flags fair lines) and as blind to overpriced lines as the
    MAD: a line far out is left out, not counted as noise."""

    def __init__(self, residuals: Floats) -> None:
        self.n = len(residuals)
        self._abs = np.abs(residuals)
        middle = _median(self._abs)
        mad = MAD_TO_SIGMA * middle if middle is not None else 0.0
        self.cut = TRUNCATE_AT * mad
        kept = residuals[self._abs <= self.cut]
        self.kept, self.squares = len(kept), math.fsum((kept * kept).tolist())

    def sigma(self, without: float | None = None) -> float:
        """The spread, leaving out one residual when ``without`` is given."""
        kept, squares = self.kept, self.squares
        if without is not None and abs(without) <= self.cut:
            kept, squares = kept - 1, squares - without * without
        if kept >= 3:
            return TRUNCATED_TO_SIGMA * math.sqrt(max(squares, 0.0) / kept)
        # Too few within the cut for a root mean square: the MAD's own estimate.
        if without is None:
            middle = _median(self._abs)
        else:
            middle = median_without(self._sorted, abs(without))
        return MAD_TO_SIGMA * middle if middle is not None else 0.0

    @functools.cached_property
    def _sorted(self) -> list[float]:
        """The absolute residuals sorted: only for a class with too few within the cut."""
        return sorted(self._abs.tolist())


def _median(values: Floats) -> float | None:
    """The median as ``statistics.median`` takes it (the middle value, or the mean of the two
    middle ones), from the middle values alone: a class's ten thousand are not sorted for it."""
    n = len(values)
    if not n:
        return None
    half = n // 2
    if n % 2:
        return float(np.partition(values, half)[half])
    middle = np.partition(values, (half - 1, half))
    return (float(middle[half - 1]) + float(middle[half])) / 2


class Entries(NamedTuple):
    """Every index entry's figures, for measuring many projects' posts at once (``PriceFit``)."""

    project: Ints
    klass: Ints
    price: Floats
    centre: Floats
    """Its class's centre without its project's line (NaN when none is left)."""
    compared: Ints
    """How many other projects it is measured against."""
    spread: Floats
    """Its spread as ``PriceFit`` takes it — but where ``exact_spread`` (too few residuals for a
    root mean square: the spread is then a median, taken one line at a time)."""
    exact_spread: NDArray[np.bool_]
    level_a: Floats
    """By project: the level its lines are judged at (intercept and slope on the loading)."""
    level_b: Floats
    loading: Floats
    """By class."""
    project_index: dict[str, int]
    key_index: dict[tuple[str, str], int]


@dataclass(frozen=True)
class Partition:
    """Entries by group, taken once for many sets of values: group ``g``'s entries are
    ``order[start[g]:start[g + 1]]``; an entry of group -1 belongs to none."""

    order: Ints
    start: Ints

    @classmethod
    def of(cls, group: Ints, n_groups: int) -> Partition:
        member = np.flatnonzero(group >= 0)
        order = member[np.argsort(group[member], kind="stable")]
        counts = np.bincount(group[member], minlength=n_groups)
        return cls(order.astype(np.int64), np.r_[0, np.cumsum(counts)].astype(np.int64))

    @property
    def count(self) -> Ints:
        return np.diff(self.start)


@dataclass(frozen=True)
class Groups:
    """A value for each entry, by group: each group's median, with or without one of its
    entries, from the few values about its middle (``middles``); its values sorted on demand."""

    partition: Partition
    values: Floats
    """By entry."""

    @functools.cached_property
    def middle(self) -> Floats:
        """By group: its sorted values at the ``MIDDLE`` places from ``max((n - 2) // 2, 0)`` on
        (selected once, when a median is first asked for)."""
        return middles(self.values, self.partition.order, self.partition.start)

    @property
    def count(self) -> Ints:
        return self.partition.count

    def slice(self, g: int) -> Floats:
        """Group ``g``'s values, sorted."""
        p = self.partition
        return np.sort(self.values[p.order[p.start[g] : p.start[g + 1]]])

    def median(self, group: Ints) -> Floats:
        """Each entry's group's median (NaN for an empty group)."""
        if not len(self.middle):
            return np.full(len(group), np.nan)
        return medians(self.middle, self.count, group)

    def median_without(self, group: Ints, entry: Ints) -> Floats:
        """Each entry's group's median with that entry left out (NaN when none is left): the
        sorted values with one equal to the entry's gone (whichever equal value is taken out,
        the values left are the same)."""
        if not len(self.middle):
            return np.full(len(group), np.nan)
        return medians(self.middle, self.count, group, self.values[entry])


@dataclass(frozen=True)
class Levels:
    """Each project's (intercept, slope) of a robust line through its points, as
    ``theil_sen_points`` takes it one project at a time, for any ``y`` over fixed points: the
    points' order by project and rank is taken once, and only the ``y`` are new at each pass."""

    order: Ints
    """The points by (project, rank): a project's points from ``start`` on, ``count`` of them."""
    start: Ints
    count: Ints
    x: Floats
    x_rank: Ints
    rank: Ints

    @classmethod
    def of(cls, project: Ints, x: Floats, x_rank: Ints, rank: Ints, n_projects: int) -> Levels:
        """``x_rank`` orders the distinct values of ``x`` rounded to 9 places (how distinct the
        points' x are); ``rank`` is the place of each point's (class rank, ``x``) among the
        classes' (``dense_ranks``): points are ordered by it, then by ``y``, as
        ``theil_sen_points`` sorts them."""
        order = np.argsort(project * (int(rank.max(initial=0)) + 1) + rank, kind="stable")
        count = np.bincount(project, minlength=n_projects).astype(np.int64)
        start = np.r_[0, np.cumsum(count)][:-1].astype(np.int64)
        return cls(order, start, count, x[order], x_rank[order], rank[order])

    def fit(self, y: Floats) -> tuple[Floats, Floats, NDArray[np.bool_]]:
        """Each project's (intercept, slope), and which projects have the
        ``MIN_LINES_FOR_LEVEL`` points a level needs (the others: 0, 0); a point whose ``y``
        is NaN is not one."""
        n_projects = len(self.count)
        a, b = np.zeros(n_projects), np.zeros(n_projects)
        fitted = np.zeros(n_projects, dtype=np.bool_)
        ys = np.ascontiguousarray(y[self.order])
        bounds = [*range(0, n_projects, BLOCK), n_projects]

        def fit(first: int, last: int) -> None:
            levels(
                Block(
                    x=self.x,
                    y=ys,
                    x_rank=self.x_rank,
                    rank=self.rank,
                    starts=self.start,
                    counts=self.count,
                    first=first,
                    last=last,
                    min_lines=MIN_LINES_FOR_LEVEL,
                    slope_lines=SLOPE_LINES,
                    max_lines=MAX_SLOPE_LINES,
                    a=a,
                    b=b,
                    fitted=fitted,
                )
            )

        # Both forms of the loops let go of the GIL: the blocks are fitted on every core at once.
        with ThreadPoolExecutor(max_workers=min(len(bounds) - 1, THREADS) or 1) as pool:
            list(pool.map(fit, bounds[:-1], bounds[1:]))
        return a, b, fitted
