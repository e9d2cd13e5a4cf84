"""The one writer of reasoning records: ``load`` → ``admit`` → redact → mint an id → ``write``.

Decides: whether a record may join the store, and what the writer computes into it. ``admit`` is
pure (it reads what ``load`` returned and never writes); each refusal is one sentence naming the
rule and the field. ``write`` publishes one JSON file per record under
``<state>/reasoning/<task>/``, atomically, and refuses to overwrite: a record, once written, is
never changed. A later correction is a new record (``supersedes``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from portfolio_optimiser._atomic import publish_atomic

from .availability import AvailabilityInputs, ConsultationStatus, Outcome, derive_availability
from .catalogue import Catalogue, Presence
from .modes import ModeResolution
from .policy import PlanRequest, plan
from .records import (
    KIND_PREFIX,
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
from .redaction import RedactionRefused, scrub_value

__all__ = ["Admission", "Loaded", "Refusal", "Store", "admit", "history", "normalise_subject"]

_TASK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_RECORD_INPUT: TypeAdapter[Any] = TypeAdapter(RecordInput)
_RECORD_BODY: TypeAdapter[Any] = TypeAdapter(RecordBody)
_HEAD_COUNT = re.compile(
    r"\b(vot(e|es|ed|ing)|majority|quorum|outvoted|head ?count|most advisors|"
    r"(two|three|four|\d+) (of|out of) (two|three|four|five|\d+)|\d+\s*(to|-|:|vs\.?)\s*\d+ (advisors|votes))\b",
    re.IGNORECASE,
)


class Refusal(Exception):
    """One sentence a caller can act on; ``str(refusal)`` is that sentence."""


def refuse(sentence: str) -> Refusal:
    return Refusal(sentence)


def normalise_subject(subject: str) -> str:
    return " ".join(subject.split()).casefold()


@dataclass(frozen=True)
class Loaded:
    """Every readable record of the store, in order, and the files that are not readable."""

    records: tuple[StoredRecord, ...] = ()
    unreadable: tuple[tuple[str, str], ...] = ()

    def by_id(self, record_id: str) -> StoredRecord | None:
        return next((r for r in self.records if r.id == record_id), None)

    def of_task(self, task: str) -> list[StoredRecord]:
        return [r for r in self.records if r.task == task]

    def of_kind(self, kind: str) -> list[StoredRecord]:
        return [r for r in self.records if r.kind == kind]


@dataclass(frozen=True)
class Admission:
    """What admission may consult besides the records: the catalogue and the machine's state."""

    catalogue: Catalogue
    mode: ModeResolution
    now: datetime
    presence: Presence = field(default_factory=Presence)
    disabled: frozenset[str] = frozenset()
    cooldown_override_s: float | None = None
    clock: Callable[[], datetime] | None = None
    """The wall clock of a long-lived process; without one, ``now`` stands for every moment."""

    def current(self) -> datetime:
        return self.clock() if self.clock is not None else self.now


def history(loaded: Loaded) -> list[Outcome]:
    """The consultation outcomes the breaker reads, from the records alone."""
    outcomes = []
    for order, record in enumerate(loaded.of_kind("consultation")):
        body = record.body
        assert isinstance(body, ConsultationInput)
        outcomes.append(
            Outcome(body.advisor, body.status, record.recorded_at, body.retry_after_seconds, order)
        )
    return outcomes


