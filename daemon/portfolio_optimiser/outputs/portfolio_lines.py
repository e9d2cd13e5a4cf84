"""The portfolio page's lines: a validated candidate of a project's latest run and an expert's
verdict on it, as the page counts them; a finished project's outcome, and the outcomes counted
against their frames (``History``); and the compact form the ledger keeps beside each run
(``page_json``), so that the page is built from the ledger, not by reading every run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Final

from .proposals import Proposals

__all__ = [
    "History",
    "PageCandidate",
    "PageFrame",
    "PageOutcome",
    "PageVerdict",
    "page_json",
    "read_frame",
    "read_lines",
    "read_outcome",
    "read_page",
]

_APPROVED: Final = frozenset({"approved", "approved_with_adjustment"})


@dataclass(frozen=True)
class PageCandidate:
    """One validated candidate of a project's latest run, as the page counts it."""

    project_id: str
    run_id: str
    candidate_id: str
    title: str
    codes: tuple[str, ...]
    saving: Decimal
    decide_by: str | None = None
    """Its latest decision point, as its measure names it (a date first, or a phase)."""


@dataclass(frozen=True)
class PageFrame:
    """What a project's frame flags: its simulation diverging from its stated frame (by this
    share of the stated P85), its kostnadsramme below its styringsramme (these kuttliste items)."""

    divergence: Decimal | None
    incoherent: tuple[str, ...]

    def said(self) -> list[str]:
        found = []
        if self.divergence is not None:
            found.append(
                f"the simulated P85 stands {float(self.divergence):+.1%} from the stated one"
            )
        if self.incoherent:
            found.append(
                "the kostnadsramme falls below the styringsramme (kuttliste: "
                + ", ".join(self.incoherent)
                + ")"
            )
        return found


@dataclass(frozen=True)
class PageOutcome:
    """A finished project's final cost against the P50 and P85 it was steered by."""

    final: Decimal
    p50: Decimal
    p85: Decimal


def page_json(proposals: Proposals) -> str:
    """A run's candidates as the page counts them (the validated ones, in its order), as the
    ledger keeps them beside the run: the page is built from these, not by reading every run.
    A finished project's are kept with its outcome, in an object; any other's as a list, as the
    ledger has always kept them."""
    candidates = [
        {
            "id": c.id,
            "title": c.title or c.id,
            "codes": list(c.affected_codes),
            "saving": str(Decimal(str(c.claimed_saving_nok))),
            **({"decide_by": c.decide_by} if c.decide_by else {}),
        }
        for c in proposals.candidates
        if c.validated  # the page counts validated savings, as the run reports do
    ]
    outcome, frame = proposals.outcome, proposals.frame
    if outcome is None and frame is None:
        return json.dumps(candidates, ensure_ascii=False)
    kept: dict[str, object] = {"candidates": candidates}
    if outcome is not None:
        figures = (outcome.final_cost_nok, outcome.p50_nok, outcome.p85_nok)
        kept["outcome"] = dict(
            zip(("final", "p50", "p85"), (repr(v) for v in figures), strict=True)
        )
    if frame is not None:
        divergence = repr(frame.divergence) if frame.divergence is not None else None
        kept["frame"] = {"divergence": divergence, "incoherent": list(frame.incoherent)}
    return json.dumps(kept, ensure_ascii=False)


def read_lines(
    text: str, project_id: str, run_id: str
) -> tuple[list[PageCandidate], PageOutcome | None, PageFrame | None]:
    """What :func:`page_json` wrote: the candidates, the outcome of a finished project and what
    its frame flags (raises ``ValueError``, ``KeyError``, ``TypeError`` or ``ArithmeticError``
    for anything else)."""
    kept = json.loads(text)
    finished = kept.get("outcome") if isinstance(kept, dict) else None
    flagged = kept.get("frame") if isinstance(kept, dict) else None
    frame = (
        None
        if flagged is None
        else PageFrame(
            Decimal(str(flagged["divergence"])) if flagged["divergence"] is not None else None,
            tuple(str(item) for item in flagged["incoherent"]),
        )
    )
    entries = kept["candidates"] if isinstance(kept, dict) else kept
    candidates = [
        PageCandidate(
            project_id,
            run_id,
            str(entry["id"]),
            str(entry["title"]),
            tuple(str(code) for code in entry["codes"]),
            Decimal(str(entry["saving"])),
            str(entry["decide_by"]) if entry.get("decide_by") else None,
        )
        for entry in entries
    ]
    if finished is None:
        return candidates, None, frame
    figures = (Decimal(str(finished[k])) for k in ("final", "p50", "p85"))
    return candidates, PageOutcome(*figures), frame


def read_page(text: str, project_id: str, run_id: str) -> list[PageCandidate]:
    """The candidates :func:`page_json` kept."""
    return read_lines(text, project_id, run_id)[0]


def read_outcome(text: str) -> PageOutcome | None:
    """The outcome :func:`page_json` kept, if the project was finished."""
    return read_lines(text, "", "")[1]


def read_frame(text: str) -> PageFrame | None:
    """What the project's frame flags, as :func:`page_json` kept it."""
    return read_lines(text, "", "")[2]


@dataclass(frozen=True)
class PageVerdict:
    """An expert's word on a candidate, as the page counts it."""

    decision: str
    adjusted: Decimal | None = None
    """The saving the expert signed off, where it differs from the claim."""
    rate: Decimal | None = None
    """The realisation the expert expects (approved only; 1 when not said)."""

    @property
    def approves(self) -> bool:
        return self.decision in _APPROVED


RATE_FROM: Final = 5
"""Finished projects a back-test's rate rests on at least: below, the counts alone are said."""


@dataclass
class History:
    """The finished projects' outcomes against their frames, counted one change at a time."""

    finished: int = 0
    above_p85: int = 0
    above_p50: int = 0
    deviation: Fraction = Fraction(0)
    """The final costs' deviations from P50, as shares, added: exact, so taking one out undoes
    putting it in, in any order."""

    def add(self, outcome: PageOutcome, sign: int) -> None:
        self.finished += sign
        self.above_p85 += sign * (outcome.final > outcome.p85)
        self.above_p50 += sign * (outcome.final > outcome.p50)
        if outcome.p50:
            self.deviation += sign * Fraction(outcome.final - outcome.p50) / Fraction(outcome.p50)

    def section(self) -> list[str]:
        if not self.finished:
            return []
        n = self.finished
        judged = (
            "Each is judged against the P50 and P85 its project states, else its simulated frame's."
        )
        if n < RATE_FROM:
            return [
                "",
                "## Frames against outcomes",
                "",
                f"{n} finished project(s), {self.above_p85} of them above their P85 and "
                f"{self.above_p50} above their P50: too few to say how often a P85 is met (a "
                f"rate rests on {RATE_FROM} at least). {judged}",
            ]
        return [
            "",
            "## Frames against outcomes",
            "",
            f"{n} finished projects: **{self.above_p85} ({self.above_p85 / n:.0%}) ended above "
            f"their P85** (a P85 is met when at most 15 % do), {self.above_p50} "
            f"({self.above_p50 / n:.0%}) above their P50; the final cost stood "
            f"{float(self.deviation / n):+.1%} from P50 on average. {judged}",
        ]
