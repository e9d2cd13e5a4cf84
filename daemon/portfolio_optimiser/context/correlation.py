"""Correlation across groups and drivers: the matrix a project states between its correlation
groups' factors and its drivers' scores (``correlation_between``), checked positive
semi-definite, and repaired only when ``[uncertainty] repair = "nearest"`` says so.

A matrix that is not positive semi-definite is no correlation at all: some combination of the
factors would have a negative variance. Hand-written coefficients easily make one (market with
ground at 0.9, ground with labour at -0.8, market with labour at 0.6). The frame refuses it,
naming the matrix's smallest eigenvalue, unless the organisation has asked for the nearest
correlation matrix (Higham, "Computing the nearest correlation matrix", 2002: alternating
projections with Dykstra's correction, in the Frobenius norm), which the report then states
with how far it moved the coefficients.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from .errors import BundleError

__all__ = ["FactorCorrelation", "FrameRefused", "factor_correlation", "nearest_correlation"]

Floats = NDArray[np.float64]
SEMIDEFINITE: Final = -1e-10
"""The smallest eigenvalue a positive semi-definite matrix may show in floating point."""
ITERATIONS: Final = 500
TOLERANCE: Final = 1e-10


class FrameRefused(BundleError):
    """A project's frame cannot be simulated as it is stated; ``str(exc)`` says why and how to
    fix it."""


@dataclass(frozen=True)
class FactorCorrelation:
    names: tuple[str, ...]
    matrix: Floats
    repaired: float | None = None
    """How far the repair moved the largest coefficient; None: used as stated."""


def nearest_correlation(given: Floats) -> Floats:
    """The correlation matrix nearest ``given`` in the Frobenius norm (Higham 2002)."""
    y = np.array(given, dtype=np.float64)
    correction = np.zeros_like(y)
    for _ in range(ITERATIONS):
        r = y - correction
        values, vectors = np.linalg.eigh(r)
        x = (vectors * np.maximum(values, 0.0)) @ vectors.T
        correction = x - r
        before = y
        y = x.copy()
        np.fill_diagonal(y, 1.0)
        if float(np.linalg.norm(y - before)) <= TOLERANCE * max(float(np.linalg.norm(y)), 1.0):
            break
    found: Floats = (y + y.T) / 2
    return found


def _matrix(names: Sequence[str], between: Mapping[str, Mapping[str, float]], rel: str) -> Floats:
    place = {name: i for i, name in enumerate(names)}
    matrix = np.eye(len(names))
    given: set[tuple[int, int]] = set()
    for a, row in between.items():
        for b, rho in row.items():
            i, j = sorted((place[a], place[b]))
            if i == j:
                raise FrameRefused(
                    f"{rel} field correlation_between: {a} with itself is always 1; remove it"
                )
            if (i, j) in given and matrix[i, j] != rho:
                raise FrameRefused(
                    f"{rel} field correlation_between: {a} and {b} are given twice, as "
                    f"{matrix[i, j]:g} and {rho:g}; keep one"
                )
            given.add((i, j))
            matrix[i, j] = matrix[j, i] = rho
    return matrix


def factor_correlation(
    between: Mapping[str, Mapping[str, float]],
    *,
    factors: Sequence[str],
    repair: bool,
    rel: str = "project.md",
) -> FactorCorrelation | None:
    """The stated matrix over the factors it names (groups' and drivers' ids, ``factors``),
    checked; raises ``FrameRefused`` for a name that is no factor or a matrix that is not
    positive semi-definite (unless ``repair``)."""
    if not between:
        return None
    named = sorted({a for a in between} | {b for row in between.values() for b in row})
    unknown = [name for name in named if name not in factors]
    if unknown:
        raise FrameRefused(
            f"{rel} field correlation_between: {', '.join(unknown)} is no correlation group of "
            f"the project's correlation nor a driver ({', '.join(sorted(factors)) or 'none'}); "
            "name a group or a driver"
        )
    matrix = _matrix(named, between, rel)
    smallest = float(np.linalg.eigvalsh(matrix).min())
    if smallest >= SEMIDEFINITE:
        return FactorCorrelation(tuple(named), matrix)
    if not repair:
        raise FrameRefused(
            f"{rel} field correlation_between: the coefficients are not a correlation matrix "
            f"(not positive semi-definite: its smallest eigenvalue is {smallest:.3f}); make them "
            'consistent, or set [uncertainty] repair = "nearest" to simulate with the nearest '
            "correlation matrix instead (the report then says so)"
        )
    nearest = nearest_correlation(matrix)
    return FactorCorrelation(tuple(named), nearest, repaired=float(np.abs(nearest - matrix).max()))
