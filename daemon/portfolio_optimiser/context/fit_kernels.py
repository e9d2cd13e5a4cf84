"""The fit's innermost loops: what numpy can only do by materialising every pair of every
project's points, or by sorting every class to take three values from its middle — done one
project, one class at a time. A call on ``COMPILED_FROM`` values or more (the lines of a
portfolio of about three thousand projects) runs compiled (``compiled``), a smaller one over
numpy arrays (``fit_numpy``): loading the compiler costs about a second and 110 MB that stay in
the process, which a portfolio of a few hundred projects never wins back (the daemon idles in
120 MB). It is loaded at the first call that needs it.

The arithmetic is ``fit_arrays``'s, operation for operation (a slope is ``dy / dx``, a median the
middle value or the mean of the two middle ones, logarithms and exponentials the C library's as
``math`` takes them), so the figures are the same to the last digit; ``tests/price_fit_plain.py``
holds the fit to the plain loop, ``tests/test_fit_kernels.py`` these to ``math``.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "COMPILED_FROM",
    "MIDDLE",
    "SAME_X",
    "Block",
    "exps",
    "levels",
    "logs",
    "medians",
    "middles",
]

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]

MIDDLE: Final = 3
"""The sorted places around a group's middle that its median, with or without one of its values,
is taken from (``middles``)."""


COMPILED_FROM: Final = 200_000
"""Lines (or values) from which a call runs compiled: about three thousand projects."""
SAME_X: Final = 1e-9
"""Two points closer than this in x give no slope (``theil_sen_points``)."""


@functools.cache
def _module(name: str) -> ModuleType:
    return importlib.import_module(f".{name}", __package__)


def _loops(size: int) -> ModuleType:
    """The loops for a call on ``size`` values: compiled, or over numpy arrays."""
    return _module("compiled" if size >= COMPILED_FROM else "fit_numpy")


class Block(NamedTuple):
    """One call's work for ``levels``: the projects ``first`` to ``last - 1``. A project's points
    are (``x``, ``y``, ``x_rank``, ``rank``) from ``starts[p]``, ``counts[p]`` of them, in the
    order of their rank; its level is written into ``a``, ``b`` and ``fitted``."""

    x: Floats
    y: Floats
    """NaN: not a point."""
    x_rank: Ints
    rank: Ints
    starts: Ints
    counts: Ints
    first: int
    last: int
    min_lines: int
    slope_lines: int
    max_lines: int
    a: Floats
    b: Floats
    fitted: NDArray[np.bool_]


def levels(block: Block) -> None:
    """Each project's (intercept, slope) of a robust line through its points.

    A project's points are ordered by (rank, y) as ``theil_sen_points`` sorts them. A project of
    fewer than ``min_lines`` points is not fitted (0, 0). The slope is the median of the pairwise
    slopes among its first ``max_lines`` points — 0 among fewer than ``slope_lines`` points or
    fewer than three distinct x — and the intercept the median of ``y - slope * x`` over all of
    them. Holds no lock: threads run it on blocks of their own at once."""
    _loops(len(block.x)).levels(block)


def exps(values: Floats) -> Floats:
    """Each value's exponential as ``math.exp`` takes it (the C library's: numpy's own differs
    in the last place for one value in twenty), without a Python float made for each; past
    the largest float it gives infinity where ``math.exp`` raises."""
    out = np.empty(len(values))
    _loops(len(values)).exps(np.ascontiguousarray(values, dtype=np.float64), out)
    return out


def logs(values: Floats) -> Floats:
    """Each value's natural logarithm as ``math.log`` takes it (see ``exps``); a value that is
    not positive has none, as for ``math.log``."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    if not (values > 0).all():
        raise ValueError("math domain error")
    out = np.empty(len(values))
    _loops(len(values)).logs(values, out)
    return out


def middles(values: Floats, order: Ints, start: Ints) -> Floats:
    """For each group — ``order[start[g]:start[g + 1]]`` are its entries — its values at the
    ``MIDDLE`` sorted places from ``max((n - 2) // 2, 0)`` on (NaN past its ``n``), selected,
    not sorted: a median needs three values of a class of ten thousand."""
    out = np.full((len(start) - 1, MIDDLE), np.nan)
    _loops(len(values)).middles(np.ascontiguousarray(values, dtype=np.float64), order, start, out)
    return out


def medians(middle: Floats, count: Ints, group: Ints, gone: Floats | None = None) -> Floats:
    """For each entry, its group's median from the group's ``middle`` (``middles``) and
    ``count`` — without the value ``gone[e]`` where one is given (NaN when none is left)."""
    out, group = np.empty(len(group)), np.ascontiguousarray(group, dtype=np.int64)
    without = gone is not None
    values = np.ascontiguousarray(gone, dtype=np.float64) if without else np.empty(0)
    _loops(len(group)).medians(middle, count, group, values, without, out)
    return out
