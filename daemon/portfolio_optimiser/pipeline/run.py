"""One project run, steps 1–8 of DESIGN §4, bounded by stop criteria and budgets.

Decides: the candidates of one run and what each falsifier said of them. Navigates the bundle into
a bounded context, folds in what experts taught (the only path for verdicts), proposes (a model
with tools and structured output, or the local rules when no advisor can propose), gates every
candidate through the deterministic validator with informed, bounded refinement, has the selected
checker advisors debate each valid candidate, and records each candidate as an assessment, a plan,
consultations and a conclusion. It never writes outputs (the daemon does) and never decides by vote.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_framework import Agent
from pydantic import BaseModel, Field, ValidationError

from portfolio_optimiser.config import Config
from portfolio_optimiser.context.decisions import Accepted, Decision
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.models import Candidate, Project
from portfolio_optimiser.context.navigate import navigate_bundle
from portfolio_optimiser.context.render import render_context
from portfolio_optimiser.context.validator import validate_candidate
from portfolio_optimiser.learning.insights import fold
from portfolio_optimiser.learning.verdict_store import VerdictStore
from portfolio_optimiser.reasoning.availability import ConsultationStatus
from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.policy import Materiality, PlanOutcome
from portfolio_optimiser.reasoning.records import (
    AssessmentInput,
    ConclusionInput,
    ConsultationInput,
    DisagreementInput,
    Evidence,
    EvidenceKind,
    PlanInput,
    Position,
    Stance,
    StoredConclusion,
    StoredPlan,
    StoredRecord,
    Usage,
    ValidationInput,
)
from portfolio_optimiser.reasoning.store import Admission, Store, availability_now
from portfolio_optimiser.reasoning.transport import AdvisorError, AdvisorTimeout, EmptyAnswer

from .budget import Budget, BudgetExceeded, BudgetMiddleware, PortfolioMeter, TokenMeter
from .checker import CheckerOutcome, ask_checker
from .clients.scripted import ScriptedChatClient
from .datasource import DataSource, datasource_tools
from .local import local_candidates, local_review
from .outcome import CandidateRun, RunResult, StopReason
from .prompts import PROPOSER_INSTRUCTIONS, checker_task, hypothesis_prompt

__all__ = [
    "ClientFactory",
    "ReasoningSession",
    "RunSettings",
    "default_client_factory",
    "materiality_of",
    "run_project",
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
        )


@dataclass(frozen=True)
class ReasoningSession:
    store: Store
    ctx: Admission


def default_client_factory(advisor: Advisor, middleware: Sequence[Any]) -> Any:
    """The adapter module of the advisor's transport builds its chat client: config is the model map."""
    module = importlib.import_module(
        advisor.module
        or f"portfolio_optimiser.pipeline.clients.{advisor.adapter.replace('-', '_')}"
    )
    return module.chat_client_for(advisor, middleware=list(middleware))


class ProposedMeasure(BaseModel):
    title: str
    affected_codes: list[str]
    measure_type: str
    claimed_saving_nok: int | float
    quantity: int | float | None = None
    unit: str | None = None
    unit_price_nok: int | float | None = None
    rationale: str = ""
    evidence: list[str] = Field(default_factory=list)


class Proposal(BaseModel):
    candidates: list[ProposedMeasure]


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


def _first_able(states: Sequence[Any], capability: str) -> str | None:
    return next((s.advisor for s in states if s.available and capability in s.capabilities), None)


@dataclass
class _Run:
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
    prompts: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    attempts: int = 0
    proposer_client: Any = None
    clients: dict[str, Any] = field(default_factory=dict)

    def record(self, draft: Any) -> StoredRecord:
        return self.reasoning.store.record(self.task, draft, self.reasoning.ctx)

    async def arecord(self, draft: Any) -> StoredRecord:
        # Off the event loop: a record is fsync'd twice, and concurrent runs should not wait on it.
        return await asyncio.to_thread(self.record, draft)

    def client(self, advisor: Advisor) -> Any:
        """One chat client per advisor per run: building one costs more than a model call's overhead."""
        if advisor.id not in self.clients:
            self.clients[advisor.id] = self.client_factory(advisor, self.middleware)
        return self.clients[advisor.id]


