"""The fit's innermost loops over numpy arrays, for a portfolio too small to be worth loading the
compiler (``fit_kernels`` chooses): each function does what its namesake in ``compiled`` does,
to the last digit, into the arrays it is given.

Theil-Sen takes every pair of a block's points at once and selects the middle slopes
(``np.partition``); a group's middle values are selected one group at a time; logarithms and
exponentials are ``math``'s, one value at a time.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from .fit_kernels import MIDDLE, SAME_X, Block

__all__ = ["exps", "levels", "logs", "medians", "middles"]

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]


def levels(block: Block) -> None:
    first, last, a, b, fitted = block.first, block.last, block.a, block.b, block.fitted
    if last <= first:
        return
    start, count, x, y = block.starts, block.counts, block.x, block.y
    lo, hi = int(start[first]), int(start[last - 1] + count[last - 1])
    project = np.repeat(np.arange(first, last), count[first:last])
    known = ~np.isnan(y[lo:hi])
    project, xs, ys = project[known], x[lo:hi][known], y[lo:hi][known]
    x_ranks, ranks = block.x_rank[lo:hi][known], block.rank[lo:hi][known]
    order = np.lexsort((ys, ranks, project))  # by project, then rank, then y
    project, xs, ys, x_ranks = project[order], xs[order], ys[order], x_ranks[order]
    counts = np.bincount(project - first, minlength=last - first)
    begins = np.r_[0, np.cumsum(counts)][:-1]
    ok = counts >= block.min_lines
    a[first:last], b[first:last], fitted[first:last] = 0.0, 0.0, ok
    for n in sorted(set(counts[ok].tolist())):  # np.unique would import numpy.ma (2 MB)
        rows = np.flatnonzero(ok & (counts == n))
        at = begins[rows][:, None] + np.arange(n)
        a[first + rows], b[first + rows] = _rows(
            xs[at], ys[at], x_ranks[at], block.slope_lines, block.max_lines
        )


def _rows(
    xs: Floats, ys: Floats, x_ranks: Ints, slope_lines: int, max_lines: int
) -> tuple[Floats, Floats]:
    """Rows of ``n`` points each, in their order: each row's (intercept, slope)."""
    m, n = xs.shape
    distinct = 1 + (np.diff(np.sort(x_ranks, axis=1), axis=1) != 0).sum(axis=1)
    flat = (distinct < 3) | (n < slope_lines)
    sx, sy = xs[:, :max_lines], ys[:, :max_lines]
    first, second = np.triu_indices(sx.shape[1], 1)
    # np.take, not fancy indexing: the same pairs gathered seven times faster.
    dx = np.take(sx, second, axis=1) - np.take(sx, first, axis=1)
    valid = np.abs(dx) > SAME_X
    slopes = np.full(dx.shape, np.inf)
    dy = np.take(sy, second, axis=1) - np.take(sy, first, axis=1)
    np.divide(dy, dx, out=slopes, where=valid)
    pairs = valid.sum(axis=1)
    slope = np.where(pairs > 0, _row_medians(slopes, pairs), 0.0) if slopes.size else np.zeros(m)
    slope = np.where(flat, 0.0, slope)
    return _row_medians(ys - slope[:, None] * xs, np.full(m, n, dtype=np.int64)), slope


def _row_medians(rows: Floats, count: Ints) -> Floats:
    """The median of each row's ``count`` smallest values (the rest are +inf); NaN for none."""
    found = np.full(len(rows), np.nan)
    for n in sorted(set(count.tolist())):
        if n <= 0:
            continue
        chosen = np.flatnonzero(count == n)
        lo, hi = (n - 1) // 2, n // 2
        middle = np.partition(rows[chosen], sorted({lo, hi}), axis=1)
        found[chosen] = (middle[:, lo] + middle[:, hi]) / 2
    return found


def exps(values: Floats, out: Floats) -> None:
    out[:] = [math.exp(v) for v in values.tolist()]


def logs(values: Floats, out: Floats) -> None:
    out[:] = [math.log(v) for v in values.tolist()]


def middles(values: Floats, order: Ints, start: Ints, out: Floats) -> None:
    for g in range(len(start) - 1):
        n = int(start[g + 1] - start[g])
        if n == 0:
            continue
        first = max((n - 2) // 2, 0)
        places = list(range(first, min(first + MIDDLE, n)))
        held = np.partition(values[order[start[g] : start[g + 1]]], places)
        out[g, : len(places)] = held[places]


def medians(
    middle: Floats, count: Ints, group: Ints, gone: Floats, without: bool, out: Floats
) -> None:
    n = count[group]
    flat = middle.reshape(-1)
    base = group * MIDDLE - np.maximum((n - 2) // 2, 0)  # + a place: the value at that place

    def at(place: Ints) -> Floats:
        found: Floats = np.take(flat, base + place)
        return found

    if not without:
        lo, hi = np.maximum(n - 1, 0) // 2, np.maximum(n, 0) // 2
        out[:] = np.where(n > 0, (at(lo) + at(hi)) / 2, np.nan)
        return
    left = n - 1
    lo, hi = np.maximum(left - 1, 0) // 2, np.maximum(left, 0) // 2

    def without_gone(i: Ints) -> Floats:
        here = at(i)
        found: Floats = np.where(here >= gone, at(i + 1), here)
        return found

    out[:] = np.where(left > 0, (without_gone(lo) + without_gone(hi)) / 2, np.nan)
