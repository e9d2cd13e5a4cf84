"""Deterministic candidates: the bundle's own kuttliste, turned into candidates a run can validate.

This is the proposer of last resort (no model, no network): every ``measure-option`` of the project
becomes one candidate, its evidence the option's own file and the cost lines it names.
"""

from __future__ import annotations

from collections.abc import Iterable

from .models import Candidate, MeasureOption, Project, candidate_key_literal

__all__ = ["candidate_from_option", "kuttliste_candidates", "sources_of"]


def candidate_from_option(project: Project, option: MeasureOption) -> Candidate:
    evidence = [option.source] if option.source else []
    evidence += [
        line.source
        for code in option.affected_codes
        if (line := project.line(code)) and line.source
    ]
    return Candidate(
        project_id=project.id,
        affected_codes=option.affected_codes,
        measure_type=option.measure_type,
        claimed_saving_nok=option.estimated_saving_nok,
        saving_literal=candidate_key_literal(option.estimated_saving_nok),
        title=option.title or option.id,
        rationale=option.consequence or option.description or "",
        evidence=tuple(dict.fromkeys(evidence)),
        quantity=option.quantity,
        unit=option.unit,
        unit_price_nok=option.unit_price_nok,
        origin=f"measure-option:{option.id}",
        decide_by=option.decision_point,
        claimed_delta_p50_nok=option.delta_p50_nok,
        claimed_delta_p85_nok=option.delta_p85_nok,
    )


def kuttliste_candidates(project: Project) -> list[Candidate]:
    """One candidate per measure option, in the bundle's file order."""
    return [candidate_from_option(project, option) for option in project.measure_options]


def sources_of(project: Project, candidates: Iterable[Candidate]) -> dict[str, str]:
    """Where the candidates' kuttliste items and lines stand in the planner's own files, for an
    imported estimate: ``kuttliste item k-1`` or a line's code → its file, sheet and row."""
    found: dict[str, str] = {}
    options = {option.id: option for option in project.measure_options}
    for candidate in candidates:
        kind, _, ident = candidate.origin.partition(":")
        option = options.get(ident) if kind == "measure-option" else None
        if option is not None and option.imported_from:
            found[f"kuttliste item {ident}"] = option.imported_from
        for code in candidate.affected_codes:
            line = project.line(code)
            if line is not None and line.imported_from:
                found[code] = line.imported_from
    return found
