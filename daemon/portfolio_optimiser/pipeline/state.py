"""The state of one run: its settings, its reasoning session, and the bookkeeping the proposer
and the review share. Nothing here calls a model."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from portfolio_optimiser.config import Config
from portfolio_optimiser.context.frame import DEFAULT_RULE, FrameRule
from portfolio_optimiser.context.models import Candidate, Project
from portfolio_optimiser.context.reference import ProjectReferences
from portfolio_optimiser.pipeline.precedent import Precedents, precedents
from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.negotiation import negotiated, refused_by
from portfolio_optimiser.reasoning.policy import Materiality
from portfolio_optimiser.reasoning.records import (
    StoredRecord,
)
from portfolio_optimiser.reasoning.store import Admission, Store
from portfolio_optimiser.reasoning.transport import AdvisorUnavailable

from .budget import TokenMeter
from .clients._errors import release
from .outbound import OutboundMiddleware, TermsHolder, default_cap_options
from .outcome import CandidateRun

__all__ = [
    "ClientFactory",
    "ReasoningSession",
    "RunSettings",
    "RunState",
    "adapter_errors",
    "adapter_module",
    "default_client_factory",
    "materiality_of",
]

ClientFactory = Callable[[Advisor, Sequence[Any]], Any]
"""(advisor, chat middleware) → a MAF chat client for that advisor."""


@dataclass(frozen=True)
class RunSettings:
    max_attempts: int
    max_rounds: int
    max_candidates: int
    run_timeout_s: float
    context_chars: int = 24_000
    review_capabilities: tuple[str, ...] = ("cost_review", "independent_reasoning")
    material_share: float = 0.005
    high_share: float = 0.02
    critical_share: float = 0.05
    consult_deadline_s: float = 120.0
    data_source: Mapping[str, Any] = field(default_factory=lambda: {"kind": "bundle"})
    propose_output_tokens: int = 2048
    check_output_tokens: int = 512
    refusal_memory_s: float = 168 * 3600.0
    frame: FrameRule = DEFAULT_RULE
    rerun_band: float = 0.05
    """``[reference] rerun_band``: what a report says its reference figures stand within."""

    @classmethod
    def from_config(cls, config: Config) -> RunSettings:
        shares = config.reasoning.materiality
        return cls(
            max_attempts=config.stop.max_attempts,
            max_rounds=config.stop.max_rounds,
            max_candidates=config.stop.max_candidates,
            run_timeout_s=config.stop.run_timeout_seconds,
            context_chars=config.context.budget_chars,
            review_capabilities=config.reasoning.review_capabilities,
            material_share=shares.material_share,
            high_share=shares.high_share,
            critical_share=shares.critical_share,
            data_source=config.data_source,
            propose_output_tokens=config.budget.propose_output_tokens,
            check_output_tokens=config.budget.check_output_tokens,
            refusal_memory_s=config.reasoning.refusal_memory_hours * 3600.0,
            frame=config.uncertainty.rule(),
            rerun_band=config.reference.rerun_band,
        )


@dataclass(frozen=True)
class ReasoningSession:
    store: Store
    ctx: Admission


def adapter_module(advisor: Advisor) -> ModuleType:
    """The module of the advisor's transport. Raises AdvisorUnavailable when it cannot be imported."""
    name = (
        advisor.module
        or f"portfolio_optimiser.pipeline.clients.{advisor.adapter.replace('-', '_')}"
    )
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise AdvisorUnavailable(
            advisor.id, f"adapter module {name} cannot be imported ({exc})"
        ) from None


def default_client_factory(advisor: Advisor, middleware: Sequence[Any]) -> Any:
    """The adapter module of the advisor's transport builds its chat client: config is the model map."""
    return adapter_module(advisor).chat_client_for(advisor, middleware=list(middleware))


def adapter_errors(advisor: Advisor) -> Any:
    """The adapter's own error table (``sdk_errors``), if it has one; loaded when needed."""
    try:
        return getattr(adapter_module(advisor), "sdk_errors", None)
    except AdvisorUnavailable:
        return None


