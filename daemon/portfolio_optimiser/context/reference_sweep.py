"""Every ingested project's reference candidates at once, from its compact prices: what the
portfolio's look at the reruns compares, so that a project whose candidates did not move is
decided without reading its bundle or measuring its lines one by one.

Decides, for each project, the reference candidates ``reference_candidates`` would give it
against ``ReferenceIndex.assess``'s snapshot — as (code, unit, grade, saving) each, in its line
order — or None when it cannot tell without the project's IR (its lines in the index are not its
own posts: a project id in two folders, or a project changed since the index was built).

Every post is measured over arrays at once, with ``PriceFit``'s own arithmetic on the same
numbers in the same order — its logarithms and exponentials as ``math`` takes them
(``fit_kernels``; numpy's may differ in the last place) — so a grade and an expected price are
the ones ``assess`` gives, to the last digit (``tests/test_reference_sweep.py``). A post whose
spread is the median of too few residuals is measured as ``assess`` measures it
(``PriceFit.indexed_reference``). Savings are ``reference_saving``'s, worked out over arrays
(``reference_savings``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
from numpy.typing import NDArray

from .fit_arrays import Entries
from .fit_kernels import exps, logs
from .line_references import ProjectReferences
from .price_fit import PriceFit
from .reference import ProjectPrices, reference_saving

__all__ = ["ReferenceKey", "ReferenceSweep", "material_savings", "within_band"]

ReferenceKey = tuple[str, str, str, int]
"""A reference candidate as a project's version sees it: (code, unit, grade, saving)."""


def within_band(
    held: tuple[ReferenceKey, ...],
    now: tuple[ReferenceKey, ...],
    band: float,
    floor: float = 0.0,
) -> bool:
    """Whether a project's reference candidates now are the ones it was identified by, but for
    savings each within ``band`` of the saving it was identified by, or within half ``floor``
    (the materiality floor) where that is wider: the same candidates, in the same order, with
    the same grades. A saving is rounded down to two significant figures, so one more project
    among thousands moves many by one rounding step (at 10 000 projects, about 1 500 projects'
    savings, a median 2 % and at most 10 % each): no reason to run them again."""
    return len(held) == len(now) and all(
        h[:3] == n[:3] and abs(n[3] - h[3]) <= max(band * h[3], floor / 2)
        for h, n in zip(held, now, strict=True)
    )


@dataclass(frozen=True)
class _Posts:
    """One project's posts as arrays: class ids in the sweep's own numbering (-1: none)."""

    prices: ProjectPrices
    klass: NDArray[np.int64]
    price: NDArray[np.float64]
    quantity: NDArray[np.float64]
    classes: NDArray[np.int64]
    class_price: NDArray[np.float64]


@dataclass
class ReferenceSweep:
    """Kept by the one process that looks at the reruns: each project's posts as arrays,
    made again only when its prices change."""

    _keys: dict[tuple[str, str], int] = field(default_factory=dict)
    _posts: dict[str, _Posts] = field(default_factory=dict)

    def keys(
        self,
        fit: PriceFit,
        projects: Mapping[str, ProjectPrices],
        pause: Callable[[], None] = lambda: None,
    ) -> dict[str, tuple[ReferenceKey, ...] | None]:
        """Each project's (by folder) reference candidates, or None where only its IR tells.
        ``pause`` is called before each project's posts are made arrays (ten thousand of them
        after a start: a third of a second)."""
        self._posts = {name: self._arrays(name, prices, pause) for name, prices in projects.items()}
        entries = fit.entries()
        known = np.full(len(self._keys) + 1, -1, dtype=np.int64)  # the last: no class
        for key, k in self._keys.items():
            known[k] = entries.key_index.get(key, -1)
        sweep = _Sweep(fit, entries, known, list(self._posts.values()))
        return dict(zip(self._posts, sweep.keys(), strict=True))

    def _arrays(self, name: str, prices: ProjectPrices, pause: Callable[[], None]) -> _Posts:
        kept = self._posts.get(name)
        if kept is not None and kept.prices is prices:
            return kept
        pause()
        ids = self._keys

        def class_id(key: tuple[str, str]) -> int:
            return ids.setdefault(key, len(ids)) if key[0] else -1

        posts = prices.posts
        return _Posts(
            prices,
            np.array(
                [class_id(key) for key in zip(posts.compared, posts.units, strict=True)],
                dtype=np.int64,
            ),
            np.frombuffer(posts.prices, dtype=np.float64).copy(),
            np.frombuffer(posts.quantities, dtype=np.float64).copy(),
            np.array([class_id((a, u)) for a, u, _p, _s in prices.classes], dtype=np.int64),
            np.array([p for _a, _u, p, _s in prices.classes], dtype=np.float64),
        )


