"""The fit's innermost loops, compiled (numba); ``fit_kernels`` says what each computes and
is the only module that loads this one (at the first fit of a large portfolio: numba takes
about a second and a hundred megabytes to load).

Compiled once and cached beside the module (``cache=True``): a process's first fit loads the
machine code rather than compiling it again. The kernels hold no lock (``nogil``), so the fit's
own threads run them on every core at once, and no thread pool of numba's is started (its
default one refuses calls from two threads at a time). Each writes into arrays it is given.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numpy.typing import NDArray

from .fit_kernels import MIDDLE, SAME_X, Block

__all__ = ["exps", "levels", "logs", "medians", "middles"]

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]


@njit(cache=True, nogil=True)
def _select(values: Floats, lo: int, hi: int, k: int) -> float:
    """The value that belongs at place ``k`` of ``values[lo:hi + 1]`` sorted, put there: what
    lies before it is no larger, what lies after it no smaller (a selection, in place).

    Each step splits about a median of three without a branch on the values (a swap every
    element, a count of those below), three to four times faster than Hoare's on the slopes of
    a project, whose comparisons no branch predictor can guess; values equal to the pivot are
    then gathered beside it, so a class of one price is one step, not one a value."""
    while hi > lo:
        mid = (lo + hi) >> 1
        x, y, z = values[lo], values[mid], values[hi]
        if (x <= y) == (y <= z):
            m = mid
        elif (y <= x) == (x <= z):
            m = lo
        else:
            m = hi
        pivot = values[m]
        values[m] = values[hi]
        values[hi] = pivot
        store = lo
        for i in range(lo, hi):
            v = values[i]
            values[i] = values[store]
            values[store] = v
            store += v < pivot
        values[hi] = values[store]
        values[store] = pivot
        if k < store:
            hi = store - 1
            continue
        same = store + 1
        for i in range(store + 1, hi + 1):
            v = values[i]
            values[i] = values[same]
            values[same] = v
            same += v == pivot
        if k < same:
            return float(pivot)
        lo = same
    return float(values[k])


@njit(cache=True, nogil=True)
def _median(values: Floats, n: int) -> float:
    """The median of ``values[:n]`` as ``statistics.median`` takes it (reorders them)."""
    lo, hi = (n - 1) // 2, n // 2
    low = _select(values, 0, n - 1, lo)
    if hi == lo:
        return (low + low) / 2
    high = float(values[lo + 1])  # after the selection, everything past ``lo`` is at least ``low``
    for t in range(lo + 2, n):
        if values[t] < high:
            high = float(values[t])
    return (low + high) / 2


@njit(cache=True, nogil=True)
def levels(block: Block) -> None:
    """``fit_kernels.levels``."""
    x, y, x_rank, rank, start, count = block[:6]
    first, last, min_lines, slope_lines, max_lines, a, b, fitted = block[6:]
    longest = 1
    for p in range(first, last):
        longest = max(longest, count[p])
    px, py = np.empty(longest), np.empty(longest)
    pr, xr = np.empty(longest, np.int64), np.empty(longest, np.int64)
    k = min(longest, max_lines)
    slopes, residuals = np.empty(max(k * (k - 1) // 2, 1)), np.empty(longest)
    for p in range(first, last):
        n = 0
        for i in range(start[p], start[p] + count[p]):
            if np.isnan(y[i]):
                continue
            # Already in rank order: only the points of one rank move, to their order by y.
            j = n
            while j > 0 and (pr[j - 1] > rank[i] or (pr[j - 1] == rank[i] and py[j - 1] > y[i])):
                px[j], py[j], pr[j], xr[j] = px[j - 1], py[j - 1], pr[j - 1], xr[j - 1]
                j -= 1
            px[j], py[j], pr[j], xr[j] = x[i], y[i], rank[i], x_rank[i]
            n += 1
        fitted[p] = n >= min_lines
        if not fitted[p]:
            a[p], b[p] = 0.0, 0.0
            continue
        # Whether three distinct x are among them, found without sorting them.
        distinct, second = 1, xr[0]
        for i in range(1, n):
            if xr[i] != xr[0] and (distinct == 1 or xr[i] != second):
                distinct, second = distinct + 1, xr[i]
                if distinct == 3:
                    break
        slope = 0.0
        if n >= slope_lines and distinct >= 3:
            m, pairs = min(n, max_lines), 0
            for i in range(m):
                for j in range(i + 1, m):
                    dx = px[j] - px[i]
                    if abs(dx) > SAME_X:
                        slopes[pairs] = (py[j] - py[i]) / dx
                        pairs += 1
            if pairs > 0:
                slope = _median(slopes, pairs)
        for i in range(n):
            residuals[i] = py[i] - slope * px[i]
        a[p], b[p] = _median(residuals, n), slope


@njit(cache=True, nogil=True)
def exps(values: Floats, out: Floats) -> None:
    for i in range(len(values)):
        out[i] = math.exp(values[i])


@njit(cache=True, nogil=True)
def logs(values: Floats, out: Floats) -> None:
    for i in range(len(values)):
        out[i] = math.log(values[i])


@njit(cache=True, nogil=True)
def middles(values: Floats, order: Ints, start: Ints, out: Floats) -> None:
    longest = 1
    for g in range(len(start) - 1):
        longest = max(longest, start[g + 1] - start[g])
    held = np.empty(longest)
    for g in range(len(start) - 1):
        n = start[g + 1] - start[g]
        for i in range(n):
            held[i] = values[order[start[g] + i]]
        first = max((n - 2) // 2, 0)
        for t in range(min(MIDDLE, n - first)):
            # The first place selected among them all; each next among what was left above it.
            out[g, t] = _select(held, 0 if t == 0 else first + t, n - 1, first + t)


@njit(cache=True, nogil=True)
def medians(
    middle: Floats, count: Ints, group: Ints, gone: Floats, without: bool, out: Floats
) -> None:
    for e in range(len(group)):
        g = group[e]
        n = count[g]
        first = max((n - 2) // 2, 0)
        if not without:
            lo, hi = (n - 1) // 2, n // 2
            out[e] = (middle[g, lo - first] + middle[g, hi - first]) / 2 if n > 0 else np.nan
            continue
        left = n - 1
        if left <= 0:
            out[e] = np.nan
            continue
        # The sorted values with one equal to ``gone`` taken out: at each place, the value
        # there while it is below ``gone``, else the next one.
        lo, hi = (left - 1) // 2 - first, left // 2 - first
        low = middle[g, lo + 1] if middle[g, lo] >= gone[e] else middle[g, lo]
        high = middle[g, hi + 1] if middle[g, hi] >= gone[e] else middle[g, hi]
        out[e] = (low + high) / 2
