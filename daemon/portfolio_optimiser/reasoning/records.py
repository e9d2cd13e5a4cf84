"""The record kinds: what a caller authors (``*Input``) and what the writer stores.

The caller authors; the writer computes. A plan's input names only its assessment: the writer
computes the plan from the mode and the advisors' availability and stores the snapshot it used. A
conclusion's review (``reviewed_by``, ``independent_review_count``) is computed from the
consultations it cites, because a review count a caller can type is a review a caller can invent.
Every model is frozen and refuses unknown fields, so a misspelt field is an error, not a silence.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from .availability import AdvisorStatus, ConsultationStatus
from .modes import Mode
from .policy import Confidence, Materiality, PlanOutcome

__all__ = [
    "KIND_PREFIX",
    "AssessmentInput",
    "ConclusionInput",
    "ConsultationInput",
    "DisagreementInput",
    "Evidence",
    "EvidenceKind",
    "PlanInput",
    "Position",
    "RecordBody",
    "RecordInput",
    "ResolutionInput",
    "SnapshotState",
    "Stance",
    "StoredConclusion",
    "StoredPlan",
    "StoredRecord",
    "Usage",
    "ValidationInput",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EvidenceKind(StrEnum):
    FILE = "file"
    TEST = "test"
    RULE = "rule"
    RECORD = "record"
    DOCUMENT = "document"
    RUNTIME = "runtime"
    COMMAND = "command"
    VALIDATOR = "validator"
    """A receipt of the deterministic validator."""
    VERDICT = "verdict"
    """An expert's verdict file."""
    PRIOR_EXTERNAL_OPINION = "prior_external_opinion"
    """Another advisor's answer: an opinion handed on, never a fact."""


class Evidence(_Frozen):
    kind: EvidenceKind
    reference: str = Field(min_length=1)
    note: str | None = None


class Stance(StrEnum):
    SUPPORTS = "supports"
    OPPOSES = "opposes"
    ALTERNATIVE = "alternative"
    INCONCLUSIVE = "inconclusive"


class Usage(_Frozen):
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)


class AssessmentInput(_Frozen):
    kind: Literal["assessment"] = "assessment"
    subject: str = Field(min_length=1)
    materiality: Materiality = Materiality.LOW
    confidence: Confidence = Confidence.MEDIUM
    hypothesis: str = ""
    evidence: tuple[Evidence, ...] = ()
    capabilities: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()
    questions: tuple[str, ...] = ()
    new_evidence: bool = False
    """Declares evidence a standing conclusion on the same subject has not weighed."""


class PlanInput(_Frozen):
    kind: Literal["plan"] = "plan"
    assessment: str


class ConsultationInput(_Frozen):
    kind: Literal["consultation"] = "consultation"
    plan: str
    advisor: str
    status: ConsultationStatus
    question: str = ""
    stance: Stance | None = None
    conclusion: str | None = None
    assumptions: tuple[str, ...] = ()
    risks: tuple[str, ...] = ()
    falsifiers: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    confidence: Confidence | None = None
    usage: Usage = Usage()
    duration_ms: int | None = Field(default=None, ge=0)
    diagnostic: str | None = None
    retry_after_seconds: float | None = Field(default=None, ge=0)
    model: str | None = None
    """The model the advisor named in config (what was asked, not what the server claimed)."""
    reasons: tuple[str, ...] = ()
    """The advisor's reasons, normalised and bounded (a checker's critique): never the raw answer."""
    output_mode: str | None = None
    """How structured output was asked for in the exchange that answered (see ``negotiation``)."""
    refused: tuple[str, ...] = ()
    """Request forms the advisor refused in this exchange, as ``feature=value`` (remembered)."""
    server: str | None = Field(default=None, max_length=120)
    """The server's own name for its build, when it says one (``system_fingerprint``): a refusal
    recorded under another build than the advisor's newest is asked for again."""


