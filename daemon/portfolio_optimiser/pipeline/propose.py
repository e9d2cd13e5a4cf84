"""Proposing: the local rules always, then a model's additions when a plan selects a proposer.

Decides: which candidates a run gates, and in what order. The local rules (the kuttliste, learned
measures) run in every run and are never capped: the planner's own list is always checked. A
proposer the plan selects is consulted through the transport contract, one consultation per
attempt, each attempt told the validator's latest rejection or why its answer could not be read
(never the earlier proposal); its candidates are added, de-duplicated on (affected codes, measure
type) against what the run already has, marked ``model:<advisor>``, and bounded by
``max_candidates``. A proposer that fails leaves the run with the local rules' candidates, and the
run says why. Every candidate goes through the deterministic validator here.
"""

from __future__ import annotations

from pydantic import ValidationError

from portfolio_optimiser.context.decisions import Accepted, Decision
from portfolio_optimiser.context.models import Candidate, Project
from portfolio_optimiser.context.validator import validate_candidate
from portfolio_optimiser.learning.verdict_store import VerdictStore
from portfolio_optimiser.reasoning.availability import ConsultationStatus
from portfolio_optimiser.reasoning.policy import Materiality, PlanOutcome
from portfolio_optimiser.reasoning.records import (
    AssessmentInput,
    ConclusionInput,
    ConsultationInput,
    Evidence,
    EvidenceKind,
    PlanInput,
    StoredPlan,
    StoredRecord,
)
from portfolio_optimiser.reasoning.redaction import RedactionRefused, safe_text, scrub
from portfolio_optimiser.reasoning.transport import Question, consult

from .budget import BudgetExceeded
from .checker import CheckerOutcome
from .datasource import DataSource, datasource_tools
from .local import local_candidates
from .outcome import CandidateRun, StopReason
from .prompts import hypothesis_prompt
from .proposer import ProposedMeasure, ProposerExchange
from .state import RunState, adapter_errors, materiality_of

__all__ = ["propose_locally", "propose_with_model"]

Key = tuple[frozenset[str], str]


def _key(candidate: Candidate) -> Key:
    return frozenset(candidate.affected_codes), candidate.measure_type


def _settled_elsewhere(run: RunState, candidate: Candidate, verdicts: VerdictStore) -> str | None:
    """Why a candidate is not gated again: already in this run, or rejected by an expert."""
    if any(other.candidate.id == candidate.id for other in run.outcomes):
        return f"{candidate.id} was proposed again; it is already checked in this run"
    if any(_key(other) == _key(candidate) for other in run.accepted):
        return (
            f"'{candidate.title}' ({', '.join(candidate.affected_codes)}, {candidate.measure_type}) "
            "was proposed again; the run already has an accepted candidate for those codes and that type"
        )
    verdict = verdicts.get(candidate.id)
    if verdict is not None and not verdict.approves:
        if all(c.id != candidate.id for c in run.declined):
            run.declined.append(candidate)
        return f"{candidate.id} was not proposed again: an expert rejected it ({verdict.reviewer})"
    if candidate.origin.startswith(("verdict:", "model:")):
        precedent = run.teaching.of(candidate)
        if precedent is not None:
            return f"'{candidate.title}' ({candidate.id}) was not proposed: {precedent}"
    return None


def _gate(run: RunState, candidate: Candidate, attempt: int) -> Decision:
    decision = validate_candidate(
        candidate,
        run.project,
        accepted=run.accepted,
        references=run.references,
        frame=run.settings.frame,
    )
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
            # The planner's own item and a reference price are checked whatever experts said
            # before; the report shows the precedent beside them.
            precedent=run.teaching.of(candidate),
        )
    )
    return decision


def propose_locally(run: RunState, verdicts: VerdictStore) -> None:
    """Gate every candidate of the local rules; no cap cuts the planner's own list."""
    run.attempts = max(run.attempts, 1)
    for candidate in local_candidates(
        run.project, verdicts.approved(), run.references, run.portfolio
    ):
        skip = _settled_elsewhere(run, candidate, verdicts)
        if skip is not None:
            run.notes.append(skip)
            continue
        _gate(run, candidate, attempt=1)