async def run_project(
    bundle: Path,
    *,
    verdicts: VerdictStore,
    budget: Budget,
    settings: RunSettings,
    reasoning: ReasoningSession,
    run_id: str,
    portfolio_meter: PortfolioMeter | None = None,
    client_factory: ClientFactory = default_client_factory,
) -> RunResult:
    """Run one project. Raises only for a bundle that cannot be read (``BundleError``)."""
    project = load_ir_projections(bundle)
    navigation = navigate_bundle(bundle)
    context = render_context(navigation, budget_chars=settings.context_chars)
    meter = TokenMeter(budget)
    run = _Run(
        project=project,
        bundle=bundle,
        run_id=run_id,
        task=f"{project.id}--{run_id}",
        settings=settings,
        reasoning=reasoning,
        meter=meter,
        middleware=[BudgetMiddleware(meter, portfolio_meter)],
        client_factory=client_factory,
    )
    learned = fold(verdicts, project)
    states = availability_now(reasoning.store.load(), reasoning.ctx)
    proposer_id = _first_able(states, "propose")
    stop: StopReason = "no_candidates"
    budget_stop: str | None = None
    try:
        async with asyncio.timeout(settings.run_timeout_s):
            if proposer_id is not None:
                stop = await _propose_with_model(run, proposer_id, context, learned)
            else:
                run.prompts.append(
                    hypothesis_prompt(
                        context=context, fold=learned, max_candidates=settings.max_candidates
                    )
                )
                stop = _propose_locally(run, verdicts)
            for outcome_index in range(len(run.outcomes)):
                run.outcomes[outcome_index] = await _review(run, run.outcomes[outcome_index])
    except BudgetExceeded as exc:
        budget_stop = exc.which
    except TimeoutError:
        stop = "timeout"
    return RunResult(
        project_id=project.id,
        run_id=run_id,
        task=run.task,
        ran_locally=proposer_id is None and not any(c.checker.advisors for c in run.outcomes),
        proposer=proposer_id,
        candidates=tuple(run.outcomes),
        stop_reason=stop,
        budget_stop=budget_stop,
        tokens={"input_tokens": meter.input_tokens, "output_tokens": meter.output_tokens},
        attempts=run.attempts,
        hypothesis_prompts=tuple(run.prompts),
        models=tuple(dict.fromkeys(run.models)),
        notes=tuple(run.notes),
    )


def _gate(run: _Run, candidate: Candidate, attempt: int) -> Decision:
    decision = validate_candidate(candidate, run.project, accepted=run.accepted)
    if isinstance(decision, Accepted):
        run.accepted.append(candidate)
    materiality = materiality_of(float(candidate.claimed_saving_nok), run.project, run.settings)
    run.outcomes.append(
        CandidateRun(
            candidate=candidate,
            validator=decision,
            checker=CheckerOutcome(outcome="not_run"),
            attempt=attempt,
            materiality=str(materiality),
        )
    )
    return decision


def _propose_locally(run: _Run, verdicts: VerdictStore) -> StopReason:
    run.attempts = 1
    for candidate in local_candidates(run.project, verdicts.approved())[
        : run.settings.max_candidates
    ]:
        _gate(run, candidate, attempt=1)
    return "local_rules" if run.outcomes else "no_candidates"


async def _propose_with_model(
    run: _Run, proposer_id: str, context: str, learned: str
) -> StopReason:
    advisor = run.reasoning.ctx.catalogue.get(proposer_id)
    assert advisor is not None
    client = run.client(advisor)
    run.proposer_client = client
    run.models.append(advisor.model)
    source = DataSource.from_config(run.settings.data_source, root=run.bundle, project=run.project)
    agent = Agent(
        client=client,
        name="proposer",
        instructions=PROPOSER_INSTRUCTIONS,
        tools=datasource_tools(source),
    )
    prior_rejection: str | None = None
    for attempt in range(1, run.settings.max_attempts + 1):
        run.meter.tick_round()
        run.attempts = attempt
        room = run.settings.max_candidates - len(run.accepted)
        prompt = hypothesis_prompt(
            context=context, fold=learned, max_candidates=room, prior_rejection=prior_rejection
        )
        run.prompts.append(prompt)
        try:
            response = await agent.run(prompt, options={"response_format": Proposal})
            proposal = response.value
        except (ValidationError, ValueError) as exc:
            run.notes.append(
                f"attempt {attempt}: the proposer's answer was not a proposal ({type(exc).__name__})"
            )
            prior_rejection = (
                "your answer did not match the proposal format; answer with the candidates only"
            )
            continue
        if not isinstance(proposal, Proposal) or not proposal.candidates:
            return "proposer_done" if run.outcomes else "no_candidates"
        prior_rejection = None
        for measure in proposal.candidates[:room]:
            try:
                candidate = _candidate(run.project, measure)
            except ValidationError:
                prior_rejection = f"'{measure.title}': its figures are not finite numbers"
                continue
            decision = _gate(run, candidate, attempt)
            if not isinstance(decision, Accepted):
                # Only the latest reason is carried, never the rejected proposal itself.
                prior_rejection = (
                    f"'{candidate.title}' was rejected by rule {decision.rule}: {decision.reason}"
                )
        if len(run.accepted) >= run.settings.max_candidates:
            return "max_candidates"
        if prior_rejection is None:
            return "proposer_done"
    return "max_attempts"


