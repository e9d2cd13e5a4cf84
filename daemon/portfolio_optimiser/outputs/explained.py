"""The report's sections that explain where a run's candidates came from and what stood against
them: the precedents experts set, the reference prices a line was measured against, and what
experts taught the proposer (DESIGN §4). Text only; every string through the run's redactor."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._markdown import format_nok, md

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.pipeline.outcome import RunResult

    from .report import Redactor

__all__ = ["learned_section", "precedents_section", "references_section"]


def precedents_section(result: RunResult, red: Redactor) -> list[str]:
    """Candidates of a measure experts rejected twice on the same codes, with that precedent."""
    lines = [
        f"- `{run.candidate.id}` {md(red.text(run.candidate.title, 'a candidate title'))}: "
        f"{md(red.text(run.precedent, 'a precedent'))}"
        for run in result.candidates
        if run.precedent
    ]
    if not lines:
        return []
    return [
        "## Rejected before",
        "",
        "Still checked, but experts have rejected this kind of measure on these codes twice:",
        "",
        *lines,
        "",
    ]


def references_section(result: RunResult, red: Redactor) -> list[str]:
    """Each reference-price candidate with the comparables it was measured against."""
    lines: list[str] = []
    for run in result.candidates:
        reference = result.references.get(run.candidate.id)
        if reference is None:
            continue
        cand = run.candidate
        among = (
            f"{reference.category} projects" if reference.category else "projects, every category"
        )
        lines += [
            f"### `{cand.id}`: {md(red.text(cand.title, 'a candidate title'))}",
            "",
            f"{md(red.text(cand.rationale, 'a candidate rationale'))}",
            "",
            f"Compared with {reference.n} other {among}: median "
            f"{format_nok(reference.median)} NOK per {md(reference.unit)}.",
            "",
            "| project | line | unit price (NOK) |",
            "|---|---|---:|",
            *(
                f"| {md(red.text(c.project_id, 'a project id'))} | "
                f"{md(red.text(c.source, 'a comparable'))} | {format_nok(c.unit_price_nok)} |"
                for c in sorted(reference.comparables, key=lambda c: c.unit_price_nok)
            ),
            "",
        ]
    if not lines:
        return []
    return [
        "## Reference prices",
        "",
        "Lines priced well above the same cost code and unit in the portfolio's other projects "
        "(their comparables below; a line is never its own reference):",
        "",
        *lines,
    ]


def learned_section(result: RunResult, red: Redactor) -> list[str]:
    """What the fold put into the hypothesis prompt, quoted, or that nothing related yet."""
    heading = ["## What experts taught this run", ""]
    if not result.learned.strip():
        return [
            *heading,
            "No expert verdict relates to this project yet; an approved or rejected verdict on "
            "the same cost codes will be carried here, and into the proposer's prompt, next time.",
            "",
        ]
    text = red.text(result.learned, "what experts taught")
    lines = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#")).strip().splitlines()
    return [
        *heading,
        "The proposer's prompt carried this block (it is what models are told of expert verdicts):",
        "",
        *(f"> {md(line)}" if line.strip() else ">" for line in lines),
        "",
    ]
