"""The portfolio's unit prices, fitted: what each priced line is expected to cost in its project.

Decides, purely from the reference classes (every ingested project's priced lines): each class's
centre and spread, each project's own price level, and so each line's expected unit price and how
far above it the line lies, in robust deviations. Never reads a file; never decides what is a
candidate (``reference`` does, from what this gives).

It works on log unit prices (a price is a factor above another, never an amount) and divides out
what is not a saving before it compares:

* **a project's price level.** Some projects are dearer on every line (a dearer region, a hard
  site, a tight market), and most on the codes whose prices move most. Fitted per project from all
  its priced lines as ``log p - centre = a + b * L`` (``L`` the class's spread across projects),
  robustly: Theil-Sen, the median of pairwise slopes, so a few overpriced lines barely move it.
  A project with fewer than ``MIN_LINES_FOR_LEVEL`` priced lines keeps level 1: a few lines
  cannot tell a dear project from dear lines. Centres and levels are fitted in turn, ``ROUNDS`` times.
* **its category.** A class's centre is taken among the project's own category when that has
  ``min_comparables`` other projects, else across categories (the level then takes in the rest).

A line's spread is its code's: the robust spread of every other project's residual in the class,
shrunk toward the spread pooled over all classes when the class is thin (``shrink_comparables``
pseudo-comparables). Its reference is leave-one-out: its own project never sets its centre or
its spread — nor does an earlier version of it (a revised bundle about to run is measured as
the portfolio will stand once it replaces its earlier version).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
from numpy.typing import NDArray

from .fit_arrays import (
    MAD_TO_SIGMA,
    MIN_LINES_FOR_LEVEL,
    TRUNCATED_TO_SIGMA,
    Entries,
    Floats,
    Groups,
    Ints,
    Lines,
    Spread,
    median_without,
    theil_sen,
    theil_sen_points,
)
from .line_references import Grade, LineReference, ProjectReferences

if TYPE_CHECKING:  # reference.py builds on this module; typing only
    from .reference import ReferenceIndex

__all__ = ["PriceFit", "weighted_price"]

ClassKey = tuple[str, str]

TINY: Final = 1e-9
ROUNDS: Final = 3


def weighted_price(entries: Sequence[tuple[float, float]]) -> float:
    """(quantity, unit price) entries' quantity-weighted price; one entry's own price exactly."""
    if len(entries) == 1:
        return entries[0][1]
    return math.fsum(q * p for q, p in entries) / math.fsum(q for q, _p in entries)


@dataclass(frozen=True)
class _Line:
    project_id: str
    category: str | None
    key: ClassKey
    log_price: float
    price: float
    entry: int = -1
    """Its place in the fit's arrays; -1 for a line of a bundle about to run."""


