"""Reference classes: every ingested project's unit prices are the benchmark for the others.

Decides, purely from the projects' IR: which lines are comparable (same cost code, same unit once
normalised: ``m2``, ``m²`` and ``kvm`` are one unit), which of a project's lines are priced above
what the portfolio expects of them (``price_fit``: log prices, the project's own price level and
category divided out, leave-one-out, a class's spread shrunk toward the pooled one when thin),
how sure that is, and whether it is worth an expert's time.

The answer is graded rather than one threshold: a line ``threshold`` robust deviations or more
above its expected price is *likely* overpriced, one ``possible_threshold`` or more *possible*
(a +25 % line on a quiet code is surfaced, not dropped); either must also lie ``min_excess``
above it, and have ``min_comparables`` other projects to be measured against. A line whose
saving would be under ``min_saving_nok`` or under ``min_share`` of its project is not material
and is never flagged.

A flagged line yields the candidate "bring the unit price to the price expected here", saving
(unit price − expected) × quantity, rounded *down* to two significant figures (conservative: it
never claims more than the arithmetic gives). Its id is its project, its code, its unit and the
kind ``reference_price`` — never a figure: the saving and the grade are fields that move while the
portfolio grows, and a verdict keeps applying. The evidence is the line's own file and
``reference:<code>@<unit>``, which the validator checks against the same snapshot of the fit.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from functools import cached_property
from typing import Final, NamedTuple

from .fit_lines import ClassColumns
from .line_references import LineReference, ProjectReferences
from .models import REFERENCE_PRICE, Candidate, CostLine, Project
from .price_fit import PriceFit, weighted_price
from .vocabulary import normalise_unit

__all__ = [
    "MEASURE_TYPE",
    "Comparable",
    "LineReference",
    "Post",
    "Posts",
    "ProjectPrices",
    "ProjectReferences",
    "ReferenceIndex",
    "ReferenceRule",
    "check_reference",
    "material",
    "reference_candidates",
    "reference_link",
    "reference_saving",
    "references_of",
    "two_figures_down",
]

MEASURE_TYPE: Final = REFERENCE_PRICE
LINK_PREFIX: Final = "reference:"


@dataclass(frozen=True)
class ReferenceRule:
    """When a line is priced above its reference (``[reference]`` in the configuration)."""

    min_comparables: int = 4
    threshold: float = 2.65
    """Robust deviations above the expected price for *likely*."""
    possible_threshold: float = 2.0
    """Robust deviations above the expected price for *possible*."""
    min_excess: float = 0.10
    min_spread: float = 0.02
    """A spread (log) is never taken below this: near-identical prices flag nothing by a krone."""
    shrink_comparables: int = 4
    """A class's own spread counts as many projects as it has; the pooled one as this many."""
    min_saving_nok: float = 50_000
    min_share: float = 0.001
    """A saving under this share of the project's cost is not material."""


class Comparable(NamedTuple):
    """One project's price in a class. A tuple: a portfolio of ten thousand projects makes
    hundreds of thousands of them at a start."""

    project_id: str
    source: str
    unit_price_nok: float
    category: str | None = None


def reference_link(code: str, unit: str) -> str:
    return f"{LINK_PREFIX}{code}@{unit}"


def _classes_of(project: Project) -> dict[tuple[str, str], list[tuple[float, float, str]]]:
    """The project's priced lines by what they are compared as and unit: (quantity, unit price,
    source) each."""
    found: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
    for line in project.cost_lines:
        priced, compared_as = _priced(line), line.compared_as
        if priced is not None and compared_as is not None:
            unit, quantity, price = priced
            found.setdefault((compared_as, unit), []).append((quantity, price, line.source))
    return found


def _priced(line: CostLine) -> tuple[str, float, float] | None:
    unit = normalise_unit(line.unit)
    if unit is None or line.quantity is None or line.unit_price_nok is None:
        return None
    if not (line.quantity > 0 and line.unit_price_nok > 0):
        return None
    return unit, float(line.quantity), float(line.unit_price_nok)


