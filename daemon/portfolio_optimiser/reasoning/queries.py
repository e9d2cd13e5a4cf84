"""What the records say, read back: the queries admission and reporting share.

Pure functions over what ``Store.load`` returned (``Loaded``): no file is read or written here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from portfolio_optimiser.errors import UserError

from .availability import AvailabilityInputs, Outcome, derive_availability
from .catalogue import Catalogue, Presence
from .modes import ModeResolution
from .records import (
    AssessmentInput,
    ConsultationInput,
    DisagreementInput,
    ResolutionInput,
    StoredConclusion,
    StoredPlan,
    StoredRecord,
)

__all__ = [
    "Admission",
    "Loaded",
    "Refusal",
    "availability_now",
    "consultations_of",
    "history",
    "normalise_subject",
    "open_disagreements",
    "refuse",
    "resolutions_of",
    "standing_conclusion",
]


class Refusal(UserError):
    """One sentence a caller can act on; ``str(refusal)`` is that sentence."""


def refuse(sentence: str) -> Refusal:
    return Refusal(sentence)


def normalise_subject(subject: str) -> str:
    return " ".join(subject.split()).casefold()


@dataclass(frozen=True)
class Loaded:
    """Every readable record of the store, in order, and the files that are not readable."""

    records: tuple[StoredRecord, ...] = ()
    unreadable: tuple[tuple[str, str], ...] = ()

    def by_id(self, record_id: str) -> StoredRecord | None:
        return next((r for r in self.records if r.id == record_id), None)

    def of_task(self, task: str) -> list[StoredRecord]:
        return [r for r in self.records if r.task == task]

    def of_kind(self, kind: str) -> list[StoredRecord]:
        return [r for r in self.records if r.kind == kind]


@dataclass(frozen=True)
class Admission:
    """What admission may consult besides the records: the catalogue and the machine's state."""

    catalogue: Catalogue
    mode: ModeResolution
    now: datetime
    presence: Presence = field(default_factory=Presence)
    disabled: frozenset[str] = frozenset()
    cooldown_override_s: float | None = None
    clock: Callable[[], datetime] | None = None
    """The wall clock of a long-lived process; without one, ``now`` stands for every moment."""

    def current(self) -> datetime:
        return self.clock() if self.clock is not None else self.now


def history(loaded: Loaded) -> list[Outcome]:
    """The consultation outcomes the breaker reads, from the records alone."""
    outcomes = []
    for order, record in enumerate(loaded.of_kind("consultation")):
        body = record.body
        assert isinstance(body, ConsultationInput)
        outcomes.append(
            Outcome(body.advisor, body.status, record.recorded_at, body.retry_after_seconds, order)
        )
    return outcomes


def availability_now(loaded: Loaded, ctx: Admission) -> list[Any]:
    return derive_availability(
        ctx.catalogue,
        AvailabilityInputs(
            mode=ctx.mode.mode,
            now=ctx.current(),
            history=history(loaded),
            presence=ctx.presence,
            disabled=ctx.disabled,
            cooldown_override_s=ctx.cooldown_override_s,
        ),
    )


def standing_conclusion(loaded: Loaded, subject: str) -> StoredRecord | None:
    """The newest conclusion on this subject that no later conclusion supersedes."""
    wanted = normalise_subject(subject)
    superseded = {
        r.body.supersedes
        for r in loaded.of_kind("conclusion")
        if isinstance(r.body, StoredConclusion) and r.body.supersedes
    }
    standing = None
    for record in loaded.of_kind("conclusion"):
        assessment = (
            loaded.by_id(record.body.assessment)
            if isinstance(record.body, StoredConclusion)
            else None
        )
        if (
            assessment is not None
            and isinstance(assessment.body, AssessmentInput)
            and normalise_subject(assessment.body.subject) == wanted
            and record.id not in superseded
        ):
            standing = record
    return standing


def consultations_of(loaded: Loaded, assessment_id: str) -> list[StoredRecord]:
    plans = {
        r.id
        for r in loaded.of_kind("plan")
        if isinstance(r.body, StoredPlan) and r.body.assessment == assessment_id
    }
    return [
        r
        for r in loaded.of_kind("consultation")
        if isinstance(r.body, ConsultationInput) and r.body.plan in plans
    ]


def resolutions_of(loaded: Loaded, disagreement_id: str) -> list[StoredRecord]:
    return [
        r
        for r in loaded.of_kind("resolution")
        if isinstance(r.body, ResolutionInput) and r.body.disagreement == disagreement_id
    ]


def open_disagreements(loaded: Loaded, assessment_id: str) -> list[StoredRecord]:
    return [
        r
        for r in loaded.of_kind("disagreement")
        if isinstance(r.body, DisagreementInput)
        and r.body.assessment == assessment_id
        and not resolutions_of(loaded, r.id)
    ]
