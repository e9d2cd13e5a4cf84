"""The portfolio's price fit taken the plain way, one line at a time: the oracle the fit over
arrays (``context/fit_arrays.py``) is held to, figure for figure. Not the product's: it is the
fit as it was written before the arrays, kept to define what they must give."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from portfolio_optimiser.context.fit_arrays import MAD_TO_SIGMA, MIN_LINES_FOR_LEVEL, class_rank
from portfolio_optimiser.context.fit_arrays import median_without as _median_without
from portfolio_optimiser.context.fit_arrays import theil_sen_points as _theil_sen
from portfolio_optimiser.context.fit_portfolio import ROUNDS, TINY, ClassKey
from portfolio_optimiser.context.line_references import LineReference, ProjectReferences
from portfolio_optimiser.context.price_fit import grade, weighted_price
from portfolio_optimiser.context.reference import ReferenceIndex


def _robust_spread(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    middle = statistics.median(values)
    return MAD_TO_SIGMA * statistics.median(abs(v - middle) for v in values)


TRUNCATE_AT: Final = 3.0
TRUNCATED_TO_SIGMA: Final = 1.0136
"""1 / sqrt(E[Z² | |Z| < 3]): the root mean square of normal residuals within 3σ, scaled to σ."""


class _Spread:
    """A class's spread: the root mean square of its residuals within ``TRUNCATE_AT`` robust
    deviations (the MAD's). As steady as a standard deviation (the MAD alone swings ±15 % at 60
    comparables, and every low swing flags fair lines) and as blind to overpriced lines as the
    MAD: a line far out is left out, not counted as noise."""

    def __init__(self, residuals: Sequence[float]) -> None:
        self.n = len(residuals)
        self._abs = sorted(abs(r) for r in residuals)
        mad = MAD_TO_SIGMA * statistics.median(self._abs) if self._abs else 0.0
        self._cut = TRUNCATE_AT * mad
        kept = [r * r for r in residuals if abs(r) <= self._cut]
        self._kept, self._squares = len(kept), math.fsum(kept)

    def sigma(self, without: float | None = None) -> float:
        """The spread, leaving out one residual when ``without`` is given."""
        kept, squares = self._kept, self._squares
        if without is not None and abs(without) <= self._cut:
            kept, squares = kept - 1, squares - without * without
        if kept >= 3:
            return TRUNCATED_TO_SIGMA * math.sqrt(max(squares, 0.0) / kept)
        # Too few within the cut for a root mean square: the MAD's own estimate.
        if without is None:
            middle = statistics.median(self._abs) if self._abs else None
        else:
            middle = _median_without(self._abs, abs(without))
        return MAD_TO_SIGMA * middle if middle is not None else 0.0


@dataclass(frozen=True)
class _Line:
    project_id: str
    category: str | None
    key: ClassKey
    log_price: float
    price: float


class PriceFit:
    """The fitted portfolio: build once per published index (``ReferenceIndex.fit``)."""

    def __init__(self, index: ReferenceIndex) -> None:
        rule = index.rule
        self.rule = rule
        self._lines: dict[str, list[_Line]] = {}
        by_class: dict[ClassKey, list[_Line]] = {}
        for key, comparables in index.classes.items():
            for c in comparables:
                line = _Line(
                    c.project_id, c.category, key, math.log(c.unit_price_nok), c.unit_price_nok
                )
                by_class.setdefault(key, []).append(line)
                self._lines.setdefault(c.project_id, []).append(line)
        self._classes = by_class
        self._prices: dict[tuple[ClassKey, str | None], list[float]] = {}
        self._loading = {
            key: max(_robust_spread([ln.log_price for ln in lines]), rule.min_spread)
            for key, lines in by_class.items()
        }
        self._level: dict[str, tuple[float, float]] = {}
        for _round in range(ROUNDS):
            self._fit_centres()
            self._fit_levels()
        self._fit_centres()
        self._fit_spreads()

    # -- fitting --------------------------------------------------------------------------------

    def _shift(self, line: _Line) -> float:
        a, b = self._level.get(line.project_id, (0.0, 0.0))
        return a + b * self._loading[line.key]

    def _fit_centres(self) -> None:
        """Each class's prices at the standard level, sorted: across categories and by category."""
        self._adjusted: dict[tuple[ClassKey, str | None], list[float]] = {}
        for key, lines in self._classes.items():
            for line in lines:
                value = line.log_price - self._shift(line)
                self._adjusted.setdefault((key, None), []).append(value)
                if line.category:
                    self._adjusted.setdefault((key, line.category), []).append(value)
        for values in self._adjusted.values():
            values.sort()

    def _centre_key(self, key: ClassKey, category: str | None, *, others: int) -> str | None:
        """The category whose comparables centre the class (None: across categories)."""
        if (
            category
            and len(self._adjusted.get((key, category), ())) - others >= self.rule.min_comparables
        ):
            return category
        return None

    def _centre(self, line: _Line, *, leave_out: bool) -> tuple[float | None, str | None, int]:
        among = self._centre_key(line.key, line.category, others=1 if leave_out else 0)
        values = self._adjusted[(line.key, among)]
        if leave_out:
            return (
                _median_without(values, line.log_price - self._shift(line)),
                among,
                len(values) - 1,
            )
        return statistics.median(values), among, len(values)

    def _fit_levels(self) -> None:
        for project_id, lines in self._lines.items():
            points = [
                (class_rank(ln.key), self._loading[ln.key], ln.log_price - c)
                for ln, c in self._centred(lines)
            ]
            if len(points) >= MIN_LINES_FOR_LEVEL:
                self._level[project_id] = _theil_sen(points)

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
        return _theil_sen(
            [(class_rank(ln.key), self._loading[ln.key], ln.log_price - c) for ln, c in centred]
        )

    def _fit_spreads(self) -> None:
        """Each class's spread (``_Spread``), and the spread pooled over the classes."""
        self._judged: dict[str, tuple[float, float]] = {}
        residuals: dict[ClassKey, list[float]] = {}
        for lines in self._lines.values():
            indexed = {ln.key: ln for ln in lines}
            for line in lines:
                residual = self._residual(line, lines, indexed)
                if residual is not None:
                    residuals.setdefault(line.key, []).append(residual)
        self._spreads = {key: _Spread(residuals.get(key, [])) for key in self._classes}
        spreads = [
            spread.sigma()
            for spread in self._spreads.values()
            if spread.n > self.rule.min_comparables
        ]
        self._pooled = max(statistics.median(spreads) if spreads else 0.0, self.rule.min_spread)

    def _residual(
        self, line: _Line, lines: Sequence[_Line], indexed: dict[ClassKey, _Line]
    ) -> float | None:
        """How far an indexed line lies from what it is judged against — a centre taken without
        it, at the level it is judged at — so the spread is calibrated to what an assessment
        measures (in-sample residuals of a median run about 10 % small at 15 comparables, and
        the tail they flag is three times the normal one). None in a class of one."""
        centre, _among, n = self._centre(line, leave_out=True)
        if centre is None or n <= 0:
            return None
        a, b = self._level_cached(line.project_id, lines, indexed)
        return line.log_price - a - b * self._loading[line.key] - centre

    def _level_cached(
        self, project_id: str, lines: Sequence[_Line], indexed: dict[ClassKey, _Line]
    ) -> tuple[float, float]:
        cached = self._judged.get(project_id)
        if cached is None:
            cached = self._judged[project_id] = self._judging_level(lines, indexed)
        return cached

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
            entry for entry in priced if (entry[1], entry[2]) in self._classes and entry[3] > 0
        ]
        classes: dict[ClassKey, list[tuple[float, float]]] = {}
        for _code, compared_as, unit, price, quantity in lines:
            classes.setdefault((compared_as, unit), []).append((quantity, price))
        mine = [
            _Line(project_id, category, key, math.log(p), p)
            for key, entries in classes.items()
            if (p := weighted_price(entries)) > 0
        ]
        own = self._lines.get(project_id, [])
        indexed = {ln.key: ln for ln in own}
        same = sorted((ln.key, round(ln.price, 6)) for ln in own) == sorted(
            (m.key, round(m.price, 6)) for m in mine
        )
        a, b = (
            self._level_cached(project_id, own, indexed)
            if same
            else self._judging_level(mine, indexed)
        )
        found = []
        for code, compared_as, unit, price, _quantity in lines:
            key = (compared_as, unit)
            old = indexed.get(key)
            if old is not None:
                centre, among, n = self._centre(old, leave_out=True)
            else:
                probe = _Line(project_id, category, key, math.log(price), price)
                centre, among, n = self._centre(probe, leave_out=False)
            if centre is None or n <= 0:
                continue
            residual = self._residual(old, own, indexed) if old is not None else None
            spread = self._spread(residual, key)
            median = self._median_price(key, among, old)
            shift = a + b * self._loading[key]
            expected = math.exp(centre + shift)
            sigmas = (math.log(price) - centre - shift) / spread
            found.append(
                LineReference(
                    code=code,
                    unit=unit,
                    category=among,
                    n=n,
                    median_nok=round(median, 2) if median is not None else 0.0,
                    expected_nok=round(expected, 2),
                    level=round(math.exp(shift), 4),
                    spread=round(spread, 4),
                    sigmas=round(sigmas, 2),
                    grade=grade(self.rule, n, price, expected, sigmas),
                    compared_as=compared_as,
                    below=self._below(n, price, expected, sigmas),
                    p10_nok=self._percentile(key, among, old, 0.1),
                    p90_nok=self._percentile(key, among, old, 0.9),
                )
            )
        rule = self.rule
        return ProjectReferences(
            project_id, tuple(found), rule.min_comparables, rule.min_saving_nok, rule.min_share
        )

    def _below(self, n: int, price: float, expected: float, sigmas: float) -> str | None:
        """Priced far below what is expected: as far below as ``grade`` asks above."""
        rule = self.rule
        if n < rule.min_comparables or price > expected * (1 - rule.min_excess):
            return None
        return (
            "likely"
            if sigmas <= -rule.threshold
            else "possible"
            if sigmas <= -rule.possible_threshold
            else None
        )

    def _percentile(self, key: ClassKey, among: str | None, own: _Line | None, q: float) -> float:
        """A percentile of the comparables' prices as written, without the project's own line,
        by numpy's own quantile."""
        prices = [ln.price for ln in self._classes[key] if among is None or ln.category == among]
        if own is not None and (among is None or own.category == among):
            prices.remove(own.price)
        return round(float(np.quantile(prices, q)), 2) if prices else 0.0

    def _median_price(self, key: ClassKey, among: str | None, own: _Line | None) -> float | None:
        """The comparables' median unit price as written (in ``among`` when named), without the
        project's own line: from the class's prices sorted once, not sorted again per line (a
        portfolio of thousands would sort every class once per project)."""
        prices = self._prices.get((key, among))
        if prices is None:
            prices = self._prices[(key, among)] = sorted(
                ln.price for ln in self._classes[key] if among is None or ln.category == among
            )
        if own is not None and (among is None or own.category == among):
            return _median_without(prices, own.price)
        return statistics.median(prices) if prices else None
