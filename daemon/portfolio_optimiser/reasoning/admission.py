"""Admission: whether a record may join the store, and what the writer computes into it.

Pure: it reads what ``Store.load`` returned and never writes. Each refusal is one sentence naming
the rule and the field: evidence before opinion; a consultation judged against the plan that
selected it; no conclusion while a disagreement is open, and none that ignores a completed
consultation; a resolution rests on an experiment's evidence, never on a count; review counts are
computed, never authored; a standing conclusion is reused until new evidence supersedes it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .availability import ConsultationStatus
from .policy import PlanRequest, plan
from .queries import (
    Admission,
    Loaded,
    availability_now,
    consultations_of,
    open_disagreements,
    refuse,
    resolutions_of,
    standing_conclusion,
)
from .records import (
    AssessmentInput,
    ConclusionInput,
    ConsultationInput,
    DisagreementInput,
    EvidenceKind,
    ExcludedAdvisor,
    PlanInput,
    RecordBody,
    RecordInput,
    ResolutionInput,
    SelectedAdvisor,
    SnapshotState,
    StoredConclusion,
    StoredPlan,
    StoredRecord,
    ValidationInput,
)

__all__ = ["admit", "parse_input"]

_TASK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_RECORD_INPUT: TypeAdapter[Any] = TypeAdapter(RecordInput)
_HEAD_COUNT = re.compile(
    # A count of who agrees, not a count of anything: "2 of 3 test piles held" is an experiment.
    r"\b(vot(e|es|ed|ing)|majority|quorum|outvoted|head ?count|most (advisors|reviewers|models)|"
    r"(two|three|four|\d+) (of|out of) (two|three|four|five|\d+|the|all)( \w+)? (advisors|reviewers|models|opinions)|"
    r"\d+\s*(to|-|:|vs\.?)\s*\d+( in favou?r)?( of)?( \w+)? (advisors|votes|reviewers))\b",
    re.IGNORECASE,
)


def _get(loaded: Loaded, record_id: str, kind: str, task: str, field_name: str) -> StoredRecord:
    record = loaded.by_id(record_id)
    if record is None or record.kind != kind:
        raise refuse(f"`{field_name}` names {record_id!r}, which is no {kind} record of the store")
    if record.task != task:
        raise refuse(
            f"`{field_name}` names {record_id!r} of task {record.task}, not of this task {task}"
        )
    return record


def parse_input(draft: Any) -> Any:
    """A record input from a mapping; an authored review count is refused by name."""
    if isinstance(draft, StoredConclusion | StoredPlan):
        raise refuse(
            f"a stored {draft.kind} is computed by the writer and cannot be authored; pass a "
            f"{draft.kind} input instead"
        )
    if not isinstance(draft, Mapping):
        return draft
    if draft.get("kind") == "conclusion":
        for authored in ("reviewed_by", "independent_review_count"):
            if authored in draft:
                raise refuse(
                    f"`{authored}` is computed from the consultations a conclusion cites and cannot be "
                    "authored; remove it"
                )
    try:
        return _RECORD_INPUT.validate_python(dict(draft))
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"][1:]) or str(draft.get("kind", "kind"))
        raise refuse(
            f"a {draft.get('kind', 'record')} record has a bad `{where}`: {error['msg']}"
        ) from None


def admit(draft: Any, task: str, loaded: Loaded, ctx: Admission) -> RecordBody:
    """The body to store for ``draft`` in ``task``, or a :class:`Refusal`. Reads, never writes."""
    if not _TASK.match(task):
        raise refuse(f"task {task!r} is not a valid name; use letters, digits, '.', '_' and '-'")
    item = parse_input(draft)
    if isinstance(item, AssessmentInput):
        return _admit_assessment(item)
    if isinstance(item, PlanInput):
        return _admit_plan(item, task, loaded, ctx)
    if isinstance(item, ConsultationInput):
        return _admit_consultation(item, task, loaded)
    if isinstance(item, DisagreementInput):
        return _admit_disagreement(item, task, loaded)
    if isinstance(item, ResolutionInput):
        return _admit_resolution(item, task, loaded)
    if isinstance(item, ConclusionInput):
        return _admit_conclusion(item, task, loaded)
    if isinstance(item, ValidationInput):
        _get(loaded, item.conclusion, "conclusion", task, "conclusion")
        if not item.evidence:
            raise refuse("a validation carries the evidence of its check: `evidence` is empty")
        return item
    raise refuse(f"unknown record kind {getattr(item, 'kind', '?')!r}")


def _admit_assessment(item: AssessmentInput) -> AssessmentInput:
    if item.materiality.is_material and not item.evidence:
        raise refuse(
            f"a {item.materiality} assessment carries the evidence gathered before anyone is asked: "
            "`evidence` is empty"
        )
    return item


def _admit_plan(item: PlanInput, task: str, loaded: Loaded, ctx: Admission) -> StoredPlan:
    assessment = _get(loaded, item.assessment, "assessment", task, "assessment")
    body = assessment.body
    assert isinstance(body, AssessmentInput)
    standing = None if body.new_evidence else standing_conclusion(loaded, body.subject)
    states = availability_now(loaded, ctx)
    review = plan(
        PlanRequest(body.materiality, body.capabilities, body.confidence),
        ctx.mode.mode,
        states,
        standing_conclusion=standing.id if standing else None,
    )
    return StoredPlan(
        assessment=item.assessment,
        outcome=review.outcome,
        mode=review.mode,
        mode_source=ctx.mode.source,
        budget=review.budget,
        reason=review.reason,
        selected=tuple(
            SelectedAdvisor(advisor=s.advisor, adapter=s.adapter, covers=s.covers, why=s.why)
            for s in review.selected
        ),
        excluded=tuple(
            ExcludedAdvisor(advisor=e.advisor, reason=e.reason) for e in review.excluded
        ),
        local_review=review.local_review,
        reuse=review.reuse,
        uncovered=review.uncovered,
        availability=tuple(
            SnapshotState(
                advisor=s.advisor,
                adapter=s.adapter,
                status=s.status,
                reason=s.reason,
                recovering=s.recovering,
            )
            for s in states
        ),
    )


def _admit_consultation(item: ConsultationInput, task: str, loaded: Loaded) -> ConsultationInput:
    plan_record = _get(loaded, item.plan, "plan", task, "plan")
    stored = plan_record.body
    assert isinstance(stored, StoredPlan)
    chosen = [s.advisor for s in stored.selected]
    if item.advisor not in chosen:
        # Judged against the plan's snapshot: an answer that arrives after the circuit opened still counts.
        listed = ", ".join(chosen) or "none"
        raise refuse(
            f"advisor {item.advisor!r} was not selected by plan {item.plan} (selected: {listed})"
        )
    if item.status is ConsultationStatus.COMPLETED:
        if not item.conclusion or item.stance is None:
            raise refuse("a completed consultation carries its `conclusion` and its `stance`")
    elif item.conclusion or item.stance is not None:
        raise refuse(
            f"a consultation with status {item.status} has no answer: drop `conclusion` and `stance`"
        )
    return item


def _completed_ids(loaded: Loaded, assessment_id: str) -> list[str]:
    return [
        r.id
        for r in consultations_of(loaded, assessment_id)
        if isinstance(r.body, ConsultationInput) and r.body.status is ConsultationStatus.COMPLETED
    ]


def _admit_disagreement(item: DisagreementInput, task: str, loaded: Loaded) -> DisagreementInput:
    _get(loaded, item.assessment, "assessment", task, "assessment")
    if len(item.positions) < 2:
        raise refuse("a disagreement states at least two `positions`")
    completed = set(_completed_ids(loaded, item.assessment))
    for position in item.positions:
        if position.source != "primary" and position.source not in completed:
            raise refuse(
                f"position source {position.source!r} is neither `primary` nor a completed consultation "
                f"on assessment {item.assessment}"
            )
    return item


def _admit_resolution(item: ResolutionInput, task: str, loaded: Loaded) -> ResolutionInput:
    disagreement = _get(loaded, item.disagreement, "disagreement", task, "disagreement")
    if resolutions_of(loaded, disagreement.id):
        raise refuse(
            f"disagreement {disagreement.id} is already resolved; record a new disagreement instead"
        )
    if not item.evidence:
        raise refuse("a resolution rests on the evidence of its experiment: `evidence` is empty")
    for field_name, text in (("experiment", item.experiment), ("outcome", item.outcome)):
        counted = _HEAD_COUNT.search(text)
        if counted:
            raise refuse(
                "a disagreement is settled by an experiment, never by a count of who agrees: "
                f"`{field_name}` argues by head count ({counted.group(0)!r})"
            )
    if all(e.kind is EvidenceKind.PRIOR_EXTERNAL_OPINION for e in item.evidence):
        raise refuse(
            "opinions are not an experiment: a resolution needs evidence other than advisors' answers"
        )
    body = disagreement.body
    assert isinstance(body, DisagreementInput)
    sources = {p.source for p in body.positions}
    if item.favours != "neither" and item.favours not in sources:
        raise refuse(
            f"`favours` is {item.favours!r}; name one of {', '.join(sorted(sources))} or neither"
        )
    return item


def _admit_conclusion(item: ConclusionInput, task: str, loaded: Loaded) -> StoredConclusion:
    assessment = _get(loaded, item.assessment, "assessment", task, "assessment")
    body = assessment.body
    assert isinstance(body, AssessmentInput)
    still_open = open_disagreements(loaded, assessment.id)
    if still_open:
        raise refuse(
            f"disagreement {still_open[0].id} on this assessment is open; resolve it with an experiment "
            "before concluding"
        )
    completed = _completed_ids(loaded, assessment.id)
    unweighed = [c for c in completed if c not in item.consultations]
    if unweighed:
        raise refuse(
            f"a conclusion weighs every completed consultation: {', '.join(unweighed)} is not cited"
        )
    for consultation in item.consultations:
        record = _get(loaded, consultation, "consultation", task, "consultations")
        if record.id not in {r.id for r in consultations_of(loaded, assessment.id)}:
            raise refuse(f"consultation {consultation} is not about assessment {assessment.id}")
    for disagreement in item.disagreements:
        _get(loaded, disagreement, "disagreement", task, "disagreements")
    if body.materiality.is_material and (not item.evidence or not item.validation_plan):
        missing = "`evidence`" if not item.evidence else "`validation_plan`"
        raise refuse(
            f"a conclusion on {body.materiality} uncertainty needs evidence and a validation plan: {missing} is empty"
        )
    standing = standing_conclusion(loaded, body.subject)
    if standing is not None:
        if not body.new_evidence:
            raise refuse(
                f"conclusion {standing.id} already stands for this subject; reuse it, or assess again "
                "with `new_evidence` to review it"
            )
        if item.supersedes != standing.id:
            raise refuse(
                f"this conclusion replaces the standing {standing.id}: set `supersedes` to it"
            )
    elif item.supersedes is not None:
        previous = loaded.by_id(item.supersedes)
        if previous is None or previous.kind != "conclusion":
            raise refuse(
                f"`supersedes` names {item.supersedes!r}, which is no conclusion of the store"
            )
    reviewers: list[str] = []
    adapters: set[str] = set()
    for consultation in item.consultations:
        cited = loaded.by_id(consultation)
        assert cited is not None and isinstance(cited.body, ConsultationInput)
        if cited.body.status is not ConsultationStatus.COMPLETED:
            continue
        if cited.body.advisor not in reviewers:
            reviewers.append(cited.body.advisor)
        plan_record = loaded.by_id(cited.body.plan)
        assert plan_record is not None and isinstance(plan_record.body, StoredPlan)
        adapters.update(
            s.adapter for s in plan_record.body.selected if s.advisor == cited.body.advisor
        )
    return StoredConclusion(
        **item.model_dump(), reviewed_by=tuple(reviewers), independent_review_count=len(adapters)
    )
