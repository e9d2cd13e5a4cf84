"""Proposing: the model proposer with tools and structured output, or the local rules; every
candidate through the deterministic validator, with informed and bounded refinement."""

from __future__ import annotations

from agent_framework import Agent
from pydantic import BaseModel, Field, ValidationError

from portfolio_optimiser.context.decisions import Accepted, Decision
from portfolio_optimiser.context.models import Candidate, Project
from portfolio_optimiser.context.validator import validate_candidate
from portfolio_optimiser.learning.verdict_store import VerdictStore

from .checker import CheckerOutcome
from .datasource import DataSource, datasource_tools
from .local import local_candidates
from .outcome import CandidateRun, StopReason
from .prompts import PROPOSER_INSTRUCTIONS, hypothesis_prompt
from .state import RunState, materiality_of

__all__ = ["Proposal", "ProposedMeasure", "propose_locally", "propose_with_model"]


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


def _settled_elsewhere(run: RunState, candidate: Candidate, verdicts: VerdictStore) -> str | None:
    """Why a candidate is not gated again: already accepted in this run, or rejected by an expert."""
    if any(other.id == candidate.id for other in run.accepted):
        return f"{candidate.id} was proposed again; it is already accepted in this run"
    verdict = verdicts.get(candidate.id)
    if verdict is not None and not verdict.approves:
        return f"{candidate.id} was not proposed again: an expert rejected it ({verdict.reviewer})"
    return None


def _gate(run: RunState, candidate: Candidate, attempt: int) -> Decision:
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


def propose_locally(run: RunState, verdicts: VerdictStore) -> StopReason:
    run.attempts = 1
    for candidate in local_candidates(run.project, verdicts.approved())[
        : run.settings.max_candidates
    ]:
        skip = _settled_elsewhere(run, candidate, verdicts)
        if skip is not None:
            run.notes.append(skip)
            continue
        _gate(run, candidate, attempt=1)
    return "local_rules" if run.outcomes else "no_candidates"


async def propose_with_model(
    run: RunState, proposer_id: str, context: str, learned: str, verdicts: VerdictStore
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
            skip = _settled_elsewhere(run, candidate, verdicts)
            if skip is not None:
                run.notes.append(skip)
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
