"""Status and provenance, replayed from the records alone: nothing here is stored or remembered.

``task_status`` says where each assessment of a task stands (open, planned, disputed, concluded,
validated), with its consultations, disagreements, resolutions and conclusion (review computed,
validation counted), a timeline and token totals; ``handover`` renders it as markdown for the next
person. ``explain`` follows one decision's chain: assessment → plan → consultations →
disagreement → resolution → conclusion → validation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .records import (
    AssessmentInput,
    ConsultationInput,
    DisagreementInput,
    ResolutionInput,
    StoredConclusion,
    StoredPlan,
    StoredRecord,
    ValidationInput,
)
from .store import Loaded

__all__ = [
    "AssessmentState",
    "Chain",
    "TaskStatus",
    "explain",
    "handover",
    "task_status",
    "tasks_of",
]


@dataclass(frozen=True)
class AssessmentState:
    id: str
    subject: str
    materiality: str
    state: str
    plan: str | None = None
    plan_outcome: str | None = None
    consultations: list[dict[str, Any]] = field(default_factory=list)
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    conclusion: dict[str, Any] | None = None
    note: str = ""


@dataclass(frozen=True)
class TaskStatus:
    task: str
    assessments: list[AssessmentState]
    timeline: list[dict[str, str]]
    tokens: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def tasks_of(loaded: Loaded) -> list[str]:
    return list(dict.fromkeys(r.task for r in loaded.records))


def _summary(record: StoredRecord) -> str:
    body = record.body
    if isinstance(body, AssessmentInput):
        return f"assessed {body.subject!r} ({body.materiality})"
    if isinstance(body, StoredPlan):
        chosen = ", ".join(s.advisor for s in body.selected) or "no advisor"
        return f"planned {body.outcome} in mode {body.mode}: {chosen}"
    if isinstance(body, ConsultationInput):
        model = f" ({body.model})" if body.model else ""
        said = f", {body.stance}" if body.stance else ""
        why = f": {body.diagnostic}" if body.diagnostic and not body.stance else ""
        return f"consulted {body.advisor}{model}: {body.status}{said}{why}"
    if isinstance(body, DisagreementInput):
        return f"disagreement: {body.deciding_question}"
    if isinstance(body, ResolutionInput):
        return f"resolved {body.disagreement} in favour of {body.favours}"
    if isinstance(body, StoredConclusion):
        return f"concluded {body.decision!r} (independent reviews: {body.independent_review_count})"
    if isinstance(body, ValidationInput):
        return f"validation {body.check!r}: {body.outcome}"
    return record.kind


def task_status(loaded: Loaded, task: str) -> TaskStatus:
    records = loaded.of_task(task)
    states = [_assessment_state(loaded, r) for r in records if isinstance(r.body, AssessmentInput)]
    tokens = {"input_tokens": 0, "output_tokens": 0}
    for record in records:
        if isinstance(record.body, ConsultationInput):
            tokens["input_tokens"] += record.body.usage.input_tokens
            tokens["output_tokens"] += record.body.usage.output_tokens
    timeline = [
        {"at": r.recorded_at.isoformat(), "id": r.id, "kind": r.kind, "summary": _summary(r)}
        for r in records
    ]
    return TaskStatus(task=task, assessments=states, timeline=timeline, tokens=tokens)


def _assessment_state(loaded: Loaded, assessment: StoredRecord) -> AssessmentState:
    body = assessment.body
    assert isinstance(body, AssessmentInput)
    plans = [
        r
        for r in loaded.of_kind("plan")
        if isinstance(r.body, StoredPlan) and r.body.assessment == assessment.id
    ]
    plan_ids = {p.id for p in plans}
    consultations = [
        r
        for r in loaded.of_kind("consultation")
        if isinstance(r.body, ConsultationInput) and r.body.plan in plan_ids
    ]
    disagreements = [
        r
        for r in loaded.of_kind("disagreement")
        if isinstance(r.body, DisagreementInput) and r.body.assessment == assessment.id
    ]
    resolution_of = {
        r.body.disagreement: r.id
        for r in loaded.of_kind("resolution")
        if isinstance(r.body, ResolutionInput)
    }
    conclusions = [
        r
        for r in loaded.of_kind("conclusion")
        if isinstance(r.body, StoredConclusion) and r.body.assessment == assessment.id
    ]
    conclusion = None
    state, note = "open", ""
    if plans:
        state = "planned"
        latest_plan = plans[-1].body
        assert isinstance(latest_plan, StoredPlan)
        if latest_plan.reuse:
            state, note = "concluded", f"reuses conclusion {latest_plan.reuse}"
    if any(d.id not in resolution_of for d in disagreements):
        state = "disputed"
    if conclusions:
        latest = conclusions[-1]
        assert isinstance(latest.body, StoredConclusion)
        validations = [
            r
            for r in loaded.of_kind("validation")
            if isinstance(r.body, ValidationInput) and r.body.conclusion == latest.id
        ]
        outcomes = [v.body.outcome for v in validations if isinstance(v.body, ValidationInput)]
        state = "validated" if outcomes and all(o == "pass" for o in outcomes) else "concluded"
        conclusion = {
            "id": latest.id,
            "decision": latest.body.decision,
            "reviewed_by": list(latest.body.reviewed_by),
            "independent_review_count": latest.body.independent_review_count,
            "validations": [
                {"id": v.id, "outcome": o} for v, o in zip(validations, outcomes, strict=True)
            ],
            "supersedes": latest.body.supersedes,
        }
    latest_outcome = (
        plans[-1].body.outcome if plans and isinstance(plans[-1].body, StoredPlan) else None
    )
    return AssessmentState(
        id=assessment.id,
        subject=body.subject,
        materiality=str(body.materiality),
        state=state,
        plan=plans[-1].id if plans else None,
        plan_outcome=str(latest_outcome) if latest_outcome else None,
        consultations=[
            {
                "id": c.id,
                "advisor": c.body.advisor,
                "status": str(c.body.status),
                "stance": str(c.body.stance) if c.body.stance else None,
            }
            for c in consultations
            if isinstance(c.body, ConsultationInput)
        ],
        disagreements=[{"id": d.id, "resolved_by": resolution_of.get(d.id)} for d in disagreements],
        conclusion=conclusion,
        note=note,
    )


def handover(statuses: list[TaskStatus]) -> str:
    """A markdown report a person (or the next session) reads instead of asking again."""
    lines = ["# Reasoning handover", ""]
    if not statuses:
        return "\n".join([*lines, "No reasoning records yet.", ""])
    for status in statuses:
        lines += [
            f"## Task {status.task}",
            "",
            "| assessment | subject | materiality | state | reviews | note |",
            "|---|---|---|---|---|---|",
        ]
        for a in status.assessments:
            reviews = str(a.conclusion["independent_review_count"]) if a.conclusion else "–"
            subject = a.subject.replace("|", "\\|")
            lines.append(
                f"| {a.id} | {subject} | {a.materiality} | {a.state} | {reviews} | {a.note} |"
            )
        lines += [
            "",
            f"Tokens reported by advisors: {status.tokens['input_tokens']} in, {status.tokens['output_tokens']} out.",
            "",
            "Timeline:",
            "",
        ]
        lines += [f"- {t['at']} `{t['id']}` {t['summary']}" for t in status.timeline]
        lines.append("")
    return "\n".join(lines)


@dataclass(frozen=True)
class Chain:
    subject: str
    steps: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _step(record: StoredRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "kind": record.kind,
        "task": record.task,
        "recorded_at": record.recorded_at.isoformat(),
        "summary": _summary(record),
        "record": record.body.model_dump(mode="json"),
        "redacted": list(record.redacted),
    }


def _assessment_of(loaded: Loaded, record: StoredRecord) -> StoredRecord | None:
    body = record.body
    target: str | None = None
    if isinstance(body, AssessmentInput):
        return record
    if isinstance(body, StoredPlan | DisagreementInput | StoredConclusion):
        target = body.assessment
    elif isinstance(body, ConsultationInput):
        plan = loaded.by_id(body.plan)
        return _assessment_of(loaded, plan) if plan else None
    elif isinstance(body, ResolutionInput):
        disagreement = loaded.by_id(body.disagreement)
        return _assessment_of(loaded, disagreement) if disagreement else None
    elif isinstance(body, ValidationInput):
        conclusion = loaded.by_id(body.conclusion)
        return _assessment_of(loaded, conclusion) if conclusion else None
    return loaded.by_id(target) if target else None


def explain(loaded: Loaded, ident: str) -> Chain | None:
    """The chain of the record ``ident``, or of every assessment whose subject mentions it."""
    record = loaded.by_id(ident)
    if record is not None:
        roots = [a] if (a := _assessment_of(loaded, record)) else []
    else:
        roots = [
            r
            for r in loaded.of_kind("assessment")
            if isinstance(r.body, AssessmentInput)
            and (ident in r.body.subject or any(ident in e.reference for e in r.body.evidence))
        ]
    if not roots:
        return None
    steps: list[dict[str, Any]] = []
    for root in roots:
        steps.extend(_chain_of(loaded, root))
    subject = roots[0].body.subject if isinstance(roots[0].body, AssessmentInput) else ident
    return Chain(subject=subject, steps=steps)


def _chain_of(loaded: Loaded, assessment: StoredRecord) -> list[dict[str, Any]]:
    belongs: list[StoredRecord] = [assessment]
    for record in loaded.records:
        if record.id != assessment.id and _assessment_of(loaded, record) is assessment:
            belongs.append(record)
    order = {
        "assessment": 0,
        "plan": 1,
        "consultation": 2,
        "disagreement": 3,
        "resolution": 4,
        "conclusion": 5,
        "validation": 6,
    }
    belongs.sort(key=lambda r: (order[r.kind], r.recorded_at, r.seq))
    return [_step(r) for r in belongs]
