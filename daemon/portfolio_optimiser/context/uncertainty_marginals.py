"""The marginals a frame is drawn from: PERT, triangular and normal, each tabulated once a shape
against the normal score it is drawn from, and a stream of random numbers per name.

A PERT marginal is a beta on ``[low, high]`` with its mode at ``likely``, shapes
``1 + 4 (likely - low) / (high - low)`` and ``1 + 4 (high - likely) / (high - low)``; its
distribution function is tabulated on ``GRID`` points and inverted linearly (the exact inverse,
``betaincinv``, costs two microseconds a sample: forty seconds for two thousand elements). A
triangular quantile is closed-form. Either is tabulated once a shape against ``SCORES``, and a
draw interpolates that table.
"""

from __future__ import annotations

import functools
import hashlib
import statistics
from typing import Final, Literal

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "GRID",
    "P90_SCORE",
    "SCORES",
    "SCORE_SHARES",
    "Distribution",
    "Floats",
    "Stream",
    "cdf_table",
    "draws_of",
    "forget",
    "normal_quantile",
    "stream",
]

Floats = NDArray[np.float64]
Distribution = Literal["pert", "triangular", "normal"]

GRID: Final = 513
"""Points a PERT distribution function is tabulated on, to be inverted."""
SCORE_STEP: Final = 0.005
SCORES: Final = np.arange(-8.0, 8.0 + SCORE_STEP / 2, SCORE_STEP)
"""The normal scores each marginal is tabulated at: a draw beyond eight deviations (one in
10^15) takes the table's end."""
SCORE_SHARES: Final = np.array([statistics.NormalDist().cdf(s) for s in SCORES.tolist()])
P90_SCORE: Final = statistics.NormalDist().inv_cdf(0.9)
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(8)


def normal_quantile(share: float) -> float:
    """The standard normal score below which ``share`` of draws fall."""
    return statistics.NormalDist().inv_cdf(share)


_GAMMA: Final = np.uint64(0x9E3779B97F4A7C15)
_MIX1: Final = np.uint64(0xBF58476D1CE4E5B9)
_MIX2: Final = np.uint64(0x94D049BB133111EB)
_BITS: Final = 2.0**-53


class Stream:
    """A stream of random numbers of its own for one name: SplitMix64 (Steele, Lea and Flood,
    2014) over a counter, keyed by the seed and the name, so the same name gives the same numbers
    whatever else is drawn. Not numpy.random: importing it holds 5.4 MB in every daemon that has
    simulated a frame, and the idle daemon has 120 MB in all (``bench_daemon``). Normal scores by
    Box-Muller, computed in single precision (twice as fast as numpy's ziggurat in double): a
    score is then at most 5.8 deviations from 0, which one draw in 10^8 would pass."""

    def __init__(self, key: int) -> None:
        self._key = np.uint64(key)
        self._at = 0

    def _bits(self, n: int) -> NDArray[np.uint64]:
        z = np.arange(self._at, self._at + n, dtype=np.uint64)
        self._at += n
        z *= _GAMMA
        z += self._key
        z ^= z >> np.uint64(30)
        z *= _MIX1
        z ^= z >> np.uint64(27)
        z *= _MIX2
        z ^= z >> np.uint64(31)
        return z

    def random(self, n: int) -> Floats:
        """``n`` uniform numbers in (0, 1), each of 53 random bits."""
        u: Floats = (self._bits(n) >> np.uint64(11)).astype(np.float64)
        u += 0.5
        u *= _BITS
        return u

    def standard_normal(self, n: int) -> Floats:
        """``n`` standard normal scores (Box-Muller: two from each pair of uniforms)."""
        half = (n + 1) // 2
        u = self.random(2 * half).astype(np.float32)
        radius = np.log(u[:half])
        radius *= np.float32(-2.0)
        np.sqrt(radius, out=radius)
        angle = u[half:]
        angle *= np.float32(2.0 * np.pi)
        found = np.empty(2 * half)
        np.multiply(radius, np.cos(angle), out=found[:half])
        np.multiply(radius, np.sin(angle), out=found[half:])
        return found[:n]


def stream(seed: int, name: str) -> Stream:
    """The stream of ``name``: its key a stable hash of the seed and the name (never Python's
    ``hash``, which a process salts)."""
    digest = hashlib.sha256(f"{seed & 0xFFFFFFFF}:{name}".encode()).digest()
    return Stream(int.from_bytes(digest[:8], "little"))


def cdf_table(shape_a: float, shape_b: float) -> Floats:
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


@functools.lru_cache(maxsize=4096)
def _standard(distribution: Distribution, r: float) -> Floats:
    """The standard marginal (on [0, 1], mode ``r``) at each of ``SCORES``: its quantile function
    composed with the normal distribution function, smooth in the score even where the quantile
    function is steep. Kept for every shape of a simulation (25 kB each; thousands of lines
    each of its own shape are drawn round after round), and let go after it (``forget``)."""
    u = SCORE_SHARES
    if distribution == "triangular":
        found: Floats = np.where(u < r, np.sqrt(u * r), 1.0 - np.sqrt((1.0 - u) * (1.0 - r)))
    else:
        cdf = cdf_table(1.0 + 4.0 * r, 1.0 + 4.0 * (1.0 - r))
        found = np.interp(u, cdf, np.linspace(0.0, 1.0, GRID))
    found.flags.writeable = False  # shared by every later call
    return found


def forget() -> None:
    """Let go of the tables a simulation kept: a daemon holds none between runs."""
    _standard.cache_clear()


def draws_of(
    low: float, likely: float, high: float, distribution: Distribution, score: Floats
) -> Floats:
    """A marginal's draws from their normal scores: its standard marginal's table
    (``_standard``) interpolated linearly — a few passes over the samples, where a search of a
    table per sample took twelve times as long. A normal marginal has ``likely`` as its mean and
    ``low`` and ``high`` as its P10 and P90."""
    width = high - low
    if width <= 0:
        return np.full(len(score), float(low))
    if distribution == "normal":
        scaled: Floats = likely + (width / 2 / P90_SCORE) * score
        return scaled
    table = _standard(distribution, (likely - low) / width)
    # In place, a few arrays in all: each one more is a pass over memory and, past glibc's mmap
    # threshold, pages faulted in afresh.
    at = score - SCORES[0]
    at *= 1.0 / SCORE_STEP
    np.clip(at, 0.0, len(SCORES) - 1.000001, out=at)
    k = at.astype(np.intp)
    drawn: Floats = table.take(k)
    k += 1
    after = table.take(k)
    after -= drawn
    at -= k
    at += 1.0
    after *= at
    drawn += after
    drawn *= width
    drawn += low
    return drawn
