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

import dataclasses
import hashlib
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .fit_arrays import (
    MIN_LINES_FOR_LEVEL,
    Entries,
    class_rank,
    median_without,
    quantile_without,
    theil_sen_points,
)
from .fit_portfolio import ClassKey, FitLine, PortfolioFit
from .line_references import Grade, LineReference, ProjectReferences

if TYPE_CHECKING:  # reference.py builds on this module; typing only
    from .reference import ReferenceIndex, ReferenceRule

__all__ = ["PriceFit", "grade", "grade_below", "weighted_price"]


def weighted_price(entries: Sequence[tuple[float, float]]) -> float:
    """(quantity, unit price) entries' quantity-weighted price; one entry's own price exactly."""
    if len(entries) == 1:
        return entries[0][1]
    return math.fsum(q * p for q, p in entries) / math.fsum(q for q, _p in entries)


class PriceFit:
    """The fitted portfolio (``PortfolioFit``: every comparable fitted at once, over arrays), and
    a project's lines measured against it one project at a time (``assess``). Build once per
    published index (``ReferenceIndex.fit``)."""

    def __init__(self, index: ReferenceIndex) -> None:
        self.rule = index.rule
        self.portfolio_version = index.version
        self._fit = PortfolioFit(index)
        self._codes: frozenset[str] | None = None

    def entries(self) -> Entries:
        """Every index entry's figures as arrays, to measure many projects' posts at once."""
        return self._fit.entries()

    def _centre_key(self, key: ClassKey, category: str | None, *, others: int) -> str | None:
        """The category whose comparables centre the class (None: across categories)."""
        if category and len(self._fit.values(key, category)) - others >= self.rule.min_comparables:
            return category
        return None

    def _centre(self, line: FitLine, *, leave_out: bool) -> tuple[float | None, str | None, int]:
        among = self._centre_key(line.key, line.category, others=1 if leave_out else 0)
        values = self._fit.values(line.key, among)
        if leave_out:
            return (
                median_without(values, line.log_price - self._fit.shift(line)),
                among,
                len(values) - 1,
            )
        return statistics.median(values), among, len(values)

    def _centred(
        self, lines: Sequence[FitLine], indexed: dict[ClassKey, FitLine] | None = None
    ) -> list[tuple[FitLine, float]]:
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
        self, lines: Sequence[FitLine], indexed: dict[ClassKey, FitLine]
    ) -> tuple[float, float]:
        """The level a project's lines are judged at: against centres without the project."""
        centred = self._centred(lines, indexed)
        if len(centred) < MIN_LINES_FOR_LEVEL:
            return 0.0, 0.0
        return theil_sen_points(
            [(class_rank(ln.key), self._fit.loading[ln.key], ln.log_price - c) for ln, c in centred]
        )

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
            entry
            for entry in priced
            if (entry[1], entry[2]) in self._fit.key_index and entry[3] > 0
        ]
        classes: dict[ClassKey, list[tuple[float, float]]] = {}
        for _code, compared_as, unit, price, quantity in lines:
            classes.setdefault((compared_as, unit), []).append((quantity, price))
        mine = [
            FitLine(project_id, category, key, math.log(p), p)
            for key, entries in classes.items()
            if (p := weighted_price(entries)) > 0
        ]
        own = self._fit.indexed(project_id)
        indexed = {ln.key: ln for ln in own}
        same = sorted((ln.key, round(ln.price, 6)) for ln in own) == sorted(
            (m.key, round(m.price, 6)) for m in mine
        )
        a, b = self._fit.judged(project_id) if same else self._judging_level(mine, indexed)
        found = []
        for code, compared_as, unit, price, _quantity in lines:
            key = (compared_as, unit)
            old = indexed.get(key)
            line = old or FitLine(project_id, category, key, math.log(price), price)
            reference = self._reference(code, unit, price, line, old is not None, (a, b))
            if reference is not None:
                found.append(reference)
        return self.references(project_id, tuple(found))

    def completed(
        self,
        found: ProjectReferences,
        category: str | None,
        posts: Iterable[tuple[str, str, str, float]],
    ) -> ProjectReferences:
        """``found`` (what ``assess`` measured) with what it leaves out of a project's posts
        with a quantity, each (code, compared as, unit, unit price: 0 for none): an unpriced
        post's quote (``quote``), the reason a post has no reference, and the digest of the
        classes the figures came from."""
        have = {(r.code, r.unit) for r in found.lines}
        quotes: list[LineReference] = []
        unmatched: list[tuple[str, str]] = []
        for code, compared_as, unit, price in posts:
            if not compared_as:
                unmatched.append((code, "no-code"))
            elif (code, unit) in have:
                continue
            elif price <= 0 and (quote := self.quote(code, compared_as, unit, category)):
                quotes.append(quote)
                have.add((code, unit))
            else:
                unmatched.append((code, self.why_unmatched(compared_as, unit)))
        lines = found.lines + tuple(quotes)
        return dataclasses.replace(
            found,
            lines=lines,
            unmatched=tuple(unmatched),
            version=self.digest((r.compared_as or r.code, r.unit) for r in lines),
        )

    def references(self, project_id: str, lines: tuple[LineReference, ...]) -> ProjectReferences:
        rule = self.rule
        return ProjectReferences(
            project_id,
            lines,
            rule.min_comparables,
            rule.min_saving_nok,
            rule.min_share,
            portfolio_version=self.portfolio_version,
        )

    def indexed_reference(
        self, entry: int, code: str, unit: str, price: float
    ) -> LineReference | None:
        """A post of an indexed project whose lines in the index are its own, measured as
        ``assess`` measures it: against its class's index ``entry``, at the project's level."""
        old = self._fit.line(entry)
        return self._reference(code, unit, price, old, True, self._fit.judged(old.project_id))

    def _reference(
        self,
        code: str,
        unit: str,
        price: float,
        line: FitLine,
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
        residual = self._fit.residual(old) if old is not None else None
        spread = self._fit.spread(residual, key)
        p10, median, p90 = self._percentiles(key, among, old)
        shift = level[0] + level[1] * self._fit.loading[key]
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
            grade=grade(self.rule, n, price, expected, sigmas),
            compared_as=key[0],
            below=grade_below(self.rule, n, price, expected, sigmas),
            p10_nok=round(p10, 2) if p10 is not None else 0.0,
            p90_nok=round(p90, 2) if p90 is not None else 0.0,
        )

    def _percentiles(
        self, key: ClassKey, among: str | None, own: FitLine | None
    ) -> tuple[float | None, float | None, float | None]:
        """The comparables' P10, median and P90 unit prices as written (in ``among`` when
        named), without the project's own line."""
        prices = self._fit.prices(key, among)
        mine = own.price if own is not None and (among is None or own.category == among) else None
        median = (
            median_without(prices, mine)
            if mine is not None
            else (statistics.median(prices) if prices else None)
        )
        return quantile_without(prices, mine, 0.1), median, quantile_without(prices, mine, 0.9)

    def quote(
        self, code: str, compared_as: str, unit: str, category: str | None
    ) -> LineReference | None:
        """What the portfolio has paid for a post it has no price for (a price request's):
        its comparables' median, P10 and P90 as written, in the project's category when that
        has enough of them; None when no project prices it in this unit."""
        key = (compared_as, unit)
        if key not in self._fit.key_index:
            return None
        among = self._centre_key(key, category, others=0)
        p10, median, p90 = self._percentiles(key, among, None)
        if median is None or p10 is None or p90 is None:
            return None
        return LineReference(
            code=code,
            unit=unit,
            category=among,
            n=len(self._fit.prices(key, among)),
            median_nok=round(median, 2),
            expected_nok=round(median, 2),
            level=1.0,
            spread=round(self._fit.spread(None, key), 4),
            sigmas=0.0,
            grade=None,
            compared_as=compared_as,
            p10_nok=round(p10, 2),
            p90_nok=round(p90, 2),
        )

    def why_unmatched(self, compared_as: str, unit: str) -> str:
        """Why a post coded ``compared_as`` in ``unit`` has no reference: ``unit`` when others
        price the code in another unit, else ``unseen``."""
        if self._codes is None:
            self._codes = frozenset(code for code, _unit in self._fit.key_index)
        return "unit" if compared_as in self._codes else "unseen"

    def digest(self, keys: Iterable[tuple[str, str]]) -> str:
        """Which state of these classes a figure came from: a digest of their comparables'
        prices, the same whatever order the projects arrived in."""
        h = hashlib.sha256()
        for key in sorted(set(keys)):
            h.update(repr((key, self._fit.prices(key, None))).encode())
        return h.hexdigest()[:12]


def grade(
    rule: ReferenceRule, n: int, price: float, expected: float, sigmas: float
) -> Grade | None:
    """A line's grade: how sure it is priced above what is expected here, if it is at all."""
    if n < rule.min_comparables or price < expected * (1 + rule.min_excess):
        return None
    if sigmas >= rule.threshold:
        return "likely"
    if sigmas >= rule.possible_threshold:
        return "possible"
    return None


def grade_below(
    rule: ReferenceRule, n: int, price: float, expected: float, sigmas: float
) -> Grade | None:
    """How sure a line is priced far *below* what is expected here (a tender's unbalanced
    bid), if it is at all: ``grade`` mirrored, on the same thresholds."""
    if n < rule.min_comparables or price > expected * (1 - rule.min_excess):
        return None
    if -sigmas >= rule.threshold:
        return "likely"
    if -sigmas >= rule.possible_threshold:
        return "possible"
    return None
