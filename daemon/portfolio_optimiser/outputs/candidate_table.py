"""The candidates at a glance: one row each, with where it came from, what it claims (a risk's
sum at stake, never a saving), and what the validator, the checker and the expert made of it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._markdown import format_nok, md
from .worksheet import code_label, decided_text, decision_cell, not_recomputed

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.context.models import Candidate
    from portfolio_optimiser.pipeline.outcome import CandidateRun, RunResult

    from .report import Redactor

__all__ = ["candidates_table", "claimed_cell", "origin_label"]


def claimed_cell(cand: Candidate) -> str:
    """What a candidate claims: its saving, or for a risk its sum at stake (claiming nothing)."""
    if cand.is_risk:
        return f"0 (risk: {format_nok(cand.at_stake_nok or 0)} at stake)"
    return format_nok(cand.claimed_saving_nok)


def _validator_cell(run: CandidateRun, red: Redactor) -> str:
    decision = run.validator
    if decision.outcome == "accepted":
        why = not_recomputed(run)
        said = f", not recomputable: {md(red.text(why, run.candidate.id))}" if why else ""
        return f"accepted{said}"
    reason = red.text(decision.reason, f"the validator's reason for {run.candidate.id}")
    return f"rejected (`{decision.rule.value}`): {md(reason)}"


def _checker_cell(run: CandidateRun, red: Redactor) -> str:
    outcome = run.checker.outcome
    reason = run.checker.reason
    said = md(red.text(reason, f"the checker's reason for {run.candidate.id}")) if reason else ""
    label = {
        "approved": "approved",
        "rejected": "blocked",
        "no_verdict": "no verdict (fails open)",
        "not_run": "not run",
    }[outcome]
    return f"{label}: {said}" if said else label


def candidates_table(result: RunResult, red: Redactor) -> list[str]:
    """The candidates at a glance: one row each, the ones experts rejected kept and marked."""
    if not result.candidates and not result.declined:
        return ["No candidates were proposed in this run."]
    lines = [
        "| id | title | from | codes | claimed saving (NOK) | validator | checker | verdict |",
        "|---|---|---|---|---:|---|---|---|",
    ]
    for run in result.candidates:
        cand = run.candidate
        where = f"candidate {cand.id}"
        title = md(red.text(cand.title, where)) or "(untitled)"
        if run.precedent:
            title += " ⚠ rejected before"
        codes = ", ".join(md(red.text(code_label(c, result), where)) for c in cand.affected_codes)
        origin = md(red.text(origin_label(cand.origin), where))
        lines.append(
            f"| `{cand.id}` | {title} | {origin} | {codes} | {claimed_cell(cand)} | "
            f"{_validator_cell(run, red)} | {_checker_cell(run, red)} | "
            f"{decision_cell(run, result, red)} |"
        )
    for cand in result.declined:  # rejected by an expert: kept in the table, not checked again
        where = f"candidate {cand.id}"
        decided = result.decided.get(cand.id)
        codes = ", ".join(md(red.text(code_label(c, result), where)) for c in cand.affected_codes)
        lines.append(
            f"| `{cand.id}` | {md(red.text(cand.title, where)) or '(untitled)'} | "
            f"{md(red.text(origin_label(cand.origin), where))} | {codes} | "
            f"{claimed_cell(cand)} | not checked again | not run | "
            f"{decided_text(cand, decided, red) if decided is not None else 'rejected'} |"
        )
    return lines


def origin_label(origin: str) -> str:
    kind, _, name = origin.partition(":")
    return {
        "measure-option": f"your list ({name})",
        "model": f"model ({name})",
        "verdict": "learned from a verdict",
        "reference": f"reference prices ({name})",
        "reference-low": f"reference prices, priced below ({name})",
    }.get(kind, origin or "unknown")