def adapter_cap_options(advisor: Advisor) -> Any:
    try:
        return getattr(adapter_module(advisor), "cap_options", default_cap_options)
    except AdvisorUnavailable:
        return default_cap_options


def materiality_of(saving: float, project: Project, settings: RunSettings) -> Materiality:
    cost = project.cost_total_nok
    share = saving / cost if cost > 0 else 1.0
    if share >= settings.critical_share:
        return Materiality.CRITICAL
    if share >= settings.high_share:
        return Materiality.HIGH
    if share >= settings.material_share:
        return Materiality.MATERIAL
    return Materiality.LOW if share >= settings.material_share / 5 else Materiality.TRIVIAL


@dataclass
class RunState:
    """The mutable bookkeeping of one run; everything else is passed in."""

    project: Project
    bundle: Path
    run_id: str
    task: str
    settings: RunSettings
    reasoning: ReasoningSession
    meter: TokenMeter
    middleware: list[Any]
    client_factory: ClientFactory
    outcomes: list[CandidateRun] = field(default_factory=list)
    accepted: list[Candidate] = field(default_factory=list)
    declined: list[Candidate] = field(default_factory=list)
    """Candidates an expert rejected: not checked again, but shown in the report as rejected."""
    prompts: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    attempts: int = 0
    clients: dict[str, Any] = field(default_factory=dict)
    terms: dict[str, TermsHolder] = field(default_factory=dict)
    withheld: set[str] = field(default_factory=set)
    """Kinds of secret redaction withheld from what was sent to a model (never the values)."""
    proposer: str | None = None
    """The advisor whose proposal this run used: it also speaks for its candidates in a debate."""
    proposal_plan: str | None = None
    local_because: str | None = None
    """Why no model's proposal was used, when one was looked for."""
    references: ProjectReferences = field(default_factory=ProjectReferences)
    """The project's lines measured against the portfolio (one snapshot): a source of candidates
    and of evidence to check."""
    teaching: Precedents = field(default_factory=lambda: precedents(()))
    """What experts rejected twice, by codes and measure type."""
    portfolio: Mapping[str, Project] = field(default_factory=dict)
    """The ingested projects by id: the size an approval elsewhere was judged at."""

    async def arecord(self, draft: Any) -> StoredRecord:
        """Staged: durable with the batch the store commits next, and at the latest when the run
        ends (``commit``), before anything it publishes cites it."""
        return await self.reasoning.store.arecord(self.task, draft, self.reasoning.ctx)

    async def commit(self) -> None:
        """The run's records, durable: one flush for what the background has not committed."""
        await asyncio.to_thread(self.reasoning.store.commit)

    async def close_clients(self) -> None:
        """Close the SDK clients this run opened: a daemon runs for months, sockets must not pile up."""
        for client in self.clients.values():
            await release(client)
        self.clients.clear()

    def terms_for(self, advisor: Advisor) -> TermsHolder:
        """The advisor's terms for this run, opened from what its recorded consultations refused
        within the refusal memory."""
        if advisor.id not in self.terms:
            since = self.reasoning.ctx.current() - timedelta(seconds=self.settings.refusal_memory_s)
            evidence = self.reasoning.store.load().refusal_evidence(advisor.id)
            refused = refused_by(evidence, advisor.id, since=since)
            self.terms[advisor.id] = TermsHolder(negotiated(advisor, refused))
        return self.terms[advisor.id]

    def client(self, advisor: Advisor) -> Any:
        """One chat client per advisor per run: building one costs more than a model call's overhead.

        Its middleware: the outbound guard first (redaction, output cap), then the budget guard,
        which so prices what is really sent.
        """
        if advisor.id not in self.clients:
            outbound = OutboundMiddleware(
                advisor_id=advisor.id,
                terms=self.terms_for(advisor),
                call_tokens=self.meter.budget.call_tokens,
                withheld=self.withheld,
                cap_options=adapter_cap_options(advisor),
            )
            self.clients[advisor.id] = self.client_factory(advisor, [outbound, *self.middleware])
        return self.clients[advisor.id]
