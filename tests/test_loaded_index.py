"""The store's lookups (``reasoning/loaded.py``) answer as plain scans over the same records do.

The oracle is the scans admission used before the lookups existed, kept here: a record by id (the
first of that id), the records citing one, the standing conclusion on a subject, each advisor's
state from its whole history of outcomes, and what each advisor refused. Records come
in any order (two machines' clocks), with ids used twice and conclusions read before their
assessment; each read is asked again after later records were added to the index it shares.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from portfolio_optimiser.reasoning.availability import (
    AvailabilityInputs,
    ConsultationStatus,
    Outcome,
    derive_availability,
)
from portfolio_optimiser.reasoning.catalogue import Advisor, Catalogue
from portfolio_optimiser.reasoning.loaded import Loaded, normalise_subject
from portfolio_optimiser.reasoning.modes import Mode
from portfolio_optimiser.reasoning.negotiation import refused_by
from portfolio_optimiser.reasoning.policy import PlanOutcome
from portfolio_optimiser.reasoning.queries import consultations_of, open_disagreements
from portfolio_optimiser.reasoning.records import (
    AssessmentInput,
    ConsultationInput,
    DisagreementInput,
    Position,
    ResolutionInput,
    StoredConclusion,
    StoredPlan,
    StoredRecord,
    ValidationInput,
)

IDS = [f"r{i}" for i in range(8)]
SUBJECTS = ["Subject A", "subject  a", "Subject B"]
KINDS = ["assessment", "plan", "consultation", "disagreement", "resolution", "conclusion"]
T0 = datetime(2026, 12, 3, tzinfo=UTC)


ADVISORS = ("a", "b")
CATALOGUE = Catalogue(
    tuple(
        Advisor(
            id=a, name=a, adapter="openai-compatible", provider="p", model="m", capabilities=("x",)
        )
        for a in ADVISORS
    )
)
Consulted = tuple[str, ConsultationStatus, float | None, tuple[str, ...], str | None]
consulted_strategy = st.tuples(
    st.sampled_from(ADVISORS),
    st.sampled_from(list(ConsultationStatus)),
    st.none() | st.sampled_from([30.0, 7200.0]),
    st.sampled_from([(), ("response_format=json_schema",), ("output_cap=max_tokens",)]),
    st.none() | st.sampled_from(["b1", "b2"]),
)


def _body(
    kind: str, cited: str, subject: str, supersedes: str | None, consulted: Consulted
) -> object:
    if kind == "assessment":
        return AssessmentInput(subject=subject)
    if kind == "plan":
        return StoredPlan(
            assessment=cited,
            outcome=PlanOutcome.CONSULT,
            mode=Mode.STANDARD,
            mode_source="test",
            budget=1,
            reason="test",
        )
    if kind == "consultation":
        advisor, status, retry, refused, server = consulted
        return ConsultationInput(
            plan=cited,
            advisor=advisor,
            status=status,
            retry_after_seconds=retry,
            refused=refused,
            server=server,
        )
    if kind == "disagreement":
        return DisagreementInput(
            assessment=cited,
            positions=(Position(source="primary", position="yes"),),
            deciding_question="which?",
        )
    if kind == "resolution":
        return ResolutionInput(disagreement=cited, experiment="e", outcome="o", favours="primary")
    if kind == "conclusion":
        return StoredConclusion(assessment=cited, decision="accept", supersedes=supersedes)
    return ValidationInput(conclusion=cited, check="c", outcome="pass")


records_strategy = st.lists(
    st.builds(
        lambda rid, kind, cited, subject, supersedes, minute, task, seq, consulted: StoredRecord(
            id=rid,
            task=task,
            seq=seq,
            recorded_at=T0 + timedelta(minutes=minute),
            body=_body(kind, cited, subject, supersedes, consulted),
        ),
        st.sampled_from(IDS),
        st.sampled_from(KINDS),
        st.sampled_from(IDS),
        st.sampled_from(SUBJECTS),
        st.none() | st.sampled_from(IDS),
        st.integers(0, 5),
        st.sampled_from(["t1", "t2"]),
        st.integers(1, 4),
        consulted_strategy,
    ),
    max_size=30,
)


def _in_order(records: list[StoredRecord]) -> tuple[StoredRecord, ...]:
    return tuple(sorted(records, key=lambda r: (r.recorded_at, r.task, r.seq)))


# -- the oracle: the scans over every record ------------------------------------------------------


def _by_id(records: tuple[StoredRecord, ...], rid: str) -> StoredRecord | None:
    return next((r for r in records if r.id == rid), None)


def _citing(
    records: tuple[StoredRecord, ...], kind: str, field: str, rid: str
) -> list[StoredRecord]:
    return [r for r in records if r.kind == kind and getattr(r.body, field) == rid]


def _standing(records: tuple[StoredRecord, ...], subject: str) -> StoredRecord | None:
    conclusions = [r for r in records if isinstance(r.body, StoredConclusion)]
    superseded = {r.body.supersedes for r in conclusions if isinstance(r.body, StoredConclusion)}
    standing = None
    for record in conclusions:
        assert isinstance(record.body, StoredConclusion)
        assessment = _by_id(records, record.body.assessment)
        if (
            assessment is not None
            and isinstance(assessment.body, AssessmentInput)
            and normalise_subject(assessment.body.subject) == normalise_subject(subject)
            and record.id not in superseded
        ):
            standing = record
    return standing


def _history(records: tuple[StoredRecord, ...]) -> list[Outcome]:
    consulted = [r for r in records if isinstance(r.body, ConsultationInput)]
    return [
        Outcome(r.body.advisor, r.body.status, r.recorded_at, r.body.retry_after_seconds, order)
        for order, r in enumerate(consulted)
        if isinstance(r.body, ConsultationInput)
    ]


def _states(history: list[Outcome], now: datetime) -> list[object]:
    inputs = AvailabilityInputs(mode=Mode.STANDARD, now=now, history=history)
    return derive_availability(CATALOGUE, inputs)


def _answers_as_the_scans(loaded: Loaded) -> None:
    records = tuple(loaded.records)
    for now in (T0 + timedelta(minutes=3), T0 + timedelta(minutes=20), T0 + timedelta(hours=3)):
        assert _states(loaded.breaker_history(), now) == _states(_history(records), now)
    for advisor in ADVISORS:
        for since in (None, T0 + timedelta(minutes=2)):
            assert refused_by(loaded.refusal_evidence(advisor), advisor, since=since) == (
                refused_by(records, advisor, since=since)
            )
    for rid in IDS:
        assert loaded.by_id(rid) is _by_id(records, rid)
        for kind, field in (
            ("plan", "assessment"),
            ("consultation", "plan"),
            ("disagreement", "assessment"),
            ("resolution", "disagreement"),
            ("conclusion", "assessment"),
        ):
            assert loaded.citing(kind, rid) == _citing(records, kind, field, rid)
        plans = {r.id for r in _citing(records, "plan", "assessment", rid)}
        assert consultations_of(loaded, rid) == [
            r for r in records if isinstance(r.body, ConsultationInput) and r.body.plan in plans
        ]
        assert open_disagreements(loaded, rid) == [
            d
            for d in _citing(records, "disagreement", "assessment", rid)
            if not _citing(records, "resolution", "disagreement", d.id)
        ]
    for kind in KINDS:
        assert loaded.of_kind(kind) == [r for r in records if r.kind == kind]
    for task in ("t1", "t2"):
        assert loaded.of_task(task) == [r for r in records if r.task == task]
    for subject in SUBJECTS:
        assert loaded.standing_conclusion(subject) is _standing(records, subject)


@settings(max_examples=300, deadline=None)
@given(records_strategy)
def test_a_read_of_every_record_at_once_answers_as_the_scans(records: list[StoredRecord]) -> None:
    _answers_as_the_scans(Loaded(_in_order(records)))


@settings(max_examples=300, deadline=None)
@given(records_strategy)
def test_records_added_one_at_a_time_answer_as_the_scans_and_earlier_reads_stay_as_they_were(
    records: list[StoredRecord],
) -> None:
    reads = [Loaded()]
    for record in records:  # in arrival order: a record may sort before the last
        reads.append(reads[-1].plus(record))
    for seen, read in enumerate(reads):
        assert read.records == _in_order(records[:seen])
        _answers_as_the_scans(read)


@settings(max_examples=200, deadline=None)
@given(records_strategy, st.data())
def test_an_earlier_read_extended_again_does_not_disturb_the_newer_ones(
    records: list[StoredRecord], data: st.DataObject
) -> None:
    reads = [Loaded()]
    for record in records:
        reads.append(reads[-1].plus(record))
    fork_at = data.draw(st.integers(0, len(records)))
    other = data.draw(records_strategy)
    forked = reads[fork_at]
    for record in other:
        forked = forked.plus(record)
    assert forked.records == _in_order(records[:fork_at] + other)
    _answers_as_the_scans(forked)
    _answers_as_the_scans(reads[-1])
