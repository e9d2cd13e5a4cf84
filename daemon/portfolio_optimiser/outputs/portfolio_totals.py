"""What the portfolio page counts: each candidate line with its verdict, and the totals of a set
of lines (a project's, a code's, the portfolio's), kept exact (``Decimal``) so that a line
counted out undoes its counting in."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from .frame_report import decision_date
from .portfolio_lines import PageCandidate, PageVerdict
from .report import format_nok

__all__ = ["BookLine", "Totals"]


@dataclass(frozen=True)
class BookLine:
    """One candidate of a project's latest run, as the book counts it: with its verdict."""

    candidate: PageCandidate
    position: int
    """Its place in its run's list: the page lists a project's candidates in the run's order."""
    verdict: PageVerdict | None

    @property
    def saving(self) -> Decimal:
        return self.candidate.saving

    @property
    def expected(self) -> Decimal:
        """What the expert expects to be realised (approved only): saving (or adjusted) × rate."""
        verdict = self.verdict
        if verdict is None or not verdict.approves:
            return self.saving
        base = verdict.adjusted if verdict.adjusted is not None else self.saving
        return base * (verdict.rate if verdict.rate is not None else Decimal(1))

    @property
    def above(self) -> bool:
        """Approved above the claim: the validator's figures do not cover the difference."""
        adjusted = self.verdict.adjusted if self.verdict is not None else None
        return adjusted is not None and adjusted > self.saving

    @property
    def rank(self) -> tuple[Decimal, str, int]:
        """The order of the largest open candidates: by saving, then in the page's line order."""
        return -self.saving, self.candidate.project_id, self.position

    @property
    def due(self) -> tuple[date, str, int] | None:
        """Its place among decision points: the date its measure must be decided by, if any."""
        when = decision_date(self.candidate.decide_by)
        return None if when is None else (when, self.candidate.project_id, self.position)

    @property
    def code_label(self) -> str:
        return " + ".join(sorted(set(self.candidate.codes)))


@dataclass
class Totals:
    """Counted lines: added and taken out exactly, so a book reached by changes is one built
    afresh."""

    lines: int = 0
    validated: Decimal = Decimal(0)
    awaiting: Decimal = Decimal(0)
    approved: Decimal = Decimal(0)
    rejected: Decimal = Decimal(0)
    expected: Decimal = Decimal(0)

    def add(self, line: BookLine, sign: int = 1) -> None:
        """Count ``line`` in (``sign`` 1) or out (-1): exact, so out undoes in."""
        self.lines += sign
        self.validated += sign * line.saving
        if line.verdict is None:
            self.awaiting += sign * line.saving
        elif line.verdict.approves:
            self.approved += sign * line.saving
            self.expected += sign * line.expected
        else:
            self.rejected += sign * line.saving

    def cells(self) -> str:
        values = (self.validated, self.awaiting, self.approved, self.rejected, self.expected)
        return " | ".join(format_nok(v) for v in values)
