"""The local path: candidates and reviews that need no model, no credential and no network.

Decides: which candidates deterministic rules propose (the bundle's own kuttliste, then measures
learned from approved verdicts on codes this project has, carried as rates, the lines priced
above their reference class, and a tender's posts priced far below it), and the structured local review a
candidate gets when the plan consults nobody. Every candidate still goes through the validator.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from portfolio_optimiser.context.candidates import kuttliste_candidates
from portfolio_optimiser.context.decisions import Accepted, Decision
from portfolio_optimiser.context.models import COMPUTED, Candidate, LearnedRate, Project
from portfolio_optimiser.context.reference import (
    ProjectReferences,
    reference_candidates,
    two_figures_down,
)
from portfolio_optimiser.context.tender import unbalanced_bid_candidates
from portfolio_optimiser.context.vocabulary import normalise_unit

__all__ = ["learned_candidates", "local_candidates", "local_review"]


def _affected(project: Project, codes: tuple[str, ...]) -> tuple[float, float | None, str | None]:
    """What a measure on ``codes`` touches: their cost, and the quantity and unit when it is one
    line priced per unit (else None)."""
    lines = [line for code in codes if (line := project.line(code)) is not None]
    cost = math.fsum(float(line.amount_nok) for line in lines)
    if len(lines) == 1 and lines[0].quantity and normalise_unit(lines[0].unit):
        return cost, float(lines[0].quantity), normalise_unit(lines[0].unit)
    return cost, None, None


def learned_candidates(
    project: Project, approved: Iterable[Any], portfolio: Mapping[str, Project]
) -> list[Candidate]:
    """Measures experts approved elsewhere, proposed again at this project's size.

    An approval carries its saving as a rate of what it affected in the project it was judged
    in (``portfolio``): per unit of the affected line's quantity when it is one line priced per
    unit in the same unit in both projects (a dearer unit price earns no more), else as a share
    of the affected lines' cost. That rate times the expert's realisation rate, times this
    project's quantity or cost, rounded down to two significant figures, is the saving here. An
    approval whose project is not in the portfolio has no size to carry, and is not transferred
    (its precedent still reaches the proposer through the fold).
    """
    found: list[Candidate] = []
    for verdict in approved:
        key = verdict.key
        codes = tuple(key.affected_codes or ())
        if not codes or not key.measure_type or not set(codes) <= project.codes:
            continue
        if key.measure_type in COMPUTED:
            continue  # a line's own price against the others; the reference classes find it
        if key.project_id == project.id:
            continue  # judged here already: carrying it back would count it twice
        source = portfolio.get(key.project_id or "")
        if source is None or not set(codes) <= source.codes:
            continue
        try:
            approved_saving = float(verdict.adjusted_saving_nok or key.saving_literal)
        except (TypeError, ValueError):
            continue
        given = verdict.realization_rate
        realised = given if given is not None else 1.0
        was_cost, was_quantity, was_unit = _affected(source, codes)
        cost, quantity, unit = _affected(project, codes)
        if was_quantity and quantity and was_unit == unit:
            was_basis, basis, scale = was_quantity, quantity, f"quantity in {unit}"
        elif was_cost > 0:
            was_basis, basis, unit, scale = was_cost, cost, None, "cost"
        else:
            continue
        saving = two_figures_down(approved_saving / was_basis * realised * basis)
        if saving <= 0:
            continue
        evidence = tuple(
            dict.fromkeys(
                line.source for code in codes if (line := project.line(code)) and line.source
            )
        )
        by = f" by {verdict.reviewer}" if verdict.reviewer else ""
        found.append(
            Candidate(
                project_id=project.id,
                affected_codes=codes,
                measure_type=key.measure_type,
                claimed_saving_nok=saving,
                title=f"Learned: {key.measure_type} on {', '.join(codes)}",
                # A sentence, not the working: the report writes the working from learned_rate.
                rationale=(
                    f"Approved{by} for candidate {verdict.candidate_id} in {source.id}, and "
                    f"proposed here at the rate it saved there, scaled to this project's {scale}"
                    + (" and the realisation the expert expects." if given is not None else ".")
                ),
                evidence=evidence,
                origin=f"verdict:{verdict.candidate_id}",
                decide_by=verdict.decide_by,
                learned_rate=LearnedRate(
                    project_id=source.id,
                    saving_nok=approved_saving,
                    basis_there=was_basis,
                    basis_here=basis,
                    unit=unit,
                    realisation=None if given is None else float(given),
                ),
            )
        )
    return found


def local_candidates(
    project: Project,
    approved: Iterable[Any],
    references: ProjectReferences | None = None,
    portfolio: Mapping[str, Project] | None = None,
) -> list[Candidate]:
    """The kuttliste first, then learned measures not already on it (same codes and type), then
    the lines priced well above their reference class, then a tender's posts priced far below
    it (risks, claiming nothing)."""
    own = kuttliste_candidates(project)
    seen = {(frozenset(c.affected_codes), c.measure_type) for c in own}
    extra = [
        c
        for c in learned_candidates(project, approved, portfolio or {})
        if (frozenset(c.affected_codes), c.measure_type) not in seen
    ]
    if references is None:
        return own + extra
    return (
        own
        + extra
        + reference_candidates(project, references)
        + unbalanced_bid_candidates(project, references)
    )


def local_review(candidate: Candidate, decision: Decision) -> dict[str, Any]:
    """The five steps of the structured local review, filled from the validator's receipt."""
    checks = decision.receipt.checks
    assumptions = [f"{c.rule}: {c.detail}" for c in checks]
    accepted = isinstance(decision, Accepted)
    return {
        "hypothesis": f"'{candidate.title}' saves {candidate.saving_literal} NOK on {', '.join(candidate.affected_codes)}",
        "alternative": "the saving is not there: it double counts, exceeds what the lines cost, or rests on wrong arithmetic",
        "assumptions": assumptions,
        "falsifier": "any validator rule failing on the recomputed figures",
        "experiment": f"the deterministic validator recomputed the figures: {'all rules passed' if accepted else 'a rule failed'}",
        "conclusion": "keep the candidate for an expert's verdict"
        if accepted
        else "reject the candidate",
    }
