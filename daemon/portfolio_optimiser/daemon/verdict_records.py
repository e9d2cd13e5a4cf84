"""A verdict as reasoning evidence: it resolves its candidate's open disagreements and
validates the conclusion that stands (or concludes, when none does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from portfolio_optimiser.context.signature import Proof
from portfolio_optimiser.context.verdict import Verdict
from portfolio_optimiser.reasoning.availability import ConsultationStatus
from portfolio_optimiser.reasoning.records import (
    ConclusionInput,
    ConsultationInput,
    DisagreementInput,
    Evidence,
    EvidenceKind,
    ResolutionInput,
    ValidationInput,
)
from portfolio_optimiser.reasoning.store import (
    Loaded,
    Refusal,
    Store,
    consultations_of,
    open_disagreements,
)

__all__ = ["record_reasoning"]


def record_reasoning(
    store: Store, admission: Any, candidate: Any, verdict: Verdict, path: Path, proof: Proof | None
) -> str | None:
    """The expert's verdict as evidence: it resolves an open disagreement, or validates a conclusion."""
    if not candidate.assessment or admission is None:
        return None
    evidence = (
        Evidence(
            kind=EvidenceKind.VERDICT,
            reference=path.name,
            note=f"{verdict.decision.value} by {verdict.reviewer}"
            + (f", signed with {proof.fingerprint}" if proof is not None else ""),
        ),
    )
    loaded = store.load()
    assessment = loaded.by_id(candidate.assessment)
    if assessment is None:
        return None
    task = assessment.task
    try:
        for disagreement in open_disagreements(loaded, assessment.id):
            body = disagreement.body
            assert isinstance(body, DisagreementInput)
            opposing = next((p.source for p in body.positions if p.source != "primary"), "neither")
            store.record(
                task,
                ResolutionInput(
                    disagreement=disagreement.id,
                    experiment=f"the expert's verdict on candidate {verdict.id}",
                    outcome=f"the expert decided {verdict.decision.value}",
                    favours="primary" if verdict.approves else opposing,
                    evidence=evidence,
                ),
                admission,
                durable=False,
            )
        loaded = store.load()
        conclusions = loaded.citing("conclusion", assessment.id)
        # A run that reused the standing conclusion on its candidate concluded nothing of its
        # own: the verdict validates the one that stands (a second would be refused).
        subject = getattr(assessment.body, "subject", "")
        standing = conclusions[-1] if conclusions else loaded.standing_conclusion(subject)
        if standing is not None:
            store.record(
                standing.task,
                ValidationInput(
                    conclusion=standing.id,
                    check="expert verdict",
                    outcome="pass" if verdict.approves else "fail",
                    evidence=evidence,
                ),
                admission,
                durable=False,
            )
            return None
        completed = _completed_consultations(loaded, assessment.id)
        disagreements = tuple(r.id for r in loaded.citing("disagreement", assessment.id))
        conclusion = store.record(
            task,
            ConclusionInput(
                assessment=assessment.id,
                decision=("accept" if verdict.approves else "reject") + " per the expert's verdict",
                rationale=verdict.rationale,
                evidence=evidence,
                consultations=completed,
                disagreements=disagreements,
                validation_plan=("the realised saving, measured against the baseline",),
            ),
            admission,
            durable=False,
        )
        store.record(
            task,
            ValidationInput(
                conclusion=conclusion.id,
                check="expert verdict",
                outcome="pass" if verdict.approves else "fail",
                evidence=evidence,
            ),
            admission,
            durable=False,
        )
    except Refusal as exc:
        # The verdict itself is durable in the ledger and the wiki; a record the writer refuses
        # (for instance a conclusion a later one already supersedes) must not lose it. Said, not hidden.
        return str(exc)
    finally:
        store.commit()  # the verdict's records, one flush, before the ledger says it was read
    return None


def _completed_consultations(loaded: Loaded, assessment_id: str) -> tuple[str, ...]:
    return tuple(
        r.id
        for r in consultations_of(loaded, assessment_id)
        if isinstance(r.body, ConsultationInput) and r.body.status is ConsultationStatus.COMPLETED
    )
