"""The portfolio page's lines: a validated candidate of a project's latest run and an expert's
verdict on it, as the page counts them, and the compact form the ledger keeps beside each run
(``page_json``) so that the page is built from the ledger, not by reading every run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from .proposals import Proposals

__all__ = ["PageCandidate", "PageVerdict", "page_json", "read_page"]

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


def page_json(proposals: Proposals) -> str:
    """A run's candidates as the page counts them (the validated ones, in its order), as the
    ledger keeps them beside the run: the page is built from these, not by reading every run."""
    return json.dumps(
        [
            {
                "id": c.id,
                "title": c.title or c.id,
                "codes": list(c.affected_codes),
                "saving": str(Decimal(str(c.claimed_saving_nok))),
                **({"decide_by": c.decide_by} if c.decide_by else {}),
            }
            for c in proposals.candidates
            if c.validated  # the page counts validated savings, as the run reports do
        ],
        ensure_ascii=False,
    )


def read_page(text: str, project_id: str, run_id: str) -> list[PageCandidate]:
    """What :func:`page_json` wrote (raises ``ValueError``, ``KeyError`` or ``TypeError`` for
    anything else)."""
    return [
        PageCandidate(
            project_id,
            run_id,
            str(entry["id"]),
            str(entry["title"]),
            tuple(str(code) for code in entry["codes"]),
            Decimal(str(entry["saving"])),
            str(entry["decide_by"]) if entry.get("decide_by") else None,
        )
        for entry in json.loads(text)
    ]


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
