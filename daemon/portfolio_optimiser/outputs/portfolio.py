"""``outbox/portfolio.md`` and its chart: the whole portfolio on one page.

Decides: what a portfolio office reads first — per project and per cost code the validated
savings, what awaits a verdict, what experts approved and rejected, and the realisation they
expect; the largest candidates still open; which reference classes are too thin to price a line.
Pure: it renders what it is given. Only each project's latest run counts (a rerun replaces the
run before it), and a saving spanning several codes is counted once, against the set of codes, as
in the run reports — so nothing is counted twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from .report import Redactor, format_nok, render_savings_svg

__all__ = ["SVG_NAME", "PortfolioLine", "render_portfolio"]

SVG_NAME: Final = "portfolio.svg"
_LARGEST: Final = 10
_APPROVED: Final = frozenset({"approved", "approved_with_adjustment"})


@dataclass(frozen=True)
class PortfolioLine:
    """One validated candidate of a project's latest run, with the expert's word on it."""

    project_id: str
    run_id: str
    candidate_id: str
    title: str
    codes: tuple[str, ...]
    saving: Decimal
    decision: str | None = None
    expected: Decimal | None = None
    """What the expert expects to be realised (approved only): saving (or adjusted) × rate."""
    adjusted: Decimal | None = None
    """The saving the expert signed off, where it differs from the claim."""

    @property
    def open(self) -> bool:
        return self.decision is None


@dataclass
class _Totals:
    validated: Decimal = Decimal(0)
    awaiting: Decimal = Decimal(0)
    approved: Decimal = Decimal(0)
    rejected: Decimal = Decimal(0)
    expected: Decimal = Decimal(0)

    def add(self, line: PortfolioLine) -> None:
        self.validated += line.saving
        if line.decision is None:
            self.awaiting += line.saving
        elif line.decision in _APPROVED:
            self.approved += line.saving
            self.expected += line.expected if line.expected is not None else line.saving
        else:
            self.rejected += line.saving

    def cells(self) -> str:
        values = (self.validated, self.awaiting, self.approved, self.rejected, self.expected)
        return " | ".join(format_nok(v) for v in values)


_HEADER: Final = "validated | awaiting a verdict | approved | rejected | expected realisation |"


def _by(lines: Iterable[PortfolioLine], key: str) -> dict[str, _Totals]:
    totals: dict[str, _Totals] = {}
    for line in lines:
        label = line.project_id if key == "project" else " + ".join(sorted(set(line.codes)))
        totals.setdefault(label, _Totals()).add(line)
    return dict(sorted(totals.items()))


def render_portfolio(
    lines: Sequence[PortfolioLine],
    *,
    projects: Sequence[str],
    thin: Sequence[tuple[str, str, int]],
    stamp: str,
    redactor: Redactor | None = None,
) -> tuple[str, str]:
    """(``portfolio.md``, ``portfolio.svg``) for these lines; ``projects`` are all ingested ones."""
    red = redactor if redactor is not None else Redactor()
    whole = _Totals()
    for line in lines:
        whole.add(line)
    by_project = _by(lines, "project")
    body = [
        "# Portfolio savings",
        "",
        f"{len(projects)} projects; {len(lines)} validated candidates in their latest runs, "
        f"**{format_nok(whole.validated)} NOK** in all: {format_nok(whole.awaiting)} NOK await a "
        f"verdict, experts approved {format_nok(whole.approved)} NOK and expect "
        f"{format_nok(whole.expected)} NOK to be realised.",
        "",
        f"![Validated savings by project]({SVG_NAME})",
        "",
        "## By project",
        "",
        f"| project | {_HEADER}",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for project in sorted(set(projects) | set(by_project)):
        totals = by_project.get(project, _Totals())
        body.append(f"| {red.text(project, 'a project id')} | {totals.cells()} |")
    body += ["", "## By cost code", "", f"| code | {_HEADER}", "|---|---:|---:|---:|---:|---:|"]
    for code, totals in _by(lines, "code").items():
        body.append(f"| {red.text(code, 'a cost code')} | {totals.cells()} |")
    largest = sorted((line for line in lines if line.open), key=lambda line: -line.saving)
    body += ["", "## Largest candidates awaiting a verdict", ""]
    if largest:
        body += ["| project | candidate | title | codes | saving (NOK) |", "|---|---|---|---|---:|"]
        for line in largest[:_LARGEST]:
            title = red.text(line.title, f"candidate {line.candidate_id}").replace("|", "/")
            body.append(
                f"| {red.text(line.project_id, 'a project id')} | `{line.candidate_id}` | "
                f"{title} | {', '.join(line.codes)} | {format_nok(line.saving)} |"
            )
        body += [
            "",
            "Each has a verdict template in `runs/<project>/<run>/verdicts/`; save it, filled "
            "in, into `inbox/verdicts/`.",
        ]
    else:
        body.append("None: every validated candidate has a verdict.")
    above = [ln for ln in lines if ln.adjusted is not None and ln.adjusted > ln.saving]
    if above:
        body += [
            "",
            "## Approved above the claim",
            "",
            "An expert signed off more than the validator checked; the validator's figures do "
            "not cover the difference, so read the verdict's rationale before counting on it:",
            "",
            "| project | candidate | claimed (NOK) | approved (NOK) |",
            "|---|---|---:|---:|",
            *(
                f"| {red.text(ln.project_id, 'a project id')} | `{ln.candidate_id}` | "
                f"{format_nok(ln.saving)} | {format_nok(ln.adjusted or 0)} ⚠ |"
                for ln in above
            ),
        ]
    body += ["", "## Thin reference classes", ""]
    if thin:
        body.append(
            "Too few projects price these lines for a reference (more projects, or a lower "
            "`[reference] min_comparables`, would let them be compared):"
        )
        body += ["", *(f"- {code} per {unit}: {n} project(s)" for code, unit, n in thin)]
    else:
        body.append("None.")
    body += [
        "",
        "---",
        "",
        f"Written {red.text(stamp, 'the stamp')}, after the latest run or verdict.",
    ]
    bars = [(label, totals.validated) for label, totals in by_project.items()]
    svg = render_savings_svg(bars, redactor=red, title="Validated savings by project")
    return "\n".join(body) + "\n", svg
