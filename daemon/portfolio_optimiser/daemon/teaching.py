"""What the experts' verdicts teach every project's version at one moment (``portfolio`` says
what a version is): the approvals carried, the precedents that gate them, and the projects the
approvals were judged in — as one digest, and as the part of it that can reach a project of
given cost codes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from portfolio_optimiser.context.models import Project
from portfolio_optimiser.learning import LearnedVerdict, VerdictStore
from portfolio_optimiser.pipeline.precedent import Precedents, precedents

from .reference_fit import Looked

if TYPE_CHECKING:  # the portfolio builds on its teaching; typing only
    from .portfolio import Portfolio

__all__ = ["Teaching"]


@dataclass(frozen=True)
class Teaching:
    """What the experts' verdicts give every project's version at one moment: the approvals to
    carry, the precedents that gate them (taken once for a look at the whole portfolio), and the
    projects the approvals were judged in (what an approval's saving is carried from)."""

    approved: list[LearnedVerdict]
    precedents: Precedents
    sources: Mapping[str, Project]
    digest: str
    """Everything above that a version depends on, as one digest."""
    contents: tuple[tuple[str, str], ...] = ()
    """The (project id, content hash) of each project an approval was judged in."""
    _for: dict[frozenset[str], str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(
        cls, verdicts: VerdictStore, portfolio: Portfolio, looked: Looked | None = None
    ) -> Teaching:
        approved = verdicts.approved()
        gates = precedents(verdicts.verdicts())
        sources, contents = portfolio.sources((v.key.project_id or "" for v in approved), looked)
        h = hashlib.sha256(repr((_said_of(approved), gates.taught(), contents)).encode())
        return cls(approved, gates, sources, h.hexdigest()[:16], tuple(contents))

    def digest_for(self, codes: frozenset[str]) -> str:
        """What of the teaching can reach a project of these cost codes, as one digest: the
        approvals on codes it has (an approval is carried only to a project with all of its
        codes), the projects those were judged in, and the precedents on codes it has (they gate
        only what is carried). A project's own part moves only when this does, so one approval
        does not have every project's bundle read again."""
        found = self._for.get(codes)
        if found is None:
            reach = [v for v in self.approved if set(v.key.affected_codes or ()) <= codes]
            judged_in = {v.key.project_id for v in reach}
            said = repr(
                (
                    _said_of(reach),
                    [g for g in self.precedents.taught() if set(g[0]) <= codes],
                    [(pid, c) for pid, c in self.contents if pid in judged_in],
                )
            )
            found = self._for[codes] = hashlib.sha256(said.encode()).hexdigest()[:16]
        return found


def _said_of(approved: Iterable[LearnedVerdict]) -> list[str]:
    return sorted(
        repr((v.candidate_id, v.key, v.adjusted_saving_nok, v.realization_rate)) for v in approved
    )
