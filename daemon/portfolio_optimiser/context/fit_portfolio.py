"""The portfolio's price fit itself: every comparable of the index fitted at once, over arrays
(``fit_arrays``) — the classes' loadings, centres and spreads, the projects' levels, each index
entry's residual — and looked up one line at a time by ``PriceFit``, which measures a project's
lines. ``price_fit`` says what is fitted and why."""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
from numpy.typing import NDArray

from .fit_arrays import (
    MAD_TO_SIGMA,
    TRUNCATED_TO_SIGMA,
    Entries,
    Floats,
    Groups,
    Ints,
    Levels,
    Partition,
    Spread,
    class_rank,
    dense_ranks,
)
from .fit_lines import Lines

if TYPE_CHECKING:  # reference.py builds on price_fit, which builds on this; typing only
    from .reference import ReferenceIndex

__all__ = ["ROUNDS", "TINY", "ClassKey", "FitLine", "PortfolioFit"]

ClassKey = tuple[str, str]

TINY: Final = 1e-9
ROUNDS: Final = 3


@dataclass(frozen=True)
class FitLine:
    """One project's line in a class, as it is measured."""

    project_id: str
    category: str | None
    key: ClassKey
    log_price: float
    price: float
    entry: int = -1
    """Its place in the fit's arrays; -1 for a line of a bundle about to run."""


