"""Rejections teach: a measure type experts rejected twice on the same codes.

Decides, from the learning store alone: which (codes, measure type) pairs experts have rejected on
two or more candidates, and the precedent that names them — who, when, why. The learned rules and
a model no longer propose such a measure there (the run says so in its notes); a planner's own
item, or a reference price, is still checked, and carries the precedent into the report. The
precedent never enters a candidate's rationale, which the checker sees: what experts said reaches
a prompt only through the fold.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from portfolio_optimiser._text import strip_control
from portfolio_optimiser.context.models import Candidate

__all__ = ["REJECTIONS_TO_TEACH", "Precedents", "precedents"]

REJECTIONS_TO_TEACH: Final = 2
_WHY_CHARS: Final = 160

Key = tuple[frozenset[str], str]


def _key(codes: Iterable[str], measure_type: str) -> Key:
    return frozenset(codes), measure_type


def _why(rationale: str) -> str:
    text = " ".join(strip_control(rationale).split())
    first = text.split(". ", 1)[0].rstrip(".")
    return first if len(first) <= _WHY_CHARS else first[: _WHY_CHARS - 1] + "…"


class Precedents:
    """The rejections of a learning store, by (codes, measure type)."""

    def __init__(self, rejected: dict[Key, list[Any]]) -> None:
        self._rejected = rejected

    def of(self, candidate: Candidate) -> str | None:
        """The precedent against this candidate's measure, when experts rejected it twice."""
        found = self._rejected.get(_key(candidate.affected_codes, candidate.measure_type), [])
        if len(found) < REJECTIONS_TO_TEACH:
            return None
        said = "; ".join(
            f"{v.reviewer}{' on ' + v.decided_at[:10] if v.decided_at else ''}: {_why(v.rationale)}"
            for v in found
        )
        return (
            f"experts rejected {candidate.measure_type} on {', '.join(sorted(candidate.affected_codes))} "
            f"{len(found)} times ({said})"
        )

    def taught(self) -> list[tuple[list[str], str]]:
        """The measures experts rejected often enough to gate them: (codes, type) each, sorted."""
        return sorted(
            (sorted(codes), measure_type)
            for (codes, measure_type), found in self._rejected.items()
            if len(found) >= REJECTIONS_TO_TEACH
        )


def precedents(verdicts: Iterable[Any]) -> Precedents:
    """Group the rejected verdicts (one per candidate) by what they rejected, oldest first."""
    rejected: dict[Key, list[Any]] = {}
    for verdict in sorted(verdicts, key=lambda v: (v.decided_at or "", v.candidate_id)):
        key = verdict.key
        if verdict.approves or not key.affected_codes or not key.measure_type:
            continue
        rejected.setdefault(_key(key.affected_codes, key.measure_type), []).append(verdict)
    return Precedents(rejected)
