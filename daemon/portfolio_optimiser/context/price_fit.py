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
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:  # reference.py builds on this module; typing only
    from .reference import ReferenceIndex

__all__ = ["Grade", "LineReference", "PriceFit", "ProjectReferences", "weighted_price"]

Grade = Literal["likely", "possible"]
ClassKey = tuple[str, str]

MAD_TO_SIGMA: Final = 1.4826
"""Scales a median absolute deviation to σ for normal data (Iglewicz and Hoaglin)."""
MIN_LINES_FOR_LEVEL: Final = 5
"""Among fewer lines, two overpriced ones would move even a median-based level toward them."""
TINY: Final = 1e-9
SLOPE_LINES: Final = 6
"""A slope (how much more the volatile codes lean) needs this many lines of distinct spreads."""
MAX_SLOPE_LINES: Final = 60
"""Theil-Sen is quadratic: a project's slope is taken from this many of its lines at most."""
ROUNDS: Final = 3


@dataclass(frozen=True)
class LineReference:
    """One priced line measured against the portfolio: the snapshot a run is identified against,
    checked against and explained by."""

    code: str
    unit: str
    category: str | None
    """The category its comparables share, or None when taken across categories."""
    n: int
    """Other projects pricing this code in this unit (in ``category`` when one is named)."""
    median_nok: float
    """The comparables' median unit price, as written."""
    expected_nok: float
    """The unit price expected in this project: the class's centre at this project's level."""
    level: float
    """This project's price level on this code (1.12: its prices run 12 % above the portfolio's)."""
    spread: float
    """The robust spread of a price around its expectation in this class (log, about σ)."""
    sigmas: float
    """How many spreads the line's unit price lies above its expected price."""
    grade: Grade | None
    compared_as: str = ""
    """What the line was compared as: its NS 3420 code, or its account (then ``code``)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LineReference:
        return cls(**data)


@dataclass(frozen=True)
class ProjectReferences:
    """Every priced line of one project measured against the portfolio, at one moment."""

    project_id: str = ""
    lines: tuple[LineReference, ...] = ()
    min_comparables: int = 4
    min_saving_nok: float = 0.0
    min_share: float = 0.0
    """The materiality floor the lines were judged under (the report states it)."""

    def get(self, code: str, unit: str) -> LineReference | None:
        return next((r for r in self.lines if r.code == code and r.unit == unit), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "project_id": self.project_id,
            "min_comparables": self.min_comparables,
            "min_saving_nok": self.min_saving_nok,
            "min_share": self.min_share,
            "lines": [line.to_dict() for line in self.lines],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProjectReferences:
        return cls(
            str(data.get("project_id", "")),
            tuple(LineReference.from_dict(line) for line in data.get("lines", ())),
            int(data.get("min_comparables", 4)),
            float(data.get("min_saving_nok", 0.0)),
            float(data.get("min_share", 0.0)),
        )


def _robust_spread(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    middle = statistics.median(values)
    return MAD_TO_SIGMA * statistics.median(abs(v - middle) for v in values)


def _median_without(ordered: Sequence[float], value: float) -> float | None:
    """The median of ``ordered`` (sorted) with one occurrence of ``value`` left out."""
    gone = bisect_left(ordered, value)
    n = len(ordered) - 1
    if n <= 0:
        return None

    def at(i: int) -> float:
        return ordered[i] if i < gone else ordered[i + 1]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


def weighted_price(entries: Sequence[tuple[float, float]]) -> float:
    """(quantity, unit price) entries' quantity-weighted price; one entry's own price exactly."""
    if len(entries) == 1:
        return entries[0][1]
    return math.fsum(q * p for q, p in entries) / math.fsum(q for q, _p in entries)


def _theil_sen(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of a robust line through ``points`` (x, y); slope 0 when the x are too
    few or too alike to tell one."""
    ys = [y for _x, y in points]
    distinct = {round(x, 9) for x, _y in points}
    if len(points) < SLOPE_LINES or len(distinct) < 3:
        return statistics.median(ys), 0.0
    chosen = sorted(points)
    step = max(1, math.ceil(len(chosen) / MAX_SLOPE_LINES))
    sample = chosen[::step]
    slopes = [
        (y2 - y1) / (x2 - x1)
        for i, (x1, y1) in enumerate(sample)
        for x2, y2 in sample[i + 1 :]
        if x2 - x1 > 1e-9
    ]
    slope = statistics.median(slopes) if slopes else 0.0
    return statistics.median(y - slope * x for x, y in points), slope


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
            points = [(self._loading[ln.key], ln.log_price - c) for ln, c in self._centred(lines)]
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
        return _theil_sen([(self._loading[ln.key], ln.log_price - c) for ln, c in centred])

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
                    grade=self._grade(n, price, expected, sigmas),
                    compared_as=compared_as,
                )
            )
        rule = self.rule
        return ProjectReferences(
            project_id, tuple(found), rule.min_comparables, rule.min_saving_nok, rule.min_share
        )

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

    def _grade(self, n: int, price: float, expected: float, sigmas: float) -> Grade | None:
        rule = self.rule
        if n < rule.min_comparables or price < expected * (1 + rule.min_excess):
            return None
        if sigmas >= rule.threshold:
            return "likely"
        if sigmas >= rule.possible_threshold:
            return "possible"
        return None
