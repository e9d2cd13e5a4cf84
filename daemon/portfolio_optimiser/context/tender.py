"""A tender checked post by post against the portfolio: the building owner's first job with an
NS 3459 ``Pristilbud``.

Decides, purely from the project and its snapshot of the reference fit (``ProjectReferences``):
which posts are priced far *below* what this owner has paid for the same NS 3420 work, in the
same unit, at this tender's own price level (an unbalanced bid: a bidder prices low the posts
whose quantities it expects to shrink, high those it expects to grow), what is at stake on each
if its quantity grows, and how much of the tender could be compared at all. Posts priced far
*above* are ``reference.reference_candidates`` (savings to negotiate), found as for any estimate.

A cheap post is graded by the fit as a dear one is, mirrored (``price_fit.grade_below``): at
least ``min_comparables`` other projects, ``threshold`` (likely) or ``possible_threshold``
(possible) robust deviations *below* the price expected here, and ``min_excess`` below it. What is at stake is quantity × (expected − price),
rounded down to two significant figures, and it must be material as a saving must. The
candidate it yields claims 0 NOK (a risk is never counted as a saving: not in a run's total, the
frame, or the portfolio's); the sum at stake is its own field, which the validator recomputes
(``check_unbalanced_bid``). Its id is its project, its code, its unit and the kind, as a
reference price's is: a verdict on it keeps applying while the portfolio grows.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from .line_references import LineReference, ProjectReferences
from .models import UNBALANCED_BID, Candidate, CostLine, Project
from .reference import (
    _fmt,
    _priced,
    _size,
    material,
    reference_link,
    two_figures_down,
)

__all__ = [
    "UNCOMPARED",
    "Coverage",
    "at_stake",
    "check_unbalanced_bid",
    "coverage",
    "unbalanced_bid_candidates",
]

UNCOMPARED: Final = {
    "no-code": "no NS 3420 code",
    "unseen": "a code no other project prices",
    "unit": "a code the others price in another unit",
    "thin": "fewer comparables than a reference needs",
    "unpriced": "no price in the tender",
}
"""Why a post could not be compared, as the report says it."""


def at_stake(price: float, expected: float, quantity: float) -> int:
    """quantity × (the price expected − the price), rounded down to two significant figures."""
    gap = Decimal(str(expected)) - Decimal(str(price))
    return two_figures_down(gap * Decimal(str(quantity)))


def _why(line: CostLine, ref: LineReference, unit: str, quantity: float, stake: int) -> str:
    among = f"{ref.category} projects" if ref.category else "projects"
    if ref.compared_as and ref.compared_as != line.code:
        among += f" pricing NS 3420 {ref.compared_as}"
    return (
        f"{line.code} is bid at {_fmt(float(line.unit_price_nok or 0))} NOK/{unit}; {ref.n} other "
        f"{among} paid {_fmt(ref.p10_nok)}–{_fmt(ref.p90_nok)} NOK/{unit} (P10–P90, median "
        f"{_fmt(ref.median_nok)}). At this tender's own price level the price expected is "
        f"{_fmt(ref.expected_nok)} NOK/{unit}, and this post lies {-ref.sigmas:.1f} robust "
        f"deviations below it ({ref.below}). A bidder prices low the posts it expects to "
        f"shrink: if the quantity grows, each further {unit} costs what the work is worth, and "
        f"{_fmt(quantity)} {unit} more is about {_fmt(stake)} NOK at stake (rounded down to two "
        "significant figures). Not a saving: ask the bidder to confirm the price and the "
        "quantity."
    )


def unbalanced_bid_candidates(project: Project, references: ProjectReferences) -> list[Candidate]:
    """One risk per post of a tender priced far below what the portfolio expects here, graded
    and material, in the tender's post order. None for a bundle that is not a tender."""
    if project.document != "tender":
        return []
    found: list[Candidate] = []
    for line in project.cost_lines:
        priced = _priced(line)
        if priced is None:
            continue
        unit, quantity, price = priced
        ref = references.get(line.code, unit)
        if ref is None or ref.below is None:
            continue
        stake = at_stake(price, ref.expected_nok, quantity)
        if stake <= 0 or not material(stake, _size(project), references):
            continue
        found.append(
            Candidate(
                project_id=project.id,
                affected_codes=(line.code,),
                measure_type=UNBALANCED_BID,
                claimed_saving_nok=0,
                at_stake_nok=stake,
                unit=unit,
                grade=ref.below,
                title=f"Unbalanced bid? {line.code} is priced far below what the portfolio pays",
                rationale=_why(line, ref, unit, quantity, stake),
                evidence=tuple(e for e in (line.source, reference_link(line.code, unit)) if e),
                origin=f"reference-low:{line.code}@{unit}",
            )
        )
    return found


def check_unbalanced_bid(
    candidate: Candidate, project: Project, references: ProjectReferences, link: str
) -> str | None:
    """The validator's check of a risk's ``reference:`` link: None when it holds, else why not.
    The post must be one the fit grades as priced far below, and the sum at stake what its
    expected price gives."""
    code, _, unit = link.removeprefix("reference:").partition("@")
    line = project.line(code)
    if not unit or line is None or code not in candidate.affected_codes:
        return f"evidence link {link!r} names no reference class of an affected line"
    priced = _priced(line)
    if priced is None or priced[0] != unit:
        return f"evidence link {link!r}: line {code} has no quantity and unit price in {unit}"
    _unit, quantity, price = priced
    ref = references.get(code, unit)
    if ref is None or ref.below is None:
        return (
            f"evidence link {link!r}: {code} at {_fmt(price)} NOK/{unit} is not priced below "
            "what the portfolio expects here by enough to tell"
        )
    stake = at_stake(price, ref.expected_nok, quantity)
    if abs(float(candidate.at_stake_nok or 0) - stake) > 0.5:
        return (
            f"evidence link {link!r}: at the expected {_fmt(ref.expected_nok)} NOK/{unit} the "
            f"sum at stake is {_fmt(stake)} NOK, not the {_fmt(float(candidate.at_stake_nok or 0))} "
            "claimed"
        )
    return None


@dataclass(frozen=True)
class Coverage:
    """How much of a tender could be measured against the portfolio."""

    total_nok: float
    compared_nok: float
    compared: int
    posts: int
    uncompared: tuple[tuple[str, str, float], ...]
    """(code, why: a key of ``UNCOMPARED``, amount) of each post that could not be compared."""

    @property
    def share(self) -> float:
        return self.compared_nok / self.total_nok if self.total_nok > 0 else 0.0


def coverage(project: Project, references: ProjectReferences) -> Coverage:
    """Which of the project's posts with a quantity were compared (enough comparables in their
    class), and why each other one was not."""
    why = dict(references.unmatched)
    total = compared_nok = 0.0
    compared = posts = 0
    uncompared: list[tuple[str, str, float]] = []
    for line in project.cost_lines:
        if line.quantity is None or line.quantity <= 0:
            continue
        posts += 1
        total += float(line.amount_nok)
        priced = _priced(line)
        ref = references.get(line.code, priced[0]) if priced else None
        if ref is not None and ref.n >= references.min_comparables:
            compared += 1
            compared_nok += float(line.amount_nok)
            continue
        reason = why.get(line.code) or ("thin" if ref is not None else "unpriced")
        if reason == "unpriced" and line.compared_as is None:
            reason = "no-code"
        uncompared.append((line.code, reason, float(line.amount_nok)))
    return Coverage(total, compared_nok, compared, posts, tuple(uncompared))
