"""Reference classes: every ingested project's unit prices are the benchmark for the others.

Decides, purely from the projects' IR: which lines are comparable (same cost code, same unit once
normalised: ``m2``, ``m²`` and ``kvm`` are one unit), what a line's reference is (the *other*
projects' unit prices — leave-one-out by project, so a line is never its own reference — from the
same category first when enough of them declare one), and when a line is priced well above it.

The rule is robust on purpose: a line is flagged when its unit price lies more than ``threshold``
robust deviations above the reference median (the modified z-score of Iglewicz and Hoaglin, with
the median absolute deviation scaled by 1.4826 so it estimates σ for normal data) *and* at least
``min_excess`` above the median. The median and MAD barely move when several comparables are
themselves overpriced, which "above the upper quartile" would not survive; the floor on the
deviation (``min_spread`` of the median) keeps a class of near-identical prices from flagging a
line one krone above them.

A flagged line yields the candidate "bring the unit price to the reference median", saving
(unit price − median) × quantity, rounded *down* to two significant figures: conservative (it
never claims more than the arithmetic gives), and stable, so a verdict keeps applying when the
class is rebuilt and its median moves a little. What identifies the candidate is its key, as for
every candidate: the project, the one cost code, the type ``reference_price`` and that rounded
saving. The evidence is the line's own file and ``reference:<code>@<unit>``, which the validator
resolves against the same classes and recomputes.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from typing import Final

from .models import Candidate, CostLine, Project

__all__ = [
    "MEASURE_TYPE",
    "Comparable",
    "Reference",
    "ReferenceIndex",
    "ReferenceRule",
    "check_reference",
    "normalise_unit",
    "reference_candidates",
    "reference_link",
    "reference_saving",
    "references_of",
    "two_figures_down",
]

MEASURE_TYPE: Final = "reference_price"
LINK_PREFIX: Final = "reference:"
_MAD_TO_SIGMA: Final = 1.4826
_UNITS: Final = {
    "m2": ("m2", "m²", "m^2", "kvm", "sqm", "kvadratmeter"),
    "m3": ("m3", "m³", "m^3", "kbm", "kubikkmeter"),
    "m": ("m", "lm", "meter", "løpemeter", "lopemeter"),
    "stk": ("stk", "pcs", "pc", "ea", "each", "styk", "stykk"),
    "kg": ("kg",),
    "tonn": ("t", "tonn", "tonne", "tonnes"),
    "rs": ("rs", "lump sum", "sum"),
}
_ALIASES: Final = {alias: unit for unit, aliases in _UNITS.items() for alias in aliases}


def normalise_unit(unit: str | None) -> str | None:
    """One spelling per unit: lower case, spaces and dots dropped, known aliases folded."""
    if unit is None:
        return None
    plain = " ".join(unit.strip().lower().replace(".", "").split())
    if not plain:
        return None
    return _ALIASES.get(plain, _ALIASES.get(plain.replace(" ", ""), plain))


@dataclass(frozen=True)
class ReferenceRule:
    """When a line is priced well above its reference (``[reference]`` in the configuration)."""

    min_comparables: int = 4
    threshold: float = 3.5
    min_excess: float = 0.10
    min_spread: float = 0.02


@dataclass(frozen=True)
class Comparable:
    project_id: str
    source: str
    unit_price_nok: float
    category: str | None = None


@dataclass(frozen=True)
class Reference:
    """A line's reference: the comparables it was measured against and their statistics."""

    code: str
    unit: str
    category: str | None
    """The category the comparables share, or None when they were taken across categories."""
    comparables: tuple[Comparable, ...]

    @property
    def n(self) -> int:
        return len(self.comparables)

    @property
    def median(self) -> float:
        return statistics.median(c.unit_price_nok for c in self.comparables)

    @property
    def mad(self) -> float:
        """The median absolute deviation from the median."""
        middle = self.median
        return statistics.median(abs(c.unit_price_nok - middle) for c in self.comparables)

    def spread(self, rule: ReferenceRule) -> float:
        """The robust σ, never below ``min_spread`` of the median."""
        return max(_MAD_TO_SIGMA * self.mad, rule.min_spread * abs(self.median))

    def flags(self, unit_price: float, rule: ReferenceRule) -> bool:
        if self.n < rule.min_comparables or self.median <= 0:
            return False
        excess = unit_price - self.median
        return excess >= rule.min_excess * self.median and excess > rule.threshold * self.spread(
            rule
        )


def reference_link(code: str, unit: str) -> str:
    return f"{LINK_PREFIX}{code}@{unit}"


def _priced(line: CostLine) -> tuple[str, float, float] | None:
    unit = normalise_unit(line.unit)
    if unit is None or line.quantity is None or line.unit_price_nok is None:
        return None
    if not (line.quantity > 0 and line.unit_price_nok > 0):
        return None
    return unit, float(line.quantity), float(line.unit_price_nok)


