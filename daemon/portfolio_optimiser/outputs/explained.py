"""The report's sections that explain where a run's candidates came from and what stood against
them: the precedents experts set, the reference prices a line was measured against, and what
experts taught the proposer (DESIGN §4). Text only; every string through the run's redactor."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._markdown import format_nok, md
from .worksheet import norwegian_figures

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.pipeline.outcome import RunResult

    from .report import Redactor

__all__ = ["changes_section", "learned_section", "precedents_section", "references_section"]


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
    """Each reference-price candidate with what its line was measured against, likely first."""
    rows: list[tuple[int, list[str]]] = []
    for run in result.candidates:
        reference = result.references.get(run.candidate.id)
        if reference is None:
            continue
        cand = run.candidate
        among = (
            f"{reference.category} projects" if reference.category else "projects, every category"
        )
        rows.append(
            (
                0 if (reference.below if cand.is_risk else reference.grade) == "likely" else 1,
                [
                    f"### {cand.grade or 'not graded'}: `{cand.id}`, "
                    f"{md(red.text(cand.title, 'a candidate title'))}",
                    "",
                    f"{md(red.text(cand.rationale, 'a candidate rationale'))}",
                    "",
                    "| measured against | value |",
                    "|---|---:|",
                    f"| other {among}"
                    + (
                        f" pricing NS 3420 {md(reference.compared_as)}"
                        if reference.compared_as and reference.compared_as != reference.code
                        else ""
                    )
                    + f" | {reference.n} |",
                    f"| their median as written, NOK per {md(reference.unit)} | "
                    f"{format_nok(reference.median_nok)} |",
                    f"| their P10–P90 as written, NOK per {md(reference.unit)} | "
                    f"{format_nok(reference.p10_nok)}–{format_nok(reference.p90_nok)} |",
                    f"| this project's price level at this code | {reference.level:.2f} |",
                    f"| expected here (their prices at a common level, times this project's), "
                    f"NOK per {md(reference.unit)} | "
                    f"{format_nok(reference.expected_nok)} |",
                    f"| robust deviations {'below' if cand.is_risk else 'above'} it (spread "
                    f"{reference.spread:.0%}) | {abs(reference.sigmas):.1f} |",
                    "",
                ],
            )
        )
    if not rows:
        return []
    return [
        "## Reference prices",
        "",
        "Lines priced above what the portfolio's other projects make of the same cost code and "
        "unit, once this project's own price level (its region, site and market, fitted from all "
        "its lines) is divided out; a line is never its own reference. *Likely*: far enough above "
        "that few fair lines would be; *possible*: above, but a fair line could be too: worth a "
        "look, less often a saving.",
        "",
        *[line for _rank, block in sorted(rows, key=lambda r: r[0]) for line in block],
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
        (
            "No model was asked in this run; had one been, its prompt would have carried this "
            "block (it is what models are told of expert verdicts):"
            if result.ran_locally or result.proposer is None
            else "The proposer's prompt carried this block (it is what models are told of "
            "expert verdicts):"
        ),
        "",
        *(f"> {md(norwegian_figures(line))}" if line.strip() else ">" for line in lines),
        "",
    ]


def changes_section(result: RunResult, red: Redactor) -> list[str]:
    """What this version of the estimate changed against the last one the portfolio had."""
    if result.changes is None:
        return []
    heading = ["## What changed since the last version", ""]
    if not result.changes:
        return [*heading, "No line's figures changed against the version ingested before.", ""]
    return [
        *heading,
        f"{len(result.changes)} line(s) differ from the version ingested before:",
        "",
        "| line | change | what | before | now |",
        "|---|---|---|---|---|",
        *(
            f"| {md(red.text(c.code, 'a cost code'))} | {c.kind} | {md(red.text(c.what, 'a change'))}"
            f" | {md(red.text(c.before, 'a figure'))} | {md(red.text(c.now, 'a figure'))} |"
            for c in result.changes
        ),
        "",
    ]


def sources_section(result: RunResult, red: Redactor) -> list[str]:
    """Where this run's kuttliste items and the lines they touch stand in the planner's files."""
    if not result.sources:
        return []
    return [
        "## Where the lines come from",
        "",
        "The kuttliste items and the lines these candidates touch, as they stand in the files "
        "the bundle was imported from:",
        "",
        "| item or line | in the source |",
        "|---|---|",
        *(
            f"| {md(red.text(code, 'a cost code'))} | {md(red.text(where, 'a source row'))} |"
            for code, where in sorted(result.sources.items())
        ),
        "",
    ]