def availability_now(loaded: Loaded, ctx: Admission) -> list[Any]:
    return derive_availability(
        ctx.catalogue,
        AvailabilityInputs(
            mode=ctx.mode.mode,
            now=ctx.current(),
            history=history(loaded),
            presence=ctx.presence,
            disabled=ctx.disabled,
            cooldown_override_s=ctx.cooldown_override_s,
        ),
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


def standing_conclusion(loaded: Loaded, subject: str) -> StoredRecord | None:
    """The newest conclusion on this subject that no later conclusion supersedes."""
    wanted = normalise_subject(subject)
    superseded = {
        r.body.supersedes
        for r in loaded.of_kind("conclusion")
        if isinstance(r.body, StoredConclusion) and r.body.supersedes
    }
    standing = None
    for record in loaded.of_kind("conclusion"):
        assessment = (
            loaded.by_id(record.body.assessment)
            if isinstance(record.body, StoredConclusion)
            else None
        )
        if (
            assessment is not None
            and isinstance(assessment.body, AssessmentInput)
            and normalise_subject(assessment.body.subject) == wanted
            and record.id not in superseded
        ):
            standing = record
    return standing


def _consultations_of(loaded: Loaded, assessment_id: str) -> list[StoredRecord]:
    plans = {
        r.id
        for r in loaded.of_kind("plan")
        if isinstance(r.body, StoredPlan) and r.body.assessment == assessment_id
    }
    return [
        r
        for r in loaded.of_kind("consultation")
        if isinstance(r.body, ConsultationInput) and r.body.plan in plans
    ]


def _resolutions_of(loaded: Loaded, disagreement_id: str) -> list[StoredRecord]:
    return [
        r
        for r in loaded.of_kind("resolution")
        if isinstance(r.body, ResolutionInput) and r.body.disagreement == disagreement_id
    ]


def open_disagreements(loaded: Loaded, assessment_id: str) -> list[StoredRecord]:
    return [
        r
        for r in loaded.of_kind("disagreement")
        if isinstance(r.body, DisagreementInput)
        and r.body.assessment == assessment_id
        and not _resolutions_of(loaded, r.id)
    ]


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
        for r in _consultations_of(loaded, assessment_id)
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
    if _resolutions_of(loaded, disagreement.id):
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
        if record.id not in {r.id for r in _consultations_of(loaded, assessment.id)}:
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


class Store:
    """The record store of one state directory. The only code that writes reasoning records."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "reasoning"
        # Records are never overwritten, so a file once parsed never needs parsing again.
        self._parsed: dict[Path, StoredRecord | str] = {}
        self._lock = threading.Lock()

    def load(self) -> Loaded:
        if not self.root.is_dir():
            return Loaded()
        records: list[StoredRecord] = []
        unreadable: list[tuple[str, str]] = []
        for path in sorted(self.root.glob("*/*.json")):
            parsed = self._parsed.get(path)
            if parsed is None or isinstance(parsed, str):
                try:
                    parsed = StoredRecord.model_validate_json(path.read_bytes())
                except (OSError, ValueError) as exc:
                    parsed = str(exc).splitlines()[0]
                self._parsed[path] = parsed
            if isinstance(parsed, str):
                unreadable.append((str(path.relative_to(self.root)), parsed))
            else:
                records.append(parsed)
        records.sort(key=lambda r: (r.recorded_at, r.task, r.seq))
        return Loaded(tuple(records), tuple(unreadable))

    def record(self, task: str, draft: Any, ctx: Admission) -> StoredRecord:
        """Admit, redact, mint and write one record. Raises :class:`Refusal`."""
        with self._lock:  # one writer: concurrent runs of one process take turns
            return self._record(task, draft, ctx)

    def _record(self, task: str, draft: Any, ctx: Admission) -> StoredRecord:
        loaded = self.load()
        body = admit(draft, task, loaded, ctx)
        kinds: set[str] = set()
        try:
            clean = scrub_value(body.model_dump(mode="json"), kinds)
        except RedactionRefused as exc:
            raise refuse(str(exc)) from None
        try:
            redacted_body: RecordBody = _RECORD_BODY.validate_python(clean)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"][1:]) or body.kind
            raise refuse(
                f"`{where}` of the {body.kind} is empty once control characters are removed; write text"
            ) from None
        folder = self.root / task
        taken = (
            [int(p.name[:4]) for p in folder.glob("[0-9][0-9][0-9][0-9]-*.json")]
            if folder.is_dir()
            else []
        )
        seq = max(taken, default=0) + 1
        now = ctx.current()
        while True:
            digest = hashlib.sha256(
                json.dumps([task, seq, now.isoformat(), clean], sort_keys=True).encode()
            ).hexdigest()
            record = StoredRecord(
                id=f"{KIND_PREFIX[body.kind]}-{digest[:10]}",
                task=task,
                seq=seq,
                recorded_at=now,
                redacted=tuple(sorted(kinds)),
                body=redacted_body,
            )
            path = folder / f"{seq:04d}-{record.id}.json"
            try:
                publish_atomic(
                    path,
                    (record.model_dump_json(by_alias=True, indent=2) + "\n").encode(),
                    exclusive=True,
                )
            except FileExistsError:
                seq += 1
                continue
            self._parsed[path] = record
            return record