@dataclass(frozen=True)
class ReferenceIndex:
    """Every priced line of the portfolio, by (code, unit): the input of every reference."""

    classes: Mapping[tuple[str, str], tuple[Comparable, ...]] = field(default_factory=dict)
    rule: ReferenceRule = ReferenceRule()

    @classmethod
    def of(cls, projects: Iterable[Project], rule: ReferenceRule | None = None) -> ReferenceIndex:
        found: dict[tuple[str, str], list[Comparable]] = {}
        for project in sorted(projects, key=lambda p: p.id):
            for line in project.cost_lines:
                priced = _priced(line)
                if priced is None:
                    continue
                unit, _quantity, price = priced
                found.setdefault((line.code, unit), []).append(
                    Comparable(project.id, line.source, price, project.category)
                )
        return cls({key: tuple(found[key]) for key in sorted(found)}, rule or ReferenceRule())

    def reference(self, project: Project, code: str, unit: str) -> Reference:
        """Leave-one-out: the other projects' prices; the project's own category when it has
        enough of them, else every category."""
        rule = self.rule
        others = tuple(c for c in self.classes.get((code, unit), ()) if c.project_id != project.id)
        if project.category:
            same = tuple(c for c in others if c.category == project.category)
            if len(same) >= rule.min_comparables:
                return Reference(code, unit, project.category, same)
        return Reference(code, unit, None, others)

    def thin(self) -> list[tuple[str, str, int]]:
        """Classes with fewer projects than a reference needs: (code, unit, projects)."""
        return [
            (code, unit, len({c.project_id for c in comparables}))
            for (code, unit), comparables in self.classes.items()
            if len({c.project_id for c in comparables}) <= self.rule.min_comparables
        ]


def two_figures_down(value: float | Decimal) -> int:
    """Rounded down to two significant figures, in whole NOK (0 for nothing): conservative, and
    stable while its inputs move a little. Every saving the portfolio carries is rounded so."""
    exact = value if isinstance(value, Decimal) else Decimal(str(value))
    if exact <= 0:
        return 0
    step = Decimal(10) ** max(exact.adjusted() - 1, 0)
    return int((exact / step).to_integral_value(rounding=ROUND_FLOOR) * step)


def reference_saving(unit_price: float, median: float, quantity: float) -> int:
    """(unit price − median) × quantity, rounded down to two significant figures (whole NOK)."""
    excess = Decimal(str(unit_price)) - Decimal(str(median))
    return two_figures_down(excess * Decimal(str(quantity)))


def _fmt(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ")


def reference_candidates(project: Project, index: ReferenceIndex) -> list[Candidate]:
    """One candidate per line priced well above its reference, in the project's line order."""
    found: list[Candidate] = []
    for line in project.cost_lines:
        priced = _priced(line)
        if priced is None:
            continue
        unit, quantity, price = priced
        reference = index.reference(project, line.code, unit)
        rule = index.rule
        if not reference.flags(price, rule):
            continue
        saving = reference_saving(price, reference.median, quantity)
        if saving <= 0:
            continue
        among = f"{reference.category} projects" if reference.category else "projects"
        found.append(
            Candidate(
                project_id=project.id,
                affected_codes=(line.code,),
                measure_type=MEASURE_TYPE,
                claimed_saving_nok=saving,
                title=f"Bring the unit price of {line.code} to the reference median",
                rationale=(
                    f"{line.code} costs {_fmt(price)} NOK/{unit}; the median of {reference.n} other "
                    f"{among} is {_fmt(reference.median)} NOK/{unit} (robust spread "
                    f"{_fmt(reference.spread(rule))}). At the median, {_fmt(quantity)} {unit} cost "
                    f"about {_fmt(saving)} NOK less (rounded down to two significant figures)."
                ),
                evidence=tuple(e for e in (line.source, reference_link(line.code, unit)) if e),
                origin=f"reference:{line.code}@{unit}",
            )
        )
    return found


def check_reference(
    candidate: Candidate,
    project: Project,
    index: ReferenceIndex,
    link: str,
    accepted: Sequence[Candidate] = (),
) -> str | None:
    """The validator's check of a ``reference:`` link: None when it holds, else why not.

    The line must be one the rule flags, and the saving its median gives is shared by every
    accepted candidate citing the same class: one excess cannot be claimed twice."""
    code, _, unit = link.removeprefix(LINK_PREFIX).partition("@")
    line = project.line(code)
    if not unit or line is None or code not in candidate.affected_codes:
        return f"evidence link {link!r} names no reference class of an affected line"
    priced = _priced(line)
    if priced is None or priced[0] != unit:
        return f"evidence link {link!r}: line {code} has no quantity and unit price in {unit}"
    reference = index.reference(project, code, unit)
    if reference.n < index.rule.min_comparables:
        return (
            f"evidence link {link!r}: {reference.n} comparable(s) in the portfolio, "
            f"fewer than the {index.rule.min_comparables} a reference needs"
        )
    _unit, quantity, price = priced
    if not reference.flags(price, index.rule):
        return (
            f"evidence link {link!r}: {code} at {_fmt(price)} NOK/{unit} is not priced well above "
            f"its reference median {_fmt(reference.median)}"
        )
    expected = reference_saving(price, reference.median, quantity)
    taken = sum(float(c.claimed_saving_nok) for c in accepted if link in c.evidence)
    if float(candidate.claimed_saving_nok) + taken > expected + 0.5:
        already = f" ({_fmt(taken)} NOK of it already claimed)" if taken else ""
        return (
            f"evidence link {link!r}: at the reference median {_fmt(reference.median)} NOK/{unit} "
            f"the saving is {_fmt(expected)} NOK{already}, less than the "
            f"{candidate.saving_literal} claimed"
        )
    return None


def references_of(
    candidate: Candidate, project: Project, index: ReferenceIndex
) -> Sequence[Reference]:
    """The references a candidate's ``reference:`` links name (for the report)."""
    found = []
    for link in candidate.evidence:
        if link.startswith(LINK_PREFIX):
            code, _, unit = link.removeprefix(LINK_PREFIX).partition("@")
            reference = index.reference(project, code, unit)
            if reference.n:
                found.append(reference)
    return found