Post = tuple[str, str, str, float, float]
"""A priced line as it is measured: (code, compared as, unit, unit price, quantity); compared as
"" for a post no class compares (no NS 3420 code)."""


def _posts(project: Project) -> tuple[Post, ...]:
    """The project's priced lines, in order."""
    return tuple(
        (line.code, line.compared_as or "", found[0], found[2], found[1])
        for line in project.cost_lines
        if (found := _priced(line))
    )


@dataclass(frozen=True)
class Posts:
    """A project's priced posts kept column by column, their words shared: a portfolio of ten
    thousand projects keeps hundreds of thousands of them in memory (as rows, about 180 MB; so,
    about 30). Iterates as its rows (``Post`` each)."""

    codes: tuple[str, ...] = ()
    compared: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    prices: array[float] = field(default_factory=lambda: array("d"))
    quantities: array[float] = field(default_factory=lambda: array("d"))

    @classmethod
    def of(cls, rows: Iterable[Post]) -> Posts:
        found = list(rows)
        return cls.columns(*zip(*found, strict=True)) if found else cls()

    @classmethod
    def columns(
        cls,
        codes: Iterable[str],
        compared: Iterable[str],
        units: Iterable[str],
        prices: Iterable[float],
        quantities: Iterable[float],
    ) -> Posts:
        """From its columns, each taken by a map over it; a word that is not a string or a
        figure that is not a number raises ``TypeError`` or ``ValueError``."""
        return cls(
            tuple(map(sys.intern, codes)),
            tuple(map(sys.intern, compared)),
            tuple(map(sys.intern, units)),
            array("d", map(float, prices)),
            array("d", map(float, quantities)),
        )

    def __iter__(self) -> Iterator[Post]:
        return zip(self.codes, self.compared, self.units, self.prices, self.quantities, strict=True)

    def __len__(self) -> int:
        return len(self.codes)


@dataclass(frozen=True)
class ProjectPrices:
    """What the reference classes take of a project: its id, its category, and one price per
    class it prices — (compared as, unit, unit price, the first line's source) each; and what its
    reference candidates are found from without its IR: its priced posts, and its size (what a
    saving is material against)."""

    project_id: str
    category: str | None
    classes: tuple[tuple[str, str, float, str], ...]
    posts: Posts = field(default_factory=Posts)
    size: float = 0.0

    @classmethod
    def of(cls, project: Project) -> ProjectPrices:
        # A project prices a class once: several posts of one description count as one
        # comparable, at their quantity-weighted unit price. A bundle priced from the
        # portfolio itself prices none: its prices would vouch for themselves.
        if project.derived_from:
            return cls(project.id, project.category, (), Posts(), _size(project))
        return cls(
            project.id,
            project.category,
            tuple(
                (compared_as, unit, weighted_price([(q, p) for q, p, _s in lines]), lines[0][2])
                for (compared_as, unit), lines in _classes_of(project).items()
            ),
            Posts.of(_posts(project)),
            _size(project),
        )


