"""The typed result of one project run, as ``run_project`` returns it and the outputs are written from."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from portfolio_optimiser.context import standing
from portfolio_optimiser.context.changes import LineChange
from portfolio_optimiser.context.decisions import Decision
from portfolio_optimiser.context.frame import Backtest, Frame
from portfolio_optimiser.context.models import Candidate
from portfolio_optimiser.context.priced_request import PricedRequest
from portfolio_optimiser.context.reference import LineReference
from portfolio_optimiser.context.tender import Coverage

from .checker import CheckerOutcome

__all__ = ["CandidateRun", "RunResult", "StopReason"]

StopReason = Literal[
    "proposer_done",
    "proposer_failed",
    "max_attempts",
    "max_candidates",
    "local_rules",
    "no_candidates",
    "timeout",
]


class CandidateRun(BaseModel):
    model_config = ConfigDict(frozen=True)

    candidate: Candidate
    validator: Decision
    """The deterministic validator's decision, and only the validator's."""
    checker: CheckerOutcome
    """The maker-checker outcome, kept apart from the validator's decision."""
    attempt: int
    materiality: str
    assessment: str | None = None
    plan_outcome: str | None = None
    conclusion: str | None = None
    disagreement: str | None = None
    precedent: str | None = None
    """Experts rejected this measure type on these codes twice: who, when, why (report only)."""

    @property
    def awaits_verdict(self) -> bool:
        """An expert's verdict is asked on it (:func:`standing.awaits_verdict`)."""
        return standing.awaits_verdict(self.validator.outcome)

    @property
    def validated(self) -> bool:
        """Its saving counts as validated (:func:`standing.validated`)."""
        return standing.validated(self.validator.outcome, self.checker.outcome)

    @property
    def blocked(self) -> bool:
        """Rejected by the validator or blocked by the checker: its saving does not count."""
        return not self.validated


class LineFacts(BaseModel):
    """A cost line a candidate touches, as the report shows it beside the saving."""

    model_config = ConfigDict(frozen=True)
    title: str
    amount_nok: float | int
    quantity: float | int | None = None
    unit: str | None = None
    unit_price_nok: float | int | None = None


class Decided(BaseModel):
    """An expert's standing verdict on a candidate: it is shown, never asked for again."""

    model_config = ConfigDict(frozen=True)
    decision: str
    reviewer: str
    decided_at: str | None = None
    adjusted_saving_nok: float | int | None = None
    rationale: str = ""
    candidate_id: str = ""
    """The candidate the verdict was written on."""
    project_id: str | None = None
    signed_with: str | None = None
    """The fingerprint of the SSH key that proved the reviewer; None: the verdict was unsigned."""


class RunResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    project_id: str
    run_id: str
    task: str
    ran_locally: bool
    proposer: str | None
    """The advisor whose proposal the run used; None when no model's proposal was used."""
    candidates: tuple[CandidateRun, ...]
    stop_reason: StopReason
    budget_stop: str | None = None
    """Set when a budget cap ended the run; never folded into stop_reason."""
    tokens: dict[str, int] = Field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0})
    attempts: int = 0
    hypothesis_prompts: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    local_because: str | None = None
    """Why the run used no model's proposal although it looked for one."""
    withheld: tuple[str, ...] = ()
    """Kinds of secret withheld from what was sent to models (never the values)."""
    references: dict[str, LineReference] = Field(default_factory=dict)
    """Each reference-price candidate's reference: what its line was measured against."""
    reference_version: str = ""
    """The version of the portfolio's reference fit the run was measured against (``""``: none,
    a run outside the daemon)."""
    learned: str = ""
    """The block of what experts taught that the hypothesis prompt carried ("" when nothing)."""
    changes: tuple[LineChange, ...] | None = None
    """What this version changed against the project's last ingested one; None for a first."""
    lines: dict[str, LineFacts] = Field(default_factory=dict)
    """The cost lines the candidates touch, by code."""
    base_estimate_nok: float | int | None = None
    decided: dict[str, Decided] = Field(default_factory=dict)
    """The candidates experts have already decided, by id: no template, no second request."""
    learned_from: dict[str, Decided] = Field(default_factory=dict)
    """A learned candidate's source: the verdict it carries (who approved what, where, when)."""
    declined: tuple[Candidate, ...] = ()
    """Candidates an expert rejected, not checked again: the report keeps them, marked."""
    backtest: Backtest | None = None
    """A finished project's final cost against its frames."""
    frame: Frame | None = None
    """The uncertainty frame (P50, P85, each candidate's effect on them), for a project whose
    lines carry triple estimates."""
    none_because: tuple[str, ...] = ()
    """Why no candidate was found, one sentence per source of them (``why_none``)."""
    tender: Coverage | None = None
    """A tender's posts as far as the portfolio could compare them (``context.tender``)."""
    priced: PricedRequest | None = None
    """A price request priced from the portfolio (``context.priced_request``)."""
    sources: dict[str, str] = Field(default_factory=dict)
    """Where each line a candidate touches stands in the planner's own file, for an imported
    estimate: code → ``kalkyle.xlsx, sheet 'Bygg', row 14``."""
