"""``outbox/portfolio.md`` and its chart: the whole portfolio on one page.

Decides: what a portfolio office reads first — per project and per cost code the validated
savings, what awaits a verdict, what experts approved and rejected, and the realisation they
expect; the largest candidates still open; which reference classes are too thin to price a line.
Pure: it renders what it is given. Only each project's latest run counts (a rerun replaces the
run before it), and a saving spanning several codes is counted once, against the set of codes, as
in the run reports — so nothing is counted twice.

The page is kept as a book: a run replaces one project's lines, a verdict one candidate's
figures, and only what they touch is counted and rendered again (a verdict in a portfolio of ten
thousand projects rewrites one row, not ten thousand). Every total is exact (``Decimal``), so the
page a book reaches by changes is the page a book built afresh from the same lines renders.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from types import MappingProxyType
from typing import Final

from ._markdown import md
from .frame_report import decision_date
from .portfolio_lines import (
    History,
    PageCandidate,
    PageFrame,
    PageOutcome,
    PageVerdict,
    page_json,
    read_frame,
    read_lines,
    read_outcome,
    read_page,
)
from .portfolio_totals import BookLine, Totals
from .report import Redactor, format_nok, render_savings_svg

__all__ = [
    "SVG_NAME",
    "PageCandidate",
    "PageFrame",
    "PageOutcome",
    "PageVerdict",
    "PortfolioBook",
    "page_json",
    "read_frame",
    "read_lines",
    "read_outcome",
    "read_page",
]
# The page's lines (``portfolio_lines``) are named here too: the page is what its callers import.

SVG_NAME: Final = "portfolio.svg"
_LARGEST: Final = 10


_HEADER: Final = "validated | awaiting a verdict | approved | rejected | expected realisation |"


@dataclass
class PortfolioBook:
    """The page's counts, kept up to date one change at a time."""

    redactor: Redactor = field(default_factory=Redactor)
    _projects: set[str] = field(default_factory=set)
    _lines: dict[str, tuple[BookLine, ...]] = field(default_factory=dict)
    _verdicts: dict[str, PageVerdict] = field(default_factory=dict)
    _where: dict[str, set[str]] = field(default_factory=dict)
    """Candidate id → the projects whose latest run lists it."""
    _whole: Totals = field(default_factory=Totals)
    _by_project: dict[str, Totals] = field(default_factory=dict)
    _by_code: dict[str, Totals] = field(default_factory=dict)
    _rows: dict[str, str] = field(default_factory=dict)
    _order: list[str] | None = None
    _table: list[str] = field(default_factory=list)
    """The by-project rows in the page's order: a row that changes is changed in place."""
    _place: dict[str, int] = field(default_factory=dict)
    _open: list[tuple[Decimal, str, int]] = field(default_factory=list)
    """The open lines' ranks, in order: the largest are the first."""
    _above: dict[tuple[str, int], BookLine] = field(default_factory=dict)
    """Lines approved above their claim, by (project, place)."""
    _outcomes: dict[str, PageOutcome] = field(default_factory=dict)
    _frames: dict[str, PageFrame] = field(default_factory=dict)
    _history: History = field(default_factory=History)
    _due: list[tuple[date, str, int]] = field(default_factory=list)
    """The open lines with a dated decision point, by that date: those before today have passed."""
    _svg: str | None = None

    @classmethod
    def of(
        cls,
        candidates: Iterable[PageCandidate],
        *,
        projects: Iterable[str],
        verdicts: Mapping[str, PageVerdict],
        outcomes: Mapping[str, PageOutcome] | None = None,
        frames: Mapping[str, PageFrame] | None = None,
    ) -> PortfolioBook:
        """A book built afresh: every project's candidates, outcome and frame flags, and the
        verdicts as they stand."""
        book = cls()
        book._verdicts = dict(verdicts)
        by_project: dict[str, list[PageCandidate]] = {}
        for candidate in candidates:
            by_project.setdefault(candidate.project_id, []).append(candidate)
        for project_id in set(by_project) | set(outcomes or {}) | set(frames or {}):
            book.replace(
                project_id,
                by_project.get(project_id, []),
                (outcomes or {}).get(project_id),
                (frames or {}).get(project_id),
            )
        book.set_projects(projects)
        return book

    # -- changes ---------------------------------------------------------------------------------

    def set_projects(self, projects: Iterable[str]) -> None:
        """The ingested projects (a project without a run still has its row)."""
        known = set(projects)
        if known != self._projects:
            self._projects, self._order = known, None

    def replace(
        self,
        project_id: str,
        candidates: Sequence[PageCandidate],
        outcome: PageOutcome | None = None,
        frame: PageFrame | None = None,
    ) -> None:
        """A project's latest run is now this one: its validated candidates, in its order, its
        outcome if it is finished, and what its frame flags."""
        if frame is None:
            self._frames.pop(project_id, None)
        else:
            self._frames[project_id] = frame
        before = self._outcomes.pop(project_id, None)
        if before is not None:
            self._history.add(before, -1)
        if outcome is not None:
            self._outcomes[project_id] = outcome
            self._history.add(outcome, 1)
        for line in self._lines.pop(project_id, ()):
            self._count(line, -1)
            self._where[line.candidate.candidate_id].discard(project_id)
        lines = tuple(
            BookLine(c, i, self._verdicts.get(c.candidate_id)) for i, c in enumerate(candidates)
        )
        if lines:
            self._lines[project_id] = lines
        for line in lines:
            self._count(line, 1)
            self._where.setdefault(line.candidate.candidate_id, set()).add(project_id)
        self._row(project_id)
        self._svg = None
        if not lines and project_id not in self._projects:
            self._order = None  # its row leaves the page

    @property
    def verdicts(self) -> Mapping[str, PageVerdict]:
        """Each candidate's verdict as the book counts it."""
        return MappingProxyType(self._verdicts)

    def set_verdict(self, candidate_id: str, verdict: PageVerdict | None) -> None:
        """A candidate's verdict as it now stands (None: it has none)."""
        if verdict is None:
            self._verdicts.pop(candidate_id, None)
        else:
            self._verdicts[candidate_id] = verdict
        for project_id in self._where.get(candidate_id, ()):
            lines = list(self._lines[project_id])
            for i, line in enumerate(lines):
                if line.candidate.candidate_id == candidate_id:
                    self._count(line, -1)
                    lines[i] = BookLine(line.candidate, line.position, verdict)
                    self._count(lines[i], 1)
            self._lines[project_id] = tuple(lines)
            self._row(project_id)

    def _count(self, line: BookLine, sign: int) -> None:
        project_id = line.candidate.project_id
        self._whole.add(line, sign)
        self._by_project.setdefault(project_id, Totals()).add(line, sign)
        self._by_code.setdefault(line.code_label, Totals()).add(line, sign)
        for key, totals in ((project_id, self._by_project), (line.code_label, self._by_code)):
            if totals[key].lines == 0:
                del totals[key]
        if line.above:
            place = (project_id, line.position)
            if sign > 0:
                self._above[place] = line
            else:
                del self._above[place]
        if line.verdict is None:
            due = line.due
            if sign > 0:
                insort(self._open, line.rank)
                if due is not None:
                    insort(self._due, due)
            else:
                del self._open[bisect_left(self._open, line.rank)]
                if due is not None:
                    del self._due[bisect_left(self._due, due)]

    def _row(self, project_id: str) -> None:
        totals = self._by_project.get(project_id, Totals())
        shown = self.redactor.text(project_id, "a project id")
        row = self._rows[project_id] = f"| {shown} | {totals.cells()} |"
        if self._order is not None:
            place = self._place.get(project_id)
            if place is None:
                self._order = None  # a project new to the page: the order is taken again
            else:
                self._table[place] = row

    # -- the page --------------------------------------------------------------------------------

    def render(self, *, thin: Sequence[tuple[str, str, int]], stamp: str) -> tuple[str, str]:
        """(``portfolio.md``, ``portfolio.svg``) as the book stands."""
        red, whole = self.redactor, self._whole
        if self._order is None:
            order = sorted(self._projects | set(self._by_project))
            for project_id in order:
                if project_id not in self._rows:
                    self._row(project_id)
            self._order = order
            self._place = {project_id: i for i, project_id in enumerate(order)}
            self._table = [self._rows[project_id] for project_id in order]
        body = [
            "# Portfolio savings",
            "",
            f"{len(self._projects)} projects; {whole.lines} validated candidates in their latest "
            f"runs, **{format_nok(whole.validated)} NOK** in all: {format_nok(whole.awaiting)} NOK "
            f"await a verdict, experts approved {format_nok(whole.approved)} NOK and expect "
            f"{format_nok(whole.expected)} NOK to be realised.",
            "",
            f"![Validated savings by project]({SVG_NAME})",
            "",
            "## By project",
            "",
            f"| project | {_HEADER}",
            "|---|---:|---:|---:|---:|---:|",
            *self._table,
            "",
            "## By cost code",
            "",
            f"| code | {_HEADER}",
            "|---|---:|---:|---:|---:|---:|",
            *(
                f"| {red.text(code, 'a cost code')} | {totals.cells()} |"
                for code, totals in sorted(self._by_code.items())
            ),
            *self._largest(),
            *self._passed(stamp),
            *self._flagged(),
            *self._history.section(),
            *self._approved_above(),
            *_thin(thin),
            "",
            "---",
            "",
            f"Written {red.text(stamp, 'the stamp')}, after the latest run or verdict.",
        ]
        if self._svg is None:
            bars = [(label, totals.validated) for label, totals in sorted(self._by_project.items())]
            self._svg = render_savings_svg(bars, redactor=red, title="Validated savings by project")
        return "\n".join(body) + "\n", self._svg

    def _flagged(self) -> list[str]:
        """The projects whose frame does not hold together, or whose simulation diverges from
        the frame they state: a KS2 analyst looks at these first."""
        if not self._frames:
            return []
        red = self.redactor
        body = ["", "## Frames to look at", ""]
        for project_id, frame in sorted(self._frames.items()):
            body.append(
                f"- {md(red.text(project_id, 'a project id'))}: " + "; ".join(frame.said()) + "."
            )
        return body

    def _largest(self) -> list[str]:
        red = self.redactor
        body = ["", "## Largest candidates awaiting a verdict", ""]
        if not self._open:
            return [*body, "None: every validated candidate has a verdict."]
        body += ["| project | candidate | title | codes | saving (NOK) |", "|---|---|---|---|---:|"]
        for _saving, project_id, position in self._open[:_LARGEST]:
            c = self._lines[project_id][position].candidate
            title = red.text(c.title, f"candidate {c.candidate_id}").replace("|", "/")
            body.append(
                f"| {red.text(c.project_id, 'a project id')} | `{c.candidate_id}` | "
                f"{title} | {', '.join(c.codes)} | {format_nok(c.saving)} |"
            )
        return [
            *body,
            "",
            "Each has a verdict template in `runs/<project>/<run>/verdicts/`; save it, filled "
            "in, into `inbox/verdicts/`.",
        ]

    def _passed(self, stamp: str) -> list[str]:
        """The open candidates whose decision point is before the page's day (a bisection of the
        dated ones: a page of ten thousand projects reads only those it lists)."""
        today = decision_date(stamp)
        if today is None:
            return []
        passed = bisect_left(self._due, (today, "", -1))
        if not passed:
            return []
        red = self.redactor
        body = [
            "",
            "## Decision points passed",
            "",
            f"{passed} candidate(s) awaiting a verdict whose measure had to be decided before "
            f"{today.isoformat()}: decide them, or move their decision point in the bundle.",
            "",
            "| project | candidate | decide by | saving (NOK) |",
            "|---|---|---|---:|",
        ]
        for _when, project_id, position in self._due[: min(passed, _LARGEST)]:
            c = self._lines[project_id][position].candidate
            when = md(red.text(c.decide_by or "", f"candidate {c.candidate_id}"))
            body.append(
                f"| {red.text(c.project_id, 'a project id')} | `{c.candidate_id}` | {when} | "
                f"{format_nok(c.saving)} |"
            )
        return body

    def _approved_above(self) -> list[str]:
        red = self.redactor
        above = [self._above[place] for place in sorted(self._above)]
        if not above:
            return []
        return [
            "",
            "## Approved above the claim",
            "",
            "An expert signed off more than the validator checked; the validator's figures do "
            "not cover the difference, so read the verdict's rationale before counting on it:",
            "",
            "| project | candidate | claimed (NOK) | approved (NOK) |",
            "|---|---|---:|---:|",
            *(
                f"| {red.text(ln.candidate.project_id, 'a project id')} | "
                f"`{ln.candidate.candidate_id}` | {format_nok(ln.saving)} | "
                f"{format_nok(ln.verdict.adjusted if ln.verdict and ln.verdict.adjusted else 0)}"
                " ⚠ |"
                for ln in above
            ),
        ]


def _thin(thin: Sequence[tuple[str, str, int]]) -> list[str]:
    body = ["", "## Thin reference classes", ""]
    if not thin:
        return [*body, "None."]
    return [
        *body,
        "Too few projects price these lines for a reference (more projects, or a lower "
        "`[reference] min_comparables`, would let them be compared):",
        "",
        *(f"- {code} per {unit}: {n} project(s)" for code, unit, n in thin),
    ]