@dataclass(frozen=True)
class ReferenceIndex:
    """Every project's priced lines, by what they are compared as (an NS 3420 code, else an
    account) and unit, one comparable per project: the input of every reference."""

    classes: Mapping[tuple[str, str], tuple[Comparable, ...]] = field(default_factory=dict)
    rule: ReferenceRule = ReferenceRule()
    columns: ClassColumns | None = field(default=None, compare=False, repr=False)
    """The classes' comparables as arrays, in the same order, where their keeper holds them
    (``ReferenceClasses``); else the fit takes them apart itself."""
    version: str = field(default="", compare=False)
    """The version of the reference fit this index is (``reference_version.version_id``); ""
    for an index no keeper named (a test's, or pages from before versions)."""
    fitted_by: Callable[[ReferenceIndex], PriceFit] | None = field(
        default=None, compare=False, repr=False
    )
    """Where its fit is made, when not here at its first use: given the index, its fit (the
    daemon's process of its own for a large portfolio, begun as the index was published)."""

    @classmethod
    def of(cls, projects: Iterable[Project], rule: ReferenceRule | None = None) -> ReferenceIndex:
        """The index of these projects, built as the daemon keeps it (:class:`ReferenceClasses`)."""
        from .reference_classes import ReferenceClasses  # which builds on this module

        classes = ReferenceClasses(rule or ReferenceRule())
        classes.update({f"{i:09d}": ProjectPrices.of(p) for i, p in enumerate(projects)})
        return classes.index()

    @cached_property
    def fit(self) -> PriceFit:
        """The fitted portfolio, built once per index (an index never changes)."""
        return PriceFit(self) if self.fitted_by is None else self.fitted_by(self)

    def compact(self) -> ReferenceIndex:
        """The index as its fit takes it: the classes' keys in order, the rule, the columns and
        the version, not the comparables — what a process of its own is sent to fit (at ten
        thousand projects 20 MB of arrays, where the comparables are 600 000 objects)."""
        if self.columns is None:
            raise ValueError("an index without its columns is fitted from its comparables")
        return ReferenceIndex(
            dict.fromkeys(self.classes, ()), self.rule, self.columns, self.version
        )

    def assess(self, project: Project) -> ProjectReferences:
        """Every priced line of ``project`` against the others, every unpriced one quoted, and
        why a post was not measured: the snapshot a run uses."""
        posts = [
            (line.code, line.compared_as or "", unit, float(line.unit_price_nok or 0))
            for line in project.cost_lines
            if line.quantity is not None
            and line.quantity > 0
            and (unit := normalise_unit(line.unit)) is not None
        ]
        found = self.assess_prices(ProjectPrices.of(project))
        return self.fit.completed(found, project.category, posts)

    def assess_prices(self, prices: ProjectPrices) -> ProjectReferences:
        """The same, from what the compact index keeps of the project."""
        compared = [post for post in prices.posts if post[1]]
        return self.fit.assess(prices.project_id, prices.category, compared)

    def thin(self) -> list[tuple[str, str, int]]:
        """Classes with fewer projects than a reference needs: (code, unit, projects)."""
        found = []
        for (code, unit), comparables in self.classes.items():
            projects: set[str] = set()
            for c in comparables:  # counted only as far as a reference needs
                projects.add(c.project_id)
                if len(projects) > self.rule.min_comparables:
                    break
            else:
                found.append((code, unit, len(projects)))
        return found


def two_figures_down(value: float | Decimal) -> int:
    """Rounded down to two significant figures, in whole NOK (0 for nothing): conservative, and
    stable while its inputs move a little. Every saving the portfolio carries is rounded so."""
    exact = value if isinstance(value, Decimal) else Decimal(str(value))
    if exact <= 0:
        return 0
    step = Decimal(10) ** max(exact.adjusted() - 1, 0)
    return int((exact / step).to_integral_value(rounding=ROUND_FLOOR) * step)


def reference_saving(unit_price: float, expected: float, quantity: float) -> int:
    """(unit price − the price expected) × quantity, rounded down to two significant figures
    (whole NOK)."""
    excess = Decimal(str(unit_price)) - Decimal(str(expected))
    return two_figures_down(excess * Decimal(str(quantity)))