class PriceFit:
    """The fitted portfolio: build once per published index (``ReferenceIndex.fit``). Fitted
    over arrays (``fit_arrays``), every comparable at once; a project's lines are then measured
    one project at a time (``assess``)."""

    def __init__(self, index: ReferenceIndex) -> None:
        self.rule = rule = index.rule
        self._keys = list(index.classes)
        self._key_index = {key: k for k, key in enumerate(self._keys)}
        n_classes = len(self._keys)
        lines = self._arrays = Lines.of(
            [
                [(c.project_id, c.category, c.unit_price_nok) for c in comparables]
                for comparables in index.classes.values()
            ],
            n_classes,
        )
        self._project_index = {p: i for i, p in enumerate(lines.project_ids)}
        self._category_index = {c: i for i, c in enumerate(lines.categories)}
        self._cat_group = lines.by_category()
        self._n_cat_groups = lines.group_count(n_classes)
        classes = np.arange(n_classes)
        by_price = Groups.of(lines.klass, lines.log_price, n_classes)
        deviation = np.abs(lines.log_price - by_price.median(lines.klass))
        mad = MAD_TO_SIGMA * Groups.of(lines.klass, deviation, n_classes).median(classes)
        self._loading_of = np.maximum(
            np.where(by_price.count >= 2, mad, 0.0), rule.min_spread
        ).astype(np.float64)
        self._loading = {key: float(v) for key, v in zip(self._keys, self._loading_of, strict=True)}
        rounded = [round(v, 9) for v in self._loading.values()]
        ranks = {v: i for i, v in enumerate(sorted(set(rounded)))}
        self._x_rank = np.array([ranks[v] for v in rounded], dtype=np.int64)
        n_projects = len(lines.project_ids)
        self._a, self._b = np.zeros(n_projects), np.zeros(n_projects)
        for _round in range(ROUNDS):
            self._fit_centres()
            centre = self._centres(leave_out=False)
            a, b, fitted = self._theil_sen(lines.log_price - centre)
            self._a, self._b = np.where(fitted, a, self._a), np.where(fitted, b, self._b)
        self._fit_centres()
        self._fit_spreads()

    # -- fitting --------------------------------------------------------------------------------

    def _shift(self, line: _Line) -> float:
        p = self._project_index.get(line.project_id)
        if p is None:
            return 0.0
        return float(self._a[p]) + float(self._b[p]) * self._loading[line.key]

    def _fit_centres(self) -> None:
        """Each class's prices at the standard level, sorted: across categories and by category."""
        lines = self._arrays
        x = self._loading_of[lines.klass]
        self._value = lines.log_price - (self._a[lines.project] + self._b[lines.project] * x)
        self._across = Groups.of(lines.klass, self._value, len(self._keys))
        self._by_category = Groups.of(self._cat_group, self._value, self._n_cat_groups)
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

    def _theil_sen(self, y: Floats) -> tuple[Floats, Floats, NDArray[np.bool_]]:
        """Each project's level through its lines' (loading, ``y``), where ``y`` is a number."""
        lines, known = self._arrays, ~np.isnan(y)
        return theil_sen(
            lines.project[known],
            self._loading_of[lines.klass[known]],
            y[known],
            self._x_rank[lines.klass[known]],
            len(lines.project_ids),
        )

    def _group(self, key: ClassKey, category: str | None) -> int | None:
        k = self._key_index.get(key)
        c = self._category_index.get(category) if category else None
        if k is None or c is None:
            return None
        return k * max(len(self._arrays.categories), 1) + c

    def _values(self, key: ClassKey, category: str | None) -> list[float]:
        """A class's adjusted values, sorted (in ``category`` when one is named)."""
        found = self._adjusted.get((key, category))
        if found is None:
            if category is None:
                group, groups = self._key_index.get(key), self._across
            else:
                group, groups = self._group(key, category), self._by_category
            found = groups.slice(group).tolist() if group is not None else []
            self._adjusted[(key, category)] = found
        return found

    def _centre_key(self, key: ClassKey, category: str | None, *, others: int) -> str | None:
        """The category whose comparables centre the class (None: across categories)."""
        if category and len(self._values(key, category)) - others >= self.rule.min_comparables:
            return category
        return None

    def _centre(self, line: _Line, *, leave_out: bool) -> tuple[float | None, str | None, int]:
        among = self._centre_key(line.key, line.category, others=1 if leave_out else 0)
        values = self._values(line.key, among)
        if leave_out:
            return (
                median_without(values, line.log_price - self._shift(line)),
                among,
                len(values) - 1,
            )
        return statistics.median(values), among, len(values)

    def _centred(
        self, lines: Sequence[_Line], indexed: dict[ClassKey, _Line] | None = None
    ) -> list[tuple[_Line, float]]:
        """Each line with its class's centre: taken without the project's indexed line of that
        class when ``indexed`` is given (its own, or its earlier version's)."""
        found = []
        for line in lines:
            old = indexed.get(line.key) if indexed is not None else None
            centre = (
                self._centre(old, leave_out=True)[0]
                if old is not None
                else self._centre(line, leave_out=False)[0]
            )
            if centre is not None:
                found.append((line, centre))
        return found

    def _judging_level(
        self, lines: Sequence[_Line], indexed: dict[ClassKey, _Line]
    ) -> tuple[float, float]:
        """The level a project's lines are judged at: against centres without the project."""
        centred = self._centred(lines, indexed)
        if len(centred) < MIN_LINES_FOR_LEVEL:
            return 0.0, 0.0
        return theil_sen_points([(self._loading[ln.key], ln.log_price - c) for ln, c in centred])

    def _fit_spreads(self) -> None:
        """Each indexed project's judging level; each indexed line's residual (``_residual``);
        each class's spread (``Spread``), and the spread pooled over the classes."""
        lines = self._arrays
        self._judged_a, self._judged_b, _fitted = self._theil_sen(
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
        by_project = np.argsort(p, kind="stable")
        self._project_entries = np.split(
            by_project, np.cumsum(np.bincount(p, minlength=len(lines.project_ids)))[:-1]
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
            last=lines.last,
            centre=self._own_centre,
            compared=self._compared,
            spread=np.maximum(shrunk, max(rule.min_spread, TINY)),
            exact_spread=kept < 3,
            level_a=self._judged_a,
            level_b=self._judged_b,
            loading=self._loading_of,
            project_index=self._project_index,
            key_index=self._key_index,
        )

    def _indexed(self, project_id: str) -> list[_Line]:
        """The project's lines in the index, as the fit holds them."""
        p = self._project_index.get(project_id)
        return [] if p is None else [self._line(int(i)) for i in self._project_entries[p]]

    def _line(self, entry: int) -> _Line:
        lines = self._arrays
        c = int(lines.category[entry])
        return _Line(
            lines.project_ids[int(lines.project[entry])],
            lines.categories[c] if c >= 0 else None,
            self._keys[int(lines.klass[entry])],
            float(lines.log_price[entry]),
            float(lines.price[entry]),
            entry,
        )

    def _residual(self, line: _Line) -> float | None:
        """How far an indexed line lies from what it is judged against — a centre taken without
        it, at the level it is judged at — so the spread is calibrated to what an assessment
        measures (in-sample residuals of a median run about 10 % small at 15 comparables, and
        the tail they flag is three times the normal one). None in a class of one."""
        residual = float(self._residuals[line.entry])
        return None if math.isnan(residual) else residual

    def _level_cached(self, project_id: str) -> tuple[float, float]:
        p = self._project_index.get(project_id)
        if p is None:  # a project with no line in the index is judged at the standard level
            return 0.0, 0.0
        return float(self._judged_a[p]), float(self._judged_b[p])

    def _spread(self, residual: float | None, key: ClassKey) -> float:
        """The class's spread (without the line whose ``residual`` is given), shrunk toward the
        pooled one when thin."""
        spread = self._spreads[key]
        own = spread.sigma(residual)
        n = spread.n - (1 if residual is not None else 0)
        n0 = self.rule.shrink_comparables
        shrunk = math.sqrt((n * own**2 + n0 * self._pooled**2) / (n + n0)) if n + n0 else 0.0
        return max(shrunk, self.rule.min_spread, TINY)

    # -- a project's lines ----------------------------------------------------------------------

    def assess(
        self,
        project_id: str,
        category: str | None,
        priced: Iterable[tuple[str, str, str, float, float]],
    ) -> ProjectReferences:
        """Each of the project's priced lines (code, compared as, unit, unit price, quantity)
        against the others. The project counts once per class (several posts of one description
        at their quantity-weighted price), as the index counts it. A bundle about to run — new,
        or a revised version of an ingested project — is measured as the portfolio will stand
        once it settles: never against an earlier version of itself."""
        lines = [
            entry for entry in priced if (entry[1], entry[2]) in self._key_index and entry[3] > 0
        ]
        classes: dict[ClassKey, list[tuple[float, float]]] = {}
        for _code, compared_as, unit, price, quantity in lines:
            classes.setdefault((compared_as, unit), []).append((quantity, price))
        mine = [
            _Line(project_id, category, key, math.log(p), p)
            for key, entries in classes.items()
            if (p := weighted_price(entries)) > 0
        ]
        own = self._indexed(project_id)
        indexed = {ln.key: ln for ln in own}
        same = sorted((ln.key, round(ln.price, 6)) for ln in own) == sorted(
            (m.key, round(m.price, 6)) for m in mine
        )
        a, b = self._level_cached(project_id) if same else self._judging_level(mine, indexed)
        found = []
        for code, compared_as, unit, price, _quantity in lines:
            key = (compared_as, unit)
            old = indexed.get(key)
            line = old or _Line(project_id, category, key, math.log(price), price)
            reference = self._reference(code, unit, price, line, old is not None, (a, b))
            if reference is not None:
                found.append(reference)
        return self.references(project_id, tuple(found))

    def references(self, project_id: str, lines: tuple[LineReference, ...]) -> ProjectReferences:
        rule = self.rule
        return ProjectReferences(
            project_id, lines, rule.min_comparables, rule.min_saving_nok, rule.min_share
        )

    def indexed_reference(
        self, entry: int, code: str, unit: str, price: float
    ) -> LineReference | None:
        """A post of an indexed project whose lines in the index are its own, measured as
        ``assess`` measures it: against its class's index ``entry``, at the project's level."""
        old = self._line(entry)
        p = int(self._arrays.project[entry])
        level = float(self._judged_a[p]), float(self._judged_b[p])
        return self._reference(code, unit, price, old, True, level)

    def _reference(
        self,
        code: str,
        unit: str,
        price: float,
        line: _Line,
        indexed: bool,
        level: tuple[float, float],
    ) -> LineReference | None:
        """A post measured against its class: without the project's ``indexed`` line in it (a
        probe of a line not in the index otherwise); None when nothing is left to compare."""
        old = line if indexed else None
        centre, among, n = self._centre(line, leave_out=indexed)
        if centre is None or n <= 0:
            return None
        key = line.key
        residual = self._residual(old) if old is not None else None
        spread = self._spread(residual, key)
        median = self._median_price(key, among, old)
        shift = level[0] + level[1] * self._loading[key]
        expected = math.exp(centre + shift)
        sigmas = (math.log(price) - centre - shift) / spread
        return LineReference(
            code=code,
            unit=unit,
            category=among,
            n=n,
            median_nok=round(median, 2) if median is not None else 0.0,
            expected_nok=round(expected, 2),
            level=round(math.exp(shift), 4),
            spread=round(spread, 4),
            sigmas=round(sigmas, 2),
            grade=self._grade(n, price, expected, sigmas),
            compared_as=key[0],
        )

    def _median_price(self, key: ClassKey, among: str | None, own: _Line | None) -> float | None:
        """The comparables' median unit price as written (in ``among`` when named), without the
        project's own line: from the class's prices sorted once, not sorted again per line (a
        portfolio of thousands would sort every class once per project)."""
        prices = self._prices.get((key, among))
        if prices is None:
            if self._price_groups is None:
                lines = self._arrays
                self._price_groups = (
                    Groups.of(lines.klass, lines.price, len(self._keys)),
                    Groups.of(self._cat_group, lines.price, self._n_cat_groups),
                )
            across, by_category = self._price_groups
            group = self._key_index[key] if among is None else self._group(key, among)
            found = (
                (across if among is None else by_category).slice(group)
                if group is not None
                else None
            )
            prices = self._prices[(key, among)] = found.tolist() if found is not None else []
        if own is not None and (among is None or own.category == among):
            return median_without(prices, own.price)
        return statistics.median(prices) if prices else None

    def _grade(self, n: int, price: float, expected: float, sigmas: float) -> Grade | None:
        rule = self.rule
        if n < rule.min_comparables or price < expected * (1 + rule.min_excess):
            return None
        if sigmas >= rule.threshold:
            return "likely"
        if sigmas >= rule.possible_threshold:
            return "possible"
        return None