def _candidate(project: Project, measure: ProposedMeasure) -> Candidate:
    return Candidate(
        project_id=project.id,
        affected_codes=tuple(measure.affected_codes),
        measure_type=measure.measure_type,
        claimed_saving_nok=measure.claimed_saving_nok,
        title=measure.title,
        rationale=measure.rationale,
        evidence=tuple(measure.evidence),
        quantity=measure.quantity,
        unit=measure.unit,
        unit_price_nok=measure.unit_price_nok,
        origin="proposer",
    )


def _receipt_evidence(candidate: Candidate, decision: Decision) -> list[Evidence]:
    failed = [c for c in decision.receipt.checks if c.outcome == "failed"]
    note = "all rules passed" if not failed else f"{failed[0].rule}: {failed[0].detail}"
    evidence = [
        Evidence(kind=EvidenceKind.VALIDATOR, reference=f"receipt:{candidate.id}", note=note)
    ]
    evidence += [Evidence(kind=EvidenceKind.FILE, reference=link) for link in candidate.evidence]
    return evidence


def _subject(run: _Run, candidate: Candidate) -> str:
    return f"candidate {candidate.id} of {run.project.id}"


async def _review(run: _Run, outcome: CandidateRun) -> CandidateRun:
    candidate, decision = outcome.candidate, outcome.validator
    evidence = _receipt_evidence(candidate, decision)
    hypothesis = f"'{candidate.title}' saves {candidate.saving_literal} NOK on {', '.join(candidate.affected_codes)}"
    if not isinstance(decision, Accepted):
        # The validator decided deterministically: record it, ask nobody.
        assessment = await run.arecord(
            AssessmentInput(
                # A per-run fact, not a standing question: its subject names the run and the attempt.
                subject=f"{_subject(run, candidate)} rejected in run {run.run_id}, attempt {outcome.attempt}",
                materiality=Materiality.TRIVIAL,
                hypothesis=hypothesis,
                evidence=tuple(evidence),
                new_evidence=False,
            )
        )
        conclusion = await run.arecord(
            ConclusionInput(
                assessment=assessment.id,
                decision=f"reject; validator rule {decision.rule}",
                rationale=decision.reason,
                evidence=tuple(evidence),
                rejected=("keep the candidate as proposed",),
            )
        )
        await run.arecord(
            ValidationInput(
                conclusion=conclusion.id,
                check="deterministic validator",
                outcome="fail",
                evidence=(evidence[0],),
            )
        )
        return outcome.model_copy(update={"assessment": assessment.id, "conclusion": conclusion.id})

    assessment = await run.arecord(
        AssessmentInput(
            subject=_subject(run, candidate),
            materiality=Materiality(outcome.materiality),
            hypothesis=hypothesis,
            evidence=tuple(evidence),
            capabilities=run.settings.review_capabilities,
        )
    )
    plan = await run.arecord(PlanInput(assessment=assessment.id))
    stored = plan.body
    assert isinstance(stored, StoredPlan)
    update: dict[str, Any] = {"assessment": assessment.id, "plan_outcome": str(stored.outcome)}
    if stored.outcome is PlanOutcome.REUSE_PRIOR:
        prior = run.reasoning.store.load().by_id(stored.reuse or "")
        word = (
            _checker_word(prior.body.decision)
            if prior is not None and isinstance(prior.body, StoredConclusion)
            else "not_run"
        )
        return outcome.model_copy(
            update={
                **update,
                "conclusion": stored.reuse,
                "checker": CheckerOutcome(outcome=word, reason="reused the standing conclusion"),
            }
        )
    if stored.outcome is PlanOutcome.CONSULT:
        return await _consult(run, outcome, assessment, plan, evidence, hypothesis, update)
    conclusion = await _conclude_locally(
        run, candidate, decision, assessment, evidence, consultations=()
    )
    return outcome.model_copy(update={**update, "conclusion": conclusion.id})