def _fmt(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ")


def _size(project: Project) -> float:
    return float(project.base_estimate_nok or project.cost_total_nok)


def material(saving: int, size: float, references: ProjectReferences) -> bool:
    """Whether a saving is worth an expert's time in a project of this size."""
    return saving >= references.min_saving_nok and saving >= references.min_share * size


def _why(line: CostLine, ref: LineReference, unit: str, quantity: float, saving: int) -> str:
    among = f"{ref.category} projects" if ref.category else "projects"
    if ref.compared_as and ref.compared_as != line.code:
        among += f" pricing NS 3420 {ref.compared_as}"
    level = (
        f" This project's prices run {ref.level - 1:+.0%} on the portfolio's at this code (its "
        "region and price level, not a saving)."
        if abs(ref.level - 1) >= 0.005
        else ""
    )
    return (
        f"{line.code} costs {_fmt(float(line.unit_price_nok or 0))} NOK/{unit}; the median of "
        f"{ref.n} other {among} is {_fmt(ref.median_nok)} NOK/{unit}.{level} The price expected "
        f"here is {_fmt(ref.expected_nok)} NOK/{unit}, and this line lies {ref.sigmas:.1f} robust "
        f"deviations above it ({ref.grade}). At {_fmt(ref.expected_nok)} NOK/{unit}, "
        f"{_fmt(quantity)} {unit} cost about {_fmt(saving)} NOK less (rounded down to two "
        "significant figures)."
    )


def reference_candidates(project: Project, references: ProjectReferences) -> list[Candidate]:
    """One candidate per line priced above what the portfolio expects here, material and graded,
    in the project's line order."""
    found: list[Candidate] = []
    for line in project.cost_lines:
        priced = _priced(line)
        if priced is None:
            continue
        unit, quantity, price = priced
        ref = references.get(line.code, unit)
        if ref is None or ref.grade is None:
            continue
        saving = reference_saving(price, ref.expected_nok, quantity)
        if saving <= 0 or not material(saving, _size(project), references):
            continue
        found.append(
            Candidate(
                project_id=project.id,
                affected_codes=(line.code,),
                measure_type=MEASURE_TYPE,
                claimed_saving_nok=saving,
                unit=unit,
                grade=ref.grade,
                title=f"Bring the unit price of {line.code} to the price expected here",
                rationale=_why(line, ref, unit, quantity, saving),
                evidence=tuple(e for e in (line.source, reference_link(line.code, unit)) if e),
                origin=f"reference:{line.code}@{unit}",
            )
        )
    return found


def check_reference(
    candidate: Candidate,
    project: Project,
    references: ProjectReferences,
    link: str,
    accepted: Sequence[Candidate] = (),
) -> str | None:
    """The validator's check of a ``reference:`` link: None when it holds, else why not.

    The line must be one the fit grades, and the saving its expected price gives is shared by
    every accepted candidate citing the same class: one excess cannot be claimed twice."""
    code, _, unit = link.removeprefix(LINK_PREFIX).partition("@")
    line = project.line(code)
    if not unit or line is None or code not in candidate.affected_codes:
        return f"evidence link {link!r} names no reference class of an affected line"
    priced = _priced(line)
    if priced is None or priced[0] != unit:
        return f"evidence link {link!r}: line {code} has no quantity and unit price in {unit}"
    ref = references.get(code, unit)
    if ref is None or ref.n < references.min_comparables:
        n = 0 if ref is None else ref.n
        return (
            f"evidence link {link!r}: {n} comparable(s) in the portfolio, "
            f"fewer than the {references.min_comparables} a reference needs"
        )
    _unit, quantity, price = priced
    if ref.grade is None:
        return (
            f"evidence link {link!r}: {code} at {_fmt(price)} NOK/{unit} is not priced above "
            f"the {_fmt(ref.expected_nok)} expected here by enough to tell"
        )
    expected = reference_saving(price, ref.expected_nok, quantity)
    taken = sum(float(c.claimed_saving_nok) for c in accepted if link in c.evidence)
    if float(candidate.claimed_saving_nok) + taken > expected + 0.5:
        already = f" ({_fmt(taken)} NOK of it already claimed)" if taken else ""
        return (
            f"evidence link {link!r}: at the expected {_fmt(ref.expected_nok)} NOK/{unit} "
            f"the saving is {_fmt(expected)} NOK{already}, less than the "
            f"{candidate.saving_literal} claimed"
        )
    return None


def references_of(candidate: Candidate, references: ProjectReferences) -> list[LineReference]:
    """The references a candidate's ``reference:`` links name (for the report)."""
    found = []
    for link in candidate.evidence:
        if link.startswith(LINK_PREFIX):
            code, _, unit = link.removeprefix(LINK_PREFIX).partition("@")
            ref = references.get(code, unit)
            if ref is not None:
                found.append(ref)
    return found