async def _proposal_plan(run: RunState, context: str) -> tuple[AssessmentInput, StoredRecord]:
    assessment = await run.arecord(
        AssessmentInput(
            # A per-run question: the model's proposals are this run's, never a standing answer.
            subject=f"savings in {run.project.id} beyond its local rules, run {run.run_id}",
            materiality=Materiality.MATERIAL,
            hypothesis=f"{run.project.id} has savings measures its own list does not name",
            evidence=(
                Evidence(
                    kind=EvidenceKind.FILE,
                    reference="index.md",
                    note=f"the navigated bundle, {len(context)} characters of context",
                ),
            ),
            capabilities=("propose",),
        )
    )
    body = assessment.body
    assert isinstance(body, AssessmentInput)
    return body, await run.arecord(PlanInput(assessment=assessment.id))


async def propose_with_model(
    run: RunState, context: str, learned: str, verdicts: VerdictStore
) -> StopReason | None:
    """Add a proposer's candidates to the local ones; None when the plan selected no proposer."""
    assessed, plan = await _proposal_plan(run, context)
    stored = plan.body
    assert isinstance(stored, StoredPlan)
    if stored.outcome is not PlanOutcome.CONSULT:
        if any(s.status == "available" for s in stored.availability):
            run.notes.append(f"no model proposed: {stored.reason}")
        return None
    advisor_id = stored.selected[0].advisor
    advisor = run.reasoning.ctx.catalogue.get(advisor_id)
    if advisor is None:  # pragma: no cover - the plan selects from the catalogue it was given
        return None
    run.proposal_plan = plan.id
    source = DataSource.from_config(run.settings.data_source, root=run.bundle, project=run.project)
    tools = datasource_tools(source)
    question = Question(
        subject=f"savings in {run.project.id} beyond its local rules",
        hypothesis=assessed.hypothesis,
        evidence=assessed.evidence,
    )
    consulted: list[StoredRecord] = []
    prior_rejection: str | None = None
    added = 0
    stop: StopReason = "max_attempts"
    for attempt in range(1, run.settings.max_attempts + 1):
        run.meter.tick_round()
        run.attempts = max(run.attempts, attempt)
        room = run.settings.max_candidates - added
        prompt = hypothesis_prompt(
            context=context, fold=learned, max_candidates=room, prior_rejection=prior_rejection
        )
        run.prompts.append(prompt)
        exchange = ProposerExchange(
            advisor=advisor,
            client=lambda: run.client(advisor),
            tools=tools,
            prompt=prompt,
            terms=run.terms_for(advisor),
            output_cap=run.settings.propose_output_tokens,
            errors=adapter_errors(advisor),
        )
        [record] = await consult(
            run.reasoning.store,
            run.task,
            plan,
            question,
            run.reasoning.ctx,
            deadline_s=run.settings.consult_deadline_s,
            transports={advisor_id: exchange},
            passthrough=(BudgetExceeded,),
        )
        consulted.append(record)
        body = record.body
        assert isinstance(body, ConsultationInput)
        if body.status in (ConsultationStatus.MALFORMED, ConsultationStatus.EMPTY):
            run.notes.append(
                f"attempt {attempt}: the proposer's answer was not used ({body.status}: {body.diagnostic})"
            )
            prior_rejection = f"your answer could not be read: {body.diagnostic}"
            stop = "max_attempts"
            continue
        if body.status is not ConsultationStatus.COMPLETED or exchange.proposal is None:
            run.local_because = (
                f"the proposer {advisor_id} did not answer ({body.status}: {body.diagnostic}); "
                "the candidates come from the local rules"
            )
            run.notes.append(run.local_because)
            stop = "proposer_failed"
            break
        run.proposer = advisor_id
        run.models.append(advisor.model)
        measures = exchange.proposal.candidates
        if not measures:
            stop = "proposer_done"
            break

        prior_rejection = None
        offered = 0
        for measure in measures:
            if added >= run.settings.max_candidates:
                break
            offered += 1
            gated, reason = _take(run, measure, attempt, verdicts, advisor_id)
            added += gated
            prior_rejection = reason or prior_rejection
        if offered < len(measures):
            run.notes.append(
                f"attempt {attempt}: the proposer offered {len(measures) - offered} measure(s) past "
                f"max_candidates ({run.settings.max_candidates}); they were not checked"
            )
        if added >= run.settings.max_candidates:
            stop = "max_candidates"
            break
        if prior_rejection is None:
            stop = "proposer_done"
            break
    if run.proposer is None and run.local_because is None:
        last = consulted[-1].body if consulted else None
        why = f"{last.status}: {last.diagnostic}" if isinstance(last, ConsultationInput) else "?"
        run.local_because = (
            f"no answer of the proposer {advisor_id} could be used in {len(consulted)} attempt(s) "
            f"(last: {why}); the candidates come from the local rules"
        )
    await _conclude(run, plan, consulted, added)
    return stop