def _checker_word(decision: str) -> Any:
    for word in ("approved", "no_verdict", "not_run"):
        if f"checker {word}" in decision:
            return word
    return "not_run"


async def _conclude_locally(
    run: _Run,
    candidate: Candidate,
    decision: Decision,
    assessment: StoredRecord,
    evidence: list[Evidence],
    consultations: Sequence[str],
) -> StoredRecord:
    review = local_review(candidate, decision)
    conclusion = await run.arecord(
        ConclusionInput(
            assessment=assessment.id,
            decision="accept for expert review; checker not_run",
            rationale=(
                f"Structured local review. Hypothesis: {review['hypothesis']}. Strongest alternative: "
                f"{review['alternative']}. Falsifier: {review['falsifier']}. Experiment: {review['experiment']}."
            ),
            evidence=tuple(evidence),
            consultations=tuple(consultations),
            rejected=(review["alternative"],),
            assumptions=tuple(review["assumptions"]),
            risks=(
                "realisation below the claimed saving",
                "the decision point passes before the expert decides",
            ),
            validation_plan=(
                f"the expert's verdict on {candidate.id}",
                "the validator recomputes the figures on every run",
            ),
        )
    )
    await run.arecord(
        ValidationInput(
            conclusion=conclusion.id,
            check="deterministic validator",
            outcome="pass",
            evidence=(evidence[0],),
        )
    )
    return conclusion


async def _consult(
    run: _Run,
    outcome: CandidateRun,
    assessment: StoredRecord,
    plan: StoredRecord,
    evidence: list[Evidence],
    hypothesis: str,
    update: dict[str, Any],
) -> CandidateRun:
    stored = plan.body
    assert isinstance(stored, StoredPlan)
    candidate = outcome.candidate
    receipt = "\n".join(
        f"- {c.rule}: {c.outcome} — {c.detail}" for c in outcome.validator.receipt.checks
    )
    summary = (
        f"Candidate {candidate.id}: {candidate.title}\nCodes: {', '.join(candidate.affected_codes)}; "
        f"measure type {candidate.measure_type}; claimed saving {candidate.saving_literal} NOK\n"
        f"Rationale: {candidate.rationale}\nEvidence: {', '.join(candidate.evidence)}"
    )
    task = checker_task(candidate_summary=summary, receipt_summary=receipt)
    maker = run.proposer_client or ScriptedChatClient(
        handler=lambda _m, _o: summary, middleware=run.middleware
    )
    records: list[StoredRecord] = []
    for selected in stored.selected:  # plan order
        advisor = run.reasoning.ctx.catalogue.get(selected.advisor)
        records.append(await _one_checker(run, plan, advisor, selected.advisor, maker, task))
    completed = [
        r
        for r in records
        if isinstance(r.body, ConsultationInput) and r.body.status is ConsultationStatus.COMPLETED
    ]
    opposing = [
        r
        for r in completed
        if isinstance(r.body, ConsultationInput) and r.body.stance is Stance.OPPOSES
    ]
    advisors = tuple(r.body.advisor for r in completed if isinstance(r.body, ConsultationInput))
    if opposing:
        first = opposing[0].body
        assert isinstance(first, ConsultationInput)
        disagreement = await run.arecord(
            DisagreementInput(
                assessment=assessment.id,
                positions=(
                    Position(source="primary", position=hypothesis),
                    *(
                        Position(source=r.id, position=r.body.conclusion or "rejects")
                        for r in opposing
                        if isinstance(r.body, ConsultationInput)
                    ),
                ),
                deciding_question=f"Does the saving hold once this objection is weighed: {first.conclusion}?",
                experiment=f"the expert's verdict on candidate {candidate.id}",
            )
        )
        checker = CheckerOutcome(outcome="rejected", reason=first.conclusion, advisors=advisors)
        return outcome.model_copy(
            update={**update, "checker": checker, "disagreement": disagreement.id}
        )
    if not completed:
        conclusion = await _conclude_locally(
            run, candidate, outcome.validator, assessment, evidence, consultations=()
        )
        run.notes.append(f"{candidate.id}: no checker answered; reviewed locally")
        return outcome.model_copy(update={**update, "conclusion": conclusion.id})
    approving = any(
        isinstance(r.body, ConsultationInput) and r.body.stance is Stance.SUPPORTS
        for r in completed
    )
    word = "approved" if approving else "no_verdict"
    conclusion = await run.arecord(
        ConclusionInput(
            assessment=assessment.id,
            decision=f"accept for expert review; checker {word}",
            rationale=f"The validator recomputed every figure; {len(completed)} checker consultation(s) raised no rejection.",
            evidence=tuple(evidence),
            consultations=tuple(r.id for r in completed),
            validation_plan=(
                f"the expert's verdict on {candidate.id}",
                "the validator recomputes the figures on every run",
            ),
        )
    )
    await run.arecord(
        ValidationInput(
            conclusion=conclusion.id,
            check="deterministic validator",
            outcome="pass",
            evidence=(evidence[0],),
        )
    )
    return outcome.model_copy(
        update={
            **update,
            "conclusion": conclusion.id,
            "checker": CheckerOutcome(outcome=word, advisors=advisors),
        }
    )


