"""The local path: candidates and reviews that need no model, no credential and no network.

Decides: which candidates deterministic rules propose (the bundle's own kuttliste, then measures
learned from approved verdicts on codes this project has), and the structured local review a
candidate gets when the plan consults nobody. Every candidate still goes through the validator.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from portfolio_optimiser.context.candidates import kuttliste_candidates
from portfolio_optimiser.context.decisions import Accepted, Decision
from portfolio_optimiser.context.models import Candidate, Project
from portfolio_optimiser.context.reference import ReferenceIndex, reference_candidates

__all__ = ["learned_candidates", "local_candidates", "local_review"]


def learned_candidates(project: Project, approved: Iterable[Any]) -> list[Candidate]:
    """Measures experts approved elsewhere, proposed again where this project has the same codes.

    The saving carried over is the approved one times its realisation rate, in whole kroner: a
    starting point the validator checks against this project's own lines.
    """
    found: list[Candidate] = []
    for verdict in approved:
        key = verdict.key
        codes = tuple(key.affected_codes or ())
        if not codes or not key.measure_type or not set(codes) <= project.codes:
            continue
        try:
            base = float(verdict.adjusted_saving_nok or key.saving_literal)
        except (TypeError, ValueError):
            continue
        saving = round(
            base * (verdict.realization_rate if verdict.realization_rate is not None else 1.0)
        )
        if saving <= 0:
            continue
        evidence = tuple(
            dict.fromkeys(
                line.source for code in codes if (line := project.line(code)) and line.source
            )
        )
        found.append(
            Candidate(
                project_id=project.id,
                affected_codes=codes,
                measure_type=key.measure_type,
                claimed_saving_nok=saving,
                title=f"Learned: {key.measure_type} on {', '.join(codes)}",
                rationale=f"approved by an expert for candidate {verdict.candidate_id}",
                evidence=evidence,
                origin=f"verdict:{verdict.candidate_id}",
            )
        )
    return found


def local_candidates(
    project: Project, approved: Iterable[Any], references: ReferenceIndex | None = None
) -> list[Candidate]:
    """The kuttliste first, then learned measures not already on it (same codes and type), then
    the lines priced well above their reference class."""
    own = kuttliste_candidates(project)
    seen = {(frozenset(c.affected_codes), c.measure_type) for c in own}
    extra = [
        c
        for c in learned_candidates(project, approved)
        if (frozenset(c.affected_codes), c.measure_type) not in seen
    ]
    benchmarked = reference_candidates(project, references) if references is not None else []
    return own + extra + benchmarked


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