class Position(_Frozen):
    source: str = Field(min_length=1)
    """``primary`` (the run's own hypothesis) or the id of a completed consultation."""
    position: str = Field(min_length=1)


class DisagreementInput(_Frozen):
    kind: Literal["disagreement"] = "disagreement"
    assessment: str
    positions: tuple[Position, ...]
    shared_assumptions: tuple[str, ...] = ()
    deciding_question: str = Field(min_length=1)
    experiment: str = ""


class ResolutionInput(_Frozen):
    kind: Literal["resolution"] = "resolution"
    disagreement: str
    experiment: str = Field(min_length=1)
    outcome: str = Field(min_length=1)
    favours: str = Field(min_length=1)
    """A position's source, or ``neither``."""
    evidence: tuple[Evidence, ...] = ()


class ConclusionInput(_Frozen):
    kind: Literal["conclusion"] = "conclusion"
    assessment: str
    decision: str = Field(min_length=1)
    rationale: str = ""
    evidence: tuple[Evidence, ...] = ()
    consultations: tuple[str, ...] = ()
    disagreements: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()
    """Alternatives weighed and rejected."""
    assumptions: tuple[str, ...] = ()
    risks: tuple[str, ...] = ()
    validation_plan: tuple[str, ...] = ()
    confidence: Confidence = Confidence.MEDIUM
    supersedes: str | None = None


class ValidationInput(_Frozen):
    kind: Literal["validation"] = "validation"
    conclusion: str
    check: str = Field(min_length=1)
    outcome: Literal["pass", "fail"]
    evidence: tuple[Evidence, ...] = ()
    command: str | None = None


RecordInput = Annotated[
    AssessmentInput
    | PlanInput
    | ConsultationInput
    | DisagreementInput
    | ResolutionInput
    | ConclusionInput
    | ValidationInput,
    Field(discriminator="kind"),
]


class SnapshotState(_Frozen):
    """One advisor's availability when the plan was made."""

    advisor: str
    adapter: str
    status: AdvisorStatus
    reason: str
    recovering: bool = False


class SelectedAdvisor(_Frozen):
    advisor: str
    adapter: str
    covers: tuple[str, ...]
    why: str


class ExcludedAdvisor(_Frozen):
    advisor: str
    reason: str


class StoredPlan(_Frozen):
    kind: Literal["plan"] = "plan"
    assessment: str
    outcome: PlanOutcome
    mode: Mode
    mode_source: str
    budget: int
    reason: str
    selected: tuple[SelectedAdvisor, ...] = ()
    excluded: tuple[ExcludedAdvisor, ...] = ()
    local_review: tuple[str, ...] = ()
    reuse: str | None = None
    uncovered: tuple[str, ...] = ()
    availability: tuple[SnapshotState, ...] = ()


class StoredConclusion(ConclusionInput):
    reviewed_by: tuple[str, ...] = ()
    independent_review_count: int = 0
    """Distinct adapters among the completed consultations it weighs: one source asked twice is one review."""


RecordBody = Annotated[
    AssessmentInput
    | StoredPlan
    | ConsultationInput
    | DisagreementInput
    | ResolutionInput
    | StoredConclusion
    | ValidationInput,
    Field(discriminator="kind"),
]

KIND_PREFIX = {
    "assessment": "as",
    "plan": "pl",
    "consultation": "cs",
    "disagreement": "di",
    "resolution": "rs",
    "conclusion": "cn",
    "validation": "va",
}


class StoredRecord(_Frozen):
    """The file on disk: an envelope around one record body."""

    schema_: Literal["portfolio-optimiser/reasoning-record"] = Field(
        default="portfolio-optimiser/reasoning-record", alias="schema"
    )
    version: Literal[1] = 1
    id: str
    task: str
    seq: int
    recorded_at: datetime
    redacted: tuple[str, ...] = ()
    """The kinds of text redaction removed before writing (never the values)."""
    body: RecordBody

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @property
    def kind(self) -> str:
        return self.body.kind
