"""Review: each candidate recorded as an assessment, a plan, consultations and a conclusion; the
checker advisors the plan selects debate it in a maker-checker group chat. No vote decides."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from portfolio_optimiser.context.decisions import Accepted, Decision
from portfolio_optimiser.context.models import Candidate
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
from portfolio_optimiser.reasoning.transport import AdvisorError, AdvisorTimeout, EmptyAnswer

from .checker import CheckerOutcome, ask_checker
from .clients.scripted import ScriptedChatClient
from .local import local_review
from .outcome import CandidateRun
from .prompts import checker_task
from .state import RunState

__all__ = ["review"]


def _receipt_evidence(candidate: Candidate, decision: Decision) -> list[Evidence]:
    failed = [c for c in decision.receipt.checks if c.outcome == "failed"]
    note = "all rules passed" if not failed else f"{failed[0].rule}: {failed[0].detail}"
    evidence = [
        Evidence(kind=EvidenceKind.VALIDATOR, reference=f"receipt:{candidate.id}", note=note)
    ]
    evidence += [Evidence(kind=EvidenceKind.FILE, reference=link) for link in candidate.evidence]
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
            validation_plan=_validation_plan(candidate),
        )
    )
    await _validator_passed(run, conclusion, evidence)
    return outcome.model_copy(
        update={
            **update,
            "conclusion": conclusion.id,
            "checker": CheckerOutcome(outcome=word, advisors=advisors),
        }
    )


async def _one_checker(
    run: RunState,
    plan: StoredRecord,
    advisor: Advisor | None,
    advisor_id: str,
    maker: Any,
    task: str,
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
