"""Review: each candidate recorded as an assessment, a plan, consultations and a conclusion; the
checker advisors the plan selects debate it in a maker-checker group chat. No vote decides."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from portfolio_optimiser._text import strip_control
from portfolio_optimiser.context.decisions import Accepted, Decision
from portfolio_optimiser.context.models import Candidate
from portfolio_optimiser.reasoning.availability import ConsultationStatus
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
    ValidationInput,
)
from portfolio_optimiser.reasoning.transport import AdvisorError, Question, consult, diagnostic_of

from .budget import BudgetExceeded
from .checker import CheckerOutcome, Heard
from .debate import DebateExchange, maker_client
from .local import local_review
from .outcome import CandidateRun
from .prompts import checker_task
from .state import RunState, adapter_errors

__all__ = ["review"]


def _receipt_evidence(candidate: Candidate, decision: Decision) -> list[Evidence]:
    failed = [c for c in decision.receipt.checks if c.outcome == "failed"]
    note = "all rules passed" if not failed else f"{failed[0].rule}: {failed[0].detail}"
    evidence = [
        Evidence(kind=EvidenceKind.VALIDATOR, reference=f"receipt:{candidate.id}", note=note)
    ]
    # A model writes these links: one that is empty, or only control characters, names nothing
    # (the validator's receipt already says so) and would be refused by the record store.
    evidence += [
        Evidence(kind=EvidenceKind.FILE, reference=link)
        for link in candidate.evidence
        if strip_control(link).strip()
    ]
    return evidence


def _subject(run: RunState, candidate: Candidate) -> str:
    return f"candidate {candidate.id} of {run.project.id}"


async def review(run: RunState, outcome: CandidateRun) -> CandidateRun:
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
    run: RunState,
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
            validation_plan=_validation_plan(candidate),
        )
    )
    await _validator_passed(run, conclusion, evidence)
    return conclusion


async def _consult(
    run: RunState,
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
    transports = {
        s.advisor: _debate(run, candidate, s.advisor, task, summary, receipt)
        for s in stored.selected
        if run.reasoning.ctx.catalogue.get(s.advisor) is not None
    }
    records = await consult(
        run.reasoning.store,
        run.task,
        plan,
        Question(subject=_subject(run, candidate), hypothesis=hypothesis, evidence=tuple(evidence)),
        run.reasoning.ctx,
        deadline_s=run.settings.consult_deadline_s,
        transports=transports,
        passthrough=(BudgetExceeded,),
    )
    run.models.extend(
        b.model for r in records if isinstance(b := r.body, ConsultationInput) and b.model
    )
    heard = tuple(_heard(r) for r in records)
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
        checker = CheckerOutcome(
            outcome="rejected", reason=first.conclusion, advisors=advisors, heard=heard
        )
        return outcome.model_copy(
            update={**update, "checker": checker, "disagreement": disagreement.id}
        )
    if not completed:
        conclusion = await _conclude_locally(
            run, candidate, outcome.validator, assessment, evidence, consultations=()
        )
        why = "; ".join(f"{h.advisor}: {h.status} ({h.diagnostic})" for h in heard)
        run.notes.append(f"{candidate.id}: no checker answered ({why}); reviewed locally")
        return outcome.model_copy(
            update={
                **update,
                "conclusion": conclusion.id,
                "checker": CheckerOutcome(outcome="not_run", heard=heard),
            }
        )
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
            validation_plan=_validation_plan(candidate),
        )
    )
    await _validator_passed(run, conclusion, evidence)
    return outcome.model_copy(
        update={
            **update,
            "conclusion": conclusion.id,
            "checker": CheckerOutcome(outcome=word, advisors=advisors, heard=heard),
        }
    )


def _heard(record: StoredRecord) -> Heard:
    body = record.body
    assert isinstance(body, ConsultationInput)
    position = None
    if body.status is ConsultationStatus.COMPLETED:
        position = {Stance.SUPPORTS: "approve", Stance.OPPOSES: "reject"}.get(
            body.stance or Stance.INCONCLUSIVE, "no verdict"
        )
    return Heard(
        advisor=body.advisor,
        model=body.model,
        status=str(body.status),
        position=position,
        reasons=body.reasons,
        diagnostic=body.diagnostic,
    )


def _debate(
    run: RunState, candidate: Candidate, advisor_id: str, task: str, summary: str, receipt: str
) -> DebateExchange:
    advisor = run.reasoning.ctx.catalogue.get(advisor_id)
    assert advisor is not None
    cap = run.settings.check_output_tokens
    proposer = run.reasoning.ctx.catalogue.get(run.proposer or "")
    # The maker is whoever proposed: the model defends its own measures; the planner's list and
    # the learned rules are defended by their recomputed figures.
    voice = (
        (proposer.id, run.client(proposer), adapter_errors(proposer))
        if proposer is not None and candidate.origin == f"model:{proposer.id}"
        else None
    )

    async def on_maker_failure(error: AdvisorError) -> None:
        if run.proposal_plan is None or proposer is None:
            return
        await run.arecord(
            ConsultationInput(
                plan=run.proposal_plan,
                advisor=proposer.id,
                status=error.status,
                question=f"the maker's defence of candidate {candidate.id}",
                diagnostic=diagnostic_of(error),
                retry_after_seconds=getattr(error, "retry_after_s", None),
                model=proposer.model,
            )
        )

    return DebateExchange(
        advisor=advisor,
        checker_client=lambda: run.client(advisor),
        maker=lambda: maker_client(
            defence=f"The figures stand as the validator recomputed them:\n{receipt}",
            proposer=voice,
            on_failure=on_maker_failure,
            output_cap=cap,
            # Half the consultation's deadline: the checker still has time to answer after it.
            deadline_s=run.settings.consult_deadline_s / 2,
        ),
        opening=summary,
        task=task,
        max_rounds=run.settings.max_rounds,
        terms=run.terms_for(advisor),
        output_cap=cap,
        errors=adapter_errors(advisor),
    )


def _validation_plan(candidate: Candidate) -> tuple[str, ...]:
    return (
        f"the expert's verdict on {candidate.id}",
        "the validator recomputes the figures on every run",
    )


async def _validator_passed(
    run: RunState, conclusion: StoredRecord, evidence: list[Evidence]
) -> None:
    """The conclusion's first validation: the validator's receipt, already in hand."""
    await run.arecord(
        ValidationInput(
            conclusion=conclusion.id,
            check="deterministic validator",
            outcome="pass",
            evidence=(evidence[0],),
        )
    )