def _take(
    run: RunState, measure: ProposedMeasure, attempt: int, verdicts: VerdictStore, advisor_id: str
) -> tuple[bool, str | None]:
    """Gate one of the model's measures: (whether it became a candidate of the run, the reason
    to tell the next attempt when it was not good)."""
    try:
        candidate = _candidate(run.project, measure, origin=f"model:{advisor_id}")
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "the measure"
        reason = f"'{safe_text(measure.title)}' is not a candidate: {where}: {error['msg']}"
        run.notes.append(f"attempt {attempt}: the proposer's measure {reason}")
        return False, reason
    except ValueError as exc:
        reason = f"'{safe_text(measure.title)}' is not a candidate: {exc}"
        run.notes.append(f"attempt {attempt}: the proposer's measure {reason}")
        return False, reason
    skip = _settled_elsewhere(run, candidate, verdicts)
    if skip is not None:
        run.notes.append(skip)
        earlier = next((o for o in run.outcomes if o.candidate.id == candidate.id), None)
        if earlier is not None and not isinstance(earlier.validator, Accepted):
            # Proposed again unchanged after a rejection: the model is told again, not let off.
            return False, (
                f"'{candidate.title}' was rejected by rule {earlier.validator.rule}: "
                f"{earlier.validator.reason}; do not propose it unchanged"
            )
        if run.teaching.of(candidate) is not None:
            # Told what, never the experts' words: those reach a prompt only through the fold.
            return False, (
                f"experts have rejected {candidate.measure_type} on "
                f"{', '.join(candidate.affected_codes)}; do not propose it there"
            )
        return False, None
    decision = _gate(run, candidate, attempt)
    if isinstance(decision, Accepted):
        return True, None
    # Only the latest reason is carried, never the rejected proposal itself.
    return True, f"'{candidate.title}' was rejected by rule {decision.rule}: {decision.reason}"


async def _conclude(
    run: RunState, plan: StoredRecord, consulted: list[StoredRecord], added: int
) -> None:
    stored = plan.body
    assert isinstance(stored, StoredPlan)
    completed = [
        r.id
        for r in consulted
        if isinstance(r.body, ConsultationInput) and r.body.status is ConsultationStatus.COMPLETED
    ]
    decision = (
        f"add {added} model candidate(s) to the local rules' candidates"
        if added
        else "keep the local rules' candidates; the model added none"
    )
    await run.arecord(
        ConclusionInput(
            assessment=stored.assessment,
            decision=decision,
            rationale=run.local_because or "every model candidate went through the validator",
            evidence=(
                Evidence(kind=EvidenceKind.RECORD, reference=plan.id, note="the proposer's plan"),
            ),
            consultations=tuple(completed),
            validation_plan=("the deterministic validator gates every candidate the model added",),
        )
    )


def _key_text(value: str, field: str) -> str:
    """A key field of a model's measure, verbatim or refused: it mints the candidate's id, so it
    is never rewritten, and one that carries a control sequence or a secret is no key at all."""
    try:
        clean = scrub(value)
    except RedactionRefused:
        raise ValueError(f"its {field} carries a private key") from None
    if clean.kinds or not value.strip():
        raise ValueError(f"its {field} {clean.text!r} is not a plain value")
    return value.strip()


def _candidate(project: Project, measure: ProposedMeasure, *, origin: str) -> Candidate:
    # A model's words become records, reports and a verdict template: no control sequence and no
    # secret-shaped text gets that far (a key it made up would make the record store refuse).
    return Candidate(
        project_id=project.id,
        affected_codes=tuple(_key_text(code, "affected code") for code in measure.affected_codes),
        measure_type=_key_text(measure.measure_type, "measure type"),
        claimed_saving_nok=measure.claimed_saving_nok,
        title=safe_text(measure.title),
        rationale=safe_text(measure.rationale),
        evidence=tuple(safe_text(link) for link in measure.evidence),
        quantity=measure.quantity,
        unit_price_nok=measure.unit_price_nok,
        unit=_key_text(measure.unit, "unit") if measure.unit else None,
        origin=origin,
    )