async def _one_checker(
    run: _Run, plan: StoredRecord, advisor: Advisor | None, advisor_id: str, maker: Any, task: str
) -> StoredRecord:
    started = time.monotonic()
    before = (run.meter.input_tokens, run.meter.output_tokens)
    try:
        if advisor is None:
            raise AdvisorError(advisor_id, "is no longer in the catalogue")
        client = run.client(advisor)
        run.models.append(advisor.model)
        try:
            verdict, reason, turns = await asyncio.wait_for(
                _mapped(
                    advisor,
                    ask_checker(
                        maker_client=maker,
                        checker_client=client,
                        task=task,
                        max_rounds=run.settings.max_rounds,
                    ),
                ),
                timeout=run.settings.consult_deadline_s,
            )
            if not any(t.author == "checker" and t.text.strip() for t in turns):
                raise EmptyAnswer(advisor_id, "the checker's turns were empty")
        except TimeoutError:
            raise AdvisorTimeout(
                advisor_id, f"no verdict within {run.settings.consult_deadline_s:g} s"
            ) from None
    except AdvisorError as exc:
        return await run.arecord(
            ConsultationInput(
                plan=plan.id,
                advisor=advisor_id,
                status=exc.status,
                question="maker-checker review",
                duration_ms=int((time.monotonic() - started) * 1000),
                diagnostic=exc.message.strip().splitlines()[-1][:500]
                if exc.message.strip()
                else None,
                retry_after_seconds=getattr(exc, "retry_after_s", None),
            )
        )
    stance = {"approve": Stance.SUPPORTS, "reject": Stance.OPPOSES}.get(
        verdict or "", Stance.INCONCLUSIVE
    )
    conclusion = (
        "VERDICT: APPROVE"
        if verdict == "approve"
        else f"VERDICT: REJECT — {reason or 'no reason given'}"
        if verdict == "reject"
        else "no VERDICT line; the gate fails open"
    )
    return await run.arecord(
        ConsultationInput(
            plan=plan.id,
            advisor=advisor_id,
            status=ConsultationStatus.COMPLETED,
            question="maker-checker review",
            stance=stance,
            conclusion=conclusion
            if verdict != "reject"
            else (reason or "rejected without a reason"),
            usage=Usage(
                input_tokens=run.meter.input_tokens - before[0],
                output_tokens=run.meter.output_tokens - before[1],
            ),
            duration_ms=int((time.monotonic() - started) * 1000),
        )
    )


async def _mapped(advisor: Advisor, debate: Any) -> Any:
    """Translate the adapter's SDK errors into typed advisor errors, once, at the edge."""
    try:
        from .clients._errors import map_sdk_errors
    except ImportError:  # pragma: no cover - the scripted adapter alone
        return await debate
    with map_sdk_errors(advisor.id):
        return await debate