_GRADES: Final[tuple[str | None, ...]] = (None, "possible", "likely")


class _Sweep:
    def __init__(
        self,
        fit: PriceFit,
        entries: Entries,
        known: NDArray[np.int64],
        posts: list[_Posts],
    ) -> None:
        self.fit, self.entries, self.posts = fit, entries, posts
        n_projects = max(len(entries.project_index), 1)
        self.project = np.array(
            [entries.project_index.get(p.prices.project_id, -1) for p in posts], dtype=np.int64
        )
        # Each (class, project) pair's entry, found by bisection in the pairs sorted.
        pairs = entries.klass * n_projects + entries.project
        # Sorted already where the projects are numbered in their ids' order (``Lines``).
        ordered = bool((pairs[1:] >= pairs[:-1]).all())
        self._order = np.arange(len(pairs)) if ordered else np.argsort(pairs, kind="stable")
        self._pairs = pairs if ordered else pairs[self._order]
        self._n_projects, self._known = n_projects, known

    def _entry(self, klass: NDArray[np.int64], project: NDArray[np.int64]) -> NDArray[np.int64]:
        """Each (class, project)'s last entry; -1 where there is none."""
        k = self._known[klass]
        wanted = k * self._n_projects + project
        at = np.searchsorted(self._pairs, wanted, side="right") - 1
        safe = np.maximum(at, 0)
        found = (k >= 0) & (project >= 0) & (at >= 0) & (self._pairs[safe] == wanted)
        return np.where(found, self._order[safe], -1)

    def _own(self) -> NDArray[np.bool_]:
        """Which projects' lines in the index are their own classes' prices, and no other's (a
        project id in two folders has twice the lines)."""
        sizes = np.array([len(p.classes) for p in self.posts], dtype=np.int64)
        owner = np.repeat(np.arange(len(self.posts)), sizes)
        project = self.project[owner]
        klass = np.concatenate([p.classes for p in self.posts])
        price = np.concatenate([p.class_price for p in self.posts])
        entry = self._entry(klass, project)
        safe = np.maximum(entry, 0)
        ok = (entry >= 0) & (self.entries.price[safe] == price)
        counted = np.bincount(owner, weights=ok, minlength=len(self.posts))
        indexed = np.bincount(self.entries.project, minlength=self._n_projects)
        own: NDArray[np.bool_] = (
            (self.project >= 0) & (counted == sizes) & (indexed[self.project] == sizes)
        )
        return own

    def keys(self) -> list[tuple[ReferenceKey, ...] | None]:
        """As ``reference_candidates`` finds them, in post order."""
        if not self.posts:
            return []
        if not len(self._pairs):  # a version fitted from no project: they all arrived since
            return [None] * len(self.posts)
        own = self._own()
        sizes = np.array([len(p.klass) for p in self.posts], dtype=np.int64)
        owner = np.repeat(np.arange(len(self.posts)), sizes)
        starts = np.r_[0, np.cumsum(sizes)]
        price = np.concatenate([p.price for p in self.posts])
        entry = self._entry(np.concatenate([p.klass for p in self.posts]), self.project[owner])
        grade, expected = self._graded(entry, price)
        # A post is its code's one post in its project (the IR refuses a code used twice), so
        # it is graded by its own measure, as ``reference_candidates`` grades it.
        graded = (grade > 0) & own[owner]
        quantity = np.concatenate([p.quantity for p in self.posts])
        found: list[list[ReferenceKey]] = [[] for _ in self.posts]
        references = self.fit.references("", ())
        at = np.flatnonzero(graded)
        savings = reference_savings(price[at], rounded_to_cents(expected[at]), quantity[at])
        size = np.array([p.prices.size for p in self.posts], dtype=np.float64)
        worth = material_savings(savings, size[owner[at]], references)
        at, savings = at[worth], savings[worth]
        by = owner[at]
        for o, j, g, saving in zip(
            by.tolist(),
            (at - starts[by]).tolist(),
            grade[at].tolist(),
            savings.tolist(),
            strict=True,
        ):
            compared = self.posts[o].prices.posts
            found[o].append((compared.codes[j], compared.units[j], _GRADES[g] or "", saving))
        return [tuple(f) if own[o] else None for o, f in enumerate(found)]

    def _graded(
        self, entry: NDArray[np.int64], price: NDArray[np.float64]
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """Each post's grade (0 none, 1 possible, 2 likely) and its expected price. The figures are
        ``PriceFit._reference``'s own arithmetic on the same numbers, in the same order (its
        logarithms and exponentials as ``math`` takes them: numpy's may differ in the last
        place); a post whose spread is a median of too few residuals is measured as ``assess``
        measures it."""
        e, rule = self.entries, self.fit.rule  # the grades as ``price_fit.grade`` gives them
        safe = np.maximum(entry, 0)
        centre = e.centre[safe]
        measured = (entry >= 0) & ~np.isnan(centre) & (e.compared[safe] > 0)
        grade = np.zeros(len(entry), dtype=np.int64)
        expected = np.zeros(len(entry))
        arrays = np.flatnonzero(measured & ~e.exact_spread[safe])
        at = safe[arrays]
        project, klass = e.project[at], e.klass[at]
        shift = e.level_a[project] + e.level_b[project] * e.loading[klass]
        middle = centre[arrays]
        figured = exps(middle + shift)
        sigmas = (logs(price[arrays]) - middle - shift) / e.spread[at]
        ok = (e.compared[at] >= rule.min_comparables) & ~(
            price[arrays] < figured * (1 + rule.min_excess)
        )
        grade[arrays] = np.where(
            ok & (sigmas >= rule.threshold),
            2,
            np.where(ok & (sigmas >= rule.possible_threshold), 1, 0),
        )
        expected[arrays] = figured
        for i in np.flatnonzero(measured & e.exact_spread[safe]).tolist():
            line = self.fit.indexed_reference(int(entry[i]), "", "", float(price[i]))
            if line is not None:
                grade[i], expected[i] = _GRADES.index(line.grade), line.expected_nok
        return grade, expected


EXACT_BEYOND: Final = 2.0**-50
"""A bound on the relative error of one float operation on inputs read from their shortest
decimal forms, with room to spare (each is within 2**-53 of its decimal)."""


def rounded_to_cents(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Each value as ``round(value, 2)`` gives it (the double nearest its decimal rounding, half
    to even): over the array where the hundredfold value is clear of a half, by ``round`` itself
    where it is not (numpy's rounding scales first, and the scaling can cross a half)."""
    scaled = values * 100
    whole = np.rint(scaled)
    near_half = np.abs(np.abs(scaled - whole) - 0.5) <= np.abs(scaled) * EXACT_BEYOND * 4 + 1e-300
    rounded = whole / 100
    unclear = near_half | ~(np.abs(scaled) < 2.0**52)
    for i in np.flatnonzero(unclear).tolist():
        rounded[i] = round(float(values[i]), 2)
    return rounded


def material_savings(
    savings: NDArray[np.int64], sizes: NDArray[np.float64], references: ProjectReferences
) -> NDArray[np.bool_]:
    """``material`` of each (saving, its project's size), over arrays: a saving is a whole
    number of kroner of two significant figures (``reference_savings``), which a float holds
    exactly at any size, so each comparison is ``material``'s."""
    return (
        (savings > 0)
        & (savings >= references.min_saving_nok)
        & (savings >= references.min_share * sizes)
    )


def reference_savings(
    prices: NDArray[np.float64], expected: NDArray[np.float64], quantities: NDArray[np.float64]
) -> NDArray[np.int64]:
    """``reference_saving`` of each (unit price, expected price, quantity), over arrays: in
    floating point where its error cannot reach the edge of a step of two significant figures,
    and by ``reference_saving``'s exact decimals where it might (a few in a million)."""
    excess = (prices - expected) * quantities
    # What the float may be off the exact decimal product by: the inputs' own distance from
    # their decimals, the subtraction, the product, and the division into steps below.
    error = ((np.abs(prices) + np.abs(expected)) * np.abs(quantities) + np.abs(excess)) * (
        EXACT_BEYOND * 4
    )
    # The float's sign is the exact one's (a correctly rounded difference keeps its sign, and
    # shortest decimals keep the floats' order): no excess is no saving either way.
    positive = excess > 0
    safe_excess = np.where(positive, excess, 1.0)
    power = np.floor(np.log10(safe_excess))
    step = 10.0 ** np.maximum(power - 1, 0)
    steps = safe_excess / step
    floor = np.floor(steps)
    margin = error / step
    clear = (
        positive
        & (steps - floor > margin)
        & (floor + 1 - steps > margin)  # a power of ten is a step's edge on either side
        & (safe_excess < 1e15)
    )
    savings = np.where(clear, floor * step, 0.0).astype(np.int64)
    for i in np.flatnonzero(~clear & positive).tolist():
        savings[i] = reference_saving(float(prices[i]), float(expected[i]), float(quantities[i]))
    return savings