class PortfolioFit:
    """The fitted portfolio, built once per published index."""

    def __init__(self, index: ReferenceIndex) -> None:
        self.rule = rule = index.rule
        self._keys = list(index.classes)
        self.key_index = {key: k for k, key in enumerate(self._keys)}
        n_classes = len(self._keys)
        kept = index.columns
        lines = self._arrays = kept.lines() if kept else Lines.of(index.classes.values())
        self._project_index = {p: i for i, p in enumerate(lines.project_ids)}
        self._category_index = {c: i for i, c in enumerate(lines.categories)}
        self._cat_group = lines.by_category()
        self._n_cat_groups = lines.group_count(n_classes)
        classes = np.arange(n_classes)
        self._by_class = Partition.of(lines.klass, n_classes)
        self._by_cat = Partition.of(self._cat_group, self._n_cat_groups)
        by_price = Groups(self._by_class, lines.log_price)
        deviation = np.abs(lines.log_price - by_price.median(lines.klass))
        mad = MAD_TO_SIGMA * Groups(self._by_class, deviation).median(classes)
        self._loading_of = np.maximum(
            np.where(by_price.count >= 2, mad, 0.0), rule.min_spread
        ).astype(np.float64)
        self.loading = {key: float(v) for key, v in zip(self._keys, self._loading_of, strict=True)}
        rounded = [round(v, 9) for v in self.loading.values()]
        ranks = {v: i for i, v in enumerate(sorted(set(rounded)))}
        self._x_rank = np.array([ranks[v] for v in rounded], dtype=np.int64)
        self._class_rank = dense_ranks(
            np.array([class_rank(key) for key in self._keys], dtype=np.int64), self._loading_of
        )
        n_projects = len(lines.project_ids)
        self._levels = Levels.of(
            lines.project,
            self._loading_of[lines.klass],
            self._x_rank[lines.klass],
            self._class_rank[lines.klass],
            n_projects,
        )
        self._a, self._b = np.zeros(n_projects), np.zeros(n_projects)
        for _round in range(ROUNDS):
            self._fit_centres()
            centre = self._centres(leave_out=False)
            a, b, fitted = self._levels.fit(lines.log_price - centre)
            self._a, self._b = np.where(fitted, a, self._a), np.where(fitted, b, self._b)
        self._fit_centres()
        self._fit_spreads()

    def shift(self, line: FitLine) -> float:
        p = self._project_index.get(line.project_id)
        if p is None:
            return 0.0
        return float(self._a[p]) + float(self._b[p]) * self.loading[line.key]

    def _fit_centres(self) -> None:
        """Each class's prices at the standard level, sorted: across categories and by category."""
        lines = self._arrays
        x = self._loading_of[lines.klass]
        self._value = lines.log_price - (self._a[lines.project] + self._b[lines.project] * x)
        self._across = Groups(self._by_class, self._value)
        self._by_category = Groups(self._by_cat, self._value)
        self._adjusted: dict[tuple[ClassKey, str | None], list[float]] = {}

    def _in_category(self, entries: Ints, others: int) -> NDArray[np.bool_]:
        """Whether each entry's centre is taken among its own category."""
        group = self._cat_group[entries]
        counts = self._by_category.count[np.maximum(group, 0)] if len(group) else group
        return (group >= 0) & (counts - others >= self.rule.min_comparables)

    def _centres(self, *, leave_out: bool) -> Floats:
        """Each entry's class centre: with its project's line in the class (the last, for a
        project id in two folders) left out when ``leave_out``; NaN when none is left."""
        lines = self._arrays
        entries = lines.last if leave_out else np.arange(len(lines))
        among = self._in_category(entries, 1 if leave_out else 0)
        klass, group = lines.klass[entries], np.maximum(self._cat_group[entries], 0)
        if leave_out:
            across = self._across.median_without(klass, entries)
            by_category = self._by_category.median_without(group, entries)
        else:
            across, by_category = self._across.median(klass), self._by_category.median(group)
        return np.where(among, by_category, across)

    def group(self, key: ClassKey, category: str | None) -> int | None:
        k = self.key_index.get(key)
        c = self._category_index.get(category) if category else None
        if k is None or c is None:
            return None
        return k * max(len(self._arrays.categories), 1) + c

    def values(self, key: ClassKey, category: str | None) -> list[float]:
        """A class's adjusted values, sorted (in ``category`` when one is named)."""
        found = self._adjusted.get((key, category))
        if found is None:
            if category is None:
                group, groups = self.key_index.get(key), self._across
            else:
                group, groups = self.group(key, category), self._by_category
            found = groups.slice(group).tolist() if group is not None else []
            self._adjusted[(key, category)] = found
        return found

    def _fit_spreads(self) -> None:
        """Each indexed project's judging level; each indexed line's residual (``residual``);
        each class's spread (``Spread``), and the spread pooled over the classes."""
        lines = self._arrays
        self._judged_a, self._judged_b, _fitted = self._levels.fit(
            lines.log_price - self._centres(leave_out=True)
        )
        among = self._in_category(np.arange(len(lines)), 1)
        own = np.where(
            among,
            self._by_category.median_without(np.maximum(self._cat_group, 0), np.arange(len(lines))),
            self._across.median_without(lines.klass, np.arange(len(lines))),
        )
        x = self._loading_of[lines.klass]
        p = lines.project
        self._residuals = lines.log_price - self._judged_a[p] - self._judged_b[p] * x - own
        self._own_centre = own
        chosen = np.where(
            among,
            self._by_category.count[np.maximum(self._cat_group, 0)],
            self._across.count[lines.klass],
        )
        self._compared = chosen - 1
        """How many other projects each entry is measured against (``LineReference.n``)."""
        known = ~np.isnan(self._residuals)
        order = np.argsort(lines.klass[known], kind="stable")
        counts = np.bincount(lines.klass[known], minlength=len(self._keys))
        ordered, ends = self._residuals[known][order], np.cumsum(counts)
        self._spreads = {
            key: Spread(ordered[end - count : end])
            for key, count, end in zip(self._keys, counts, ends, strict=True)
        }
        spreads = [
            spread.sigma()
            for spread in self._spreads.values()
            if spread.n > self.rule.min_comparables
        ]
        self._pooled = max(statistics.median(spreads) if spreads else 0.0, self.rule.min_spread)
        self._prices: dict[tuple[ClassKey, str | None], list[float]] = {}
        self._price_groups: tuple[Groups, Groups] | None = None

    @functools.cached_property
    def _project_entries(self) -> list[Ints]:
        """Each project's entries (split when first asked for: a look at the reruns never asks)."""
        p = self._arrays.project
        by_project = np.argsort(p, kind="stable")
        return np.split(
            by_project, np.cumsum(np.bincount(p, minlength=len(self._arrays.project_ids)))[:-1]
        )

    def entries(self) -> Entries:
        """Every index entry's figures as arrays, to measure many projects' posts at once."""
        lines, rule = self._arrays, self.rule
        residual = self._residuals
        has = ~np.isnan(residual)
        spreads = [self._spreads[key] for key in self._keys]
        kept = np.array([s.kept for s in spreads], dtype=np.float64)[lines.klass]
        squares = np.array([s.squares for s in spreads])[lines.klass]
        cut = np.array([s.cut for s in spreads])[lines.klass]
        inside = has & (np.abs(np.where(has, residual, 0.0)) <= cut)
        kept = kept - inside
        squares = squares - np.where(inside, residual * residual, 0.0)
        own = TRUNCATED_TO_SIGMA * np.sqrt(np.maximum(squares, 0.0) / np.maximum(kept, 1))
        n = np.array([s.n for s in spreads], dtype=np.float64)[lines.klass] - has
        n0 = rule.shrink_comparables
        total = np.maximum(n + n0, 1)
        shrunk = np.where(n + n0 > 0, np.sqrt((n * own**2 + n0 * self._pooled**2) / total), 0.0)
        return Entries(
            project=lines.project,
            klass=lines.klass,
            price=lines.price,
            centre=self._own_centre,
            compared=self._compared,
            spread=np.maximum(shrunk, max(rule.min_spread, TINY)),
            exact_spread=kept < 3,
            level_a=self._judged_a,
            level_b=self._judged_b,
            loading=self._loading_of,
            project_index=self._project_index,
            key_index=self.key_index,
        )

    def indexed(self, project_id: str) -> list[FitLine]:
        """The project's lines in the index, as the fit holds them."""
        p = self._project_index.get(project_id)
        return [] if p is None else [self.line(int(i)) for i in self._project_entries[p]]

    def line(self, entry: int) -> FitLine:
        lines = self._arrays
        c = int(lines.category[entry])
        return FitLine(
            lines.project_ids[int(lines.project[entry])],
            lines.categories[c] if c >= 0 else None,
            self._keys[int(lines.klass[entry])],
            float(lines.log_price[entry]),
            float(lines.price[entry]),
            entry,
        )

    def residual(self, line: FitLine) -> float | None:
        """How far an indexed line lies from what it is judged against — a centre taken without
        it, at the level it is judged at — so the spread is calibrated to what an assessment
        measures (in-sample residuals of a median run about 10 % small at 15 comparables, and
        the tail they flag is three times the normal one). None in a class of one."""
        residual = float(self._residuals[line.entry])
        return None if math.isnan(residual) else residual

    def judged(self, project_id: str) -> tuple[float, float]:
        p = self._project_index.get(project_id)
        if p is None:  # a project with no line in the index is judged at the standard level
            return 0.0, 0.0
        return float(self._judged_a[p]), float(self._judged_b[p])

    def spread(self, residual: float | None, key: ClassKey) -> float:
        """The class's spread (without the line whose ``residual`` is given), shrunk toward the
        pooled one when thin."""
        spread = self._spreads[key]
        own = spread.sigma(residual)
        n = spread.n - (1 if residual is not None else 0)
        n0 = self.rule.shrink_comparables
        shrunk = math.sqrt((n * own**2 + n0 * self._pooled**2) / (n + n0)) if n + n0 else 0.0
        return max(shrunk, self.rule.min_spread, TINY)

    def prices(self, key: ClassKey, among: str | None) -> list[float]:
        """A class's unit prices as written, sorted (in ``among`` when named): sorted once, not
        again per line (a portfolio of thousands would sort every class once per project)."""
        prices = self._prices.get((key, among))
        if prices is None:
            if self._price_groups is None:
                lines = self._arrays
                self._price_groups = (
                    Groups(self._by_class, lines.price),
                    Groups(self._by_cat, lines.price),
                )
            across, by_category = self._price_groups
            group = self.key_index.get(key) if among is None else self.group(key, among)
            groups = across if among is None else by_category
            prices = groups.slice(group).tolist() if group is not None else []
            self._prices[(key, among)] = prices
        return prices
