"""The record store: the one writer admits, computes, redacts and writes; it never overwrites.

Every test builds its own ``Admission`` with the mode pinned to ``standard`` (CI sets ``CI=true``,
which would otherwise mean mode ``ci`` and no advisors), a fixed clock stepped with ``timedelta``
and a ``Presence`` that answers yes/no without looking at the machine. Secrets are assembled at
run time, so no committed file carries one.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.reasoning import reading as reading_module
from portfolio_optimiser.reasoning import store as store_module
from portfolio_optimiser.reasoning.availability import AdvisorStatus, ConsultationStatus
from portfolio_optimiser.reasoning.catalogue import Advisor, Catalogue, Presence
from portfolio_optimiser.reasoning.commit import NameTaken, SystemDisk
from portfolio_optimiser.reasoning.modes import Mode, ModeResolution
from portfolio_optimiser.reasoning.policy import LOCAL_REVIEW, Materiality, PlanOutcome
from portfolio_optimiser.reasoning.records import (
    AssessmentInput,
    ConclusionInput,
    ConsultationInput,
    DisagreementInput,
    Evidence,
    EvidenceKind,
    PlanInput,
    Position,
    ResolutionInput,
    Stance,
    StoredConclusion,
    StoredPlan,
    StoredRecord,
    ValidationInput,
)
from portfolio_optimiser.reasoning.store import (
    Admission,
    Loaded,
    Refusal,
    Store,
    availability_now,
)

NOW = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
TASK = "lillevik-school"
SUBJECT = "Pile foundation redesign saves 4 % of the ground works"
FILE_EVIDENCE = Evidence(kind=EvidenceKind.FILE, reference="bundles/lillevik/ir/costs.json")
TEST_EVIDENCE = Evidence(kind=EvidenceKind.TEST, reference="tests/test_validator.py::test_piles")
REVIEW = ("cost_review", "independent_reasoning")


def _advisor(ident: str, adapter: str, capabilities: tuple[str, ...], **extra: Any) -> Advisor:
    return Advisor(
        id=ident,
        name=ident.title(),
        adapter=adapter,
        provider="test-provider",
        model="test-model",
        capabilities=capabilities,
        **extra,
    )


# Three advisors on two adapters: alpha and beta share one transport, gamma has its own.
CATALOGUE = Catalogue(
    (
        _advisor("alpha", "shared-a", REVIEW),
        _advisor("beta", "shared-a", ("cost_review",), credential_env=("BETA_SERVICE_URL",)),
        _advisor("gamma", "other-b", REVIEW, executable="gamma-cli"),
    )
)
PRESENCE = Presence(env_names=frozenset({"BETA_SERVICE_URL"}), has_executable=lambda _name: True)


def files_under(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` (hidden temporaries included) and its bytes."""
    if not root.exists():
        return {}
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@dataclass
class Desk:
    """A store, a task and a clock that moves one minute for every record it is asked to write."""

    root: Path
    task: str = TASK
    now: datetime = NOW
    mode: ModeResolution = field(default_factory=lambda: ModeResolution(Mode.STANDARD, "env"))
    disabled: frozenset[str] = frozenset()

    @property
    def store(self) -> Store:
        return Store(self.root)

    def ctx(self) -> Admission:
        return Admission(
            catalogue=CATALOGUE,
            mode=self.mode,
            now=self.now,
            presence=PRESENCE,
            disabled=self.disabled,
        )

    def record(self, draft: Any, task: str | None = None) -> StoredRecord:
        self.now += timedelta(minutes=1)
        return self.store.record(task or self.task, draft, self.ctx())

    def refused(self, draft: Any, task: str | None = None) -> str:
        """Record ``draft``, expect a one-sentence refusal, and check nothing was written."""
        before = files_under(self.root)
        with pytest.raises(Refusal) as caught:
            self.record(draft, task)
        sentence = str(caught.value)
        assert sentence.strip(), "a refusal says why"
        assert "\n" not in sentence, sentence
        assert files_under(self.root) == before, "a refused record leaves no file behind"
        return sentence

    # --- the usual records -------------------------------------------------------------------

    def assess(
        self,
        subject: str = SUBJECT,
        materiality: Materiality = Materiality.HIGH,
        task: str | None = None,
        **extra: Any,
    ) -> StoredRecord:
        extra.setdefault("evidence", (FILE_EVIDENCE,))
        extra.setdefault("capabilities", REVIEW)
        extra.setdefault("hypothesis", "End-bearing piles can be shortened by two metres.")
        return self.record(
            AssessmentInput(subject=subject, materiality=materiality, **extra), task=task
        )

    def plan(self, assessment: StoredRecord, task: str | None = None) -> StoredRecord:
        return self.record(PlanInput(assessment=assessment.id), task=task)

    def answer(
        self, plan: StoredRecord, advisor: str, stance: Stance = Stance.SUPPORTS, **extra: Any
    ) -> StoredRecord:
        return self.record(
            ConsultationInput(
                plan=plan.id,
                advisor=advisor,
                status=ConsultationStatus.COMPLETED,
                stance=stance,
                conclusion=f"{advisor} says the piles {stance}",
                **extra,
            )
        )

    def failure(
        self,
        plan: StoredRecord,
        advisor: str,
        status: ConsultationStatus = ConsultationStatus.TIMEOUT,
    ) -> StoredRecord:
        return self.record(
            ConsultationInput(
                plan=plan.id, advisor=advisor, status=status, diagnostic="no answer in 90 s"
            )
        )

    def conclusion(
        self, assessment: StoredRecord, *consultations: StoredRecord, **extra: Any
    ) -> ConclusionInput:
        extra.setdefault("evidence", (TEST_EVIDENCE,))
        extra.setdefault("validation_plan", ("re-run the validator on the revised pile schedule",))
        return ConclusionInput(
            assessment=assessment.id,
            decision="Shorten the piles by two metres",
            consultations=tuple(c.id for c in consultations),
            **extra,
        )


@dataclass
class Consulted:
    """An assessment, its plan (alpha and gamma) and one opposing and one supporting answer."""

    desk: Desk
    assessment: StoredRecord
    plan: StoredRecord
    opposes: StoredRecord
    supports: StoredRecord

    def disagreement(self) -> DisagreementInput:
        return DisagreementInput(
            assessment=self.assessment.id,
            positions=(
                Position(source=self.opposes.id, position="the soil report rules it out"),
                Position(source=self.supports.id, position="the load test allows it"),
            ),
            deciding_question="Does the load test at pile 14 reach 1.5 times the design load?",
        )


@pytest.fixture
def desk(tmp_path: Path) -> Desk:
    return Desk(tmp_path)


@pytest.fixture
def consulted(desk: Desk) -> Consulted:
    assessment = desk.assess()
    plan = desk.plan(assessment)
    opposes = desk.answer(plan, "alpha", Stance.OPPOSES)
    supports = desk.answer(plan, "gamma", Stance.SUPPORTS)
    return Consulted(desk, assessment, plan, opposes, supports)


def disputed(consulted: Consulted) -> StoredRecord:
    return consulted.desk.record(consulted.disagreement())


def resolution(disagreement: StoredRecord, favours: str, **extra: Any) -> ResolutionInput:
    extra.setdefault("evidence", (TEST_EVIDENCE,))
    extra.setdefault("experiment", "load test of pile 14")
    extra.setdefault("outcome", "pile 14 carried 1.6 times the design load")
    return ResolutionInput(disagreement=disagreement.id, favours=favours, **extra)


# --- the whole chain is admitted ----------------------------------------------------------------


def test_a_complete_chain_is_admitted_and_each_record_keeps_its_kind(consulted: Consulted) -> None:
    desk = consulted.desk
    disagreement = disputed(consulted)
    settled = desk.record(resolution(disagreement, consulted.supports.id))
    concluded = desk.record(
        desk.conclusion(
            consulted.assessment,
            consulted.opposes,
            consulted.supports,
            disagreements=(disagreement.id,),
        )
    )
    validated = desk.record(
        ValidationInput(
            conclusion=concluded.id, check="validator", outcome="pass", evidence=(TEST_EVIDENCE,)
        )
    )
    kinds = [r.kind for r in desk.store.load().of_task(TASK)]
    assert kinds == [
        "assessment",
        "plan",
        "consultation",
        "consultation",
        "disagreement",
        "resolution",
        "conclusion",
        "validation",
    ]
    assert settled.body.favours == consulted.supports.id  # type: ignore[union-attr]
    assert validated.id.startswith("va-")


# --- admission refusals: one sentence naming what is wrong --------------------------------------


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    "materiality", [Materiality.MATERIAL, Materiality.HIGH, Materiality.CRITICAL]
)
def test_a_material_assessment_without_evidence_is_refused(
    desk: Desk, materiality: Materiality
) -> None:
    sentence = desk.refused(AssessmentInput(subject=SUBJECT, materiality=materiality))
    assert "`evidence`" in sentence
    assert str(materiality) in sentence


@pytest.mark.parametrize("materiality", [Materiality.TRIVIAL, Materiality.LOW])
def test_a_low_assessment_needs_no_evidence(desk: Desk, materiality: Materiality) -> None:
    assert (
        desk.record(AssessmentInput(subject=SUBJECT, materiality=materiality)).kind == "assessment"
    )


@pytest.mark.loadbearing
def test_a_consultation_of_an_advisor_the_plan_did_not_select_is_refused(desk: Desk) -> None:
    plan = desk.plan(desk.assess())
    assert [s.advisor for s in plan.body.selected] == ["alpha", "gamma"]  # type: ignore[union-attr]
    sentence = desk.refused(
        ConsultationInput(
            plan=plan.id,
            advisor="beta",
            status=ConsultationStatus.COMPLETED,
            stance=Stance.SUPPORTS,
            conclusion="fine",
        )
    )
    assert "'beta'" in sentence and "not selected" in sentence and plan.id in sentence


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    "missing",
    [{"stance": Stance.OPPOSES}, {"conclusion": "too long"}],
    ids=["no-conclusion", "no-stance"],
)
def test_a_completed_consultation_without_conclusion_or_stance_is_refused(
    desk: Desk, missing: dict[str, Any]
) -> None:
    plan = desk.plan(desk.assess())
    sentence = desk.refused(
        ConsultationInput(
            plan=plan.id, advisor="alpha", status=ConsultationStatus.COMPLETED, **missing
        )
    )
    assert "`conclusion`" in sentence and "`stance`" in sentence


@pytest.mark.loadbearing
@pytest.mark.parametrize("status", [ConsultationStatus.TIMEOUT, ConsultationStatus.MALFORMED])
def test_a_failed_consultation_carrying_a_conclusion_is_refused(
    desk: Desk, status: ConsultationStatus
) -> None:
    plan = desk.plan(desk.assess())
    sentence = desk.refused(
        ConsultationInput(plan=plan.id, advisor="alpha", status=status, conclusion="made up")
    )
    assert "`conclusion`" in sentence and str(status) in sentence


@pytest.mark.loadbearing
def test_a_conclusion_while_a_disagreement_on_its_assessment_is_open_is_refused(
    consulted: Consulted,
) -> None:
    desk = consulted.desk
    disagreement = disputed(consulted)
    draft = desk.conclusion(consulted.assessment, consulted.opposes, consulted.supports)
    sentence = desk.refused(draft)
    assert disagreement.id in sentence and "open" in sentence
    desk.record(resolution(disagreement, consulted.supports.id))
    assert desk.record(draft).kind == "conclusion", "once resolved, the same conclusion is admitted"


@pytest.mark.loadbearing
def test_a_conclusion_that_leaves_a_completed_consultation_uncited_is_refused(
    consulted: Consulted,
) -> None:
    desk = consulted.desk
    sentence = desk.refused(desk.conclusion(consulted.assessment, consulted.supports))
    assert consulted.opposes.id in sentence and "not cited" in sentence


@pytest.mark.loadbearing
@pytest.mark.parametrize("empty", ["evidence", "validation_plan"])
def test_a_conclusion_on_material_uncertainty_without_evidence_or_validation_plan_is_refused(
    desk: Desk, empty: str
) -> None:
    assessment = desk.assess(materiality=Materiality.MATERIAL)
    sentence = desk.refused(desk.conclusion(assessment, **{empty: ()}))
    assert f"`{empty}`" in sentence


@pytest.mark.loadbearing
def test_a_resolution_without_evidence_is_refused(consulted: Consulted) -> None:
    disagreement = disputed(consulted)
    sentence = consulted.desk.refused(resolution(disagreement, "primary", evidence=()))
    assert "`evidence`" in sentence


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("where", "text", "quoted"),
    [
        ("outcome", "we voted 2 to 1 for shorter piles", "voted"),
        ("outcome", "the majority of advisors prefer shorter piles", "majority"),
        ("experiment", "two of three advisors agree, so no test was needed", "two of three"),
    ],
)
def test_a_resolution_that_argues_by_head_count_is_refused(
    consulted: Consulted, where: str, text: str, quoted: str
) -> None:
    disagreement = disputed(consulted)
    sentence = consulted.desk.refused(
        resolution(disagreement, consulted.supports.id, **{where: text})
    )
    assert "head count" in sentence and quoted in sentence


def test_the_head_count_refusal_names_the_field_that_carries_the_count(
    consulted: Consulted,
) -> None:
    disagreement = disputed(consulted)
    sentence = consulted.desk.refused(
        resolution(disagreement, consulted.supports.id, experiment="a majority of advisors")
    )
    assert "`experiment`" in sentence


@pytest.mark.parametrize(
    "outcome",
    [
        "3 of 5 test piles carried 1.6 times the design load",
        "two of three boreholes show clay below 12 m",
    ],
)
def test_a_resolution_that_counts_measurements_not_advisors_is_admitted(
    consulted: Consulted, outcome: str
) -> None:
    disagreement = disputed(consulted)
    settled = consulted.desk.record(
        resolution(disagreement, consulted.supports.id, outcome=outcome)
    )
    assert settled.kind == "resolution"


@pytest.mark.loadbearing
def test_a_resolution_resting_only_on_prior_external_opinions_is_refused(
    consulted: Consulted,
) -> None:
    disagreement = disputed(consulted)
    opinion = Evidence(
        kind=EvidenceKind.PRIOR_EXTERNAL_OPINION, reference=consulted.supports.id, note="agrees"
    )
    sentence = consulted.desk.refused(
        resolution(disagreement, consulted.supports.id, evidence=(opinion, opinion))
    )
    assert "opinions are not an experiment" in sentence and "evidence" in sentence
    # One piece of real evidence beside the opinion is enough.
    assert consulted.desk.record(
        resolution(disagreement, consulted.supports.id, evidence=(opinion, TEST_EVIDENCE))
    )


def test_a_resolution_favouring_a_source_that_is_no_position_is_refused(
    consulted: Consulted,
) -> None:
    disagreement = disputed(consulted)
    sentence = consulted.desk.refused(resolution(disagreement, "cs-0000000000"))
    assert "`favours`" in sentence and "'cs-0000000000'" in sentence


def test_a_resolution_may_favour_neither_position(consulted: Consulted) -> None:
    disagreement = disputed(consulted)
    assert consulted.desk.record(resolution(disagreement, "neither")).kind == "resolution"


@pytest.mark.loadbearing
def test_a_second_resolution_of_the_same_disagreement_is_refused(consulted: Consulted) -> None:
    disagreement = disputed(consulted)
    consulted.desk.record(resolution(disagreement, consulted.supports.id))
    sentence = consulted.desk.refused(resolution(disagreement, consulted.opposes.id))
    assert disagreement.id in sentence and "already resolved" in sentence


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("authored", "value"), [("reviewed_by", ["alpha", "gamma"]), ("independent_review_count", 2)]
)
def test_an_authored_review_on_a_conclusion_is_refused_by_name(
    consulted: Consulted, authored: str, value: Any
) -> None:
    desk = consulted.desk
    draft = desk.conclusion(consulted.assessment, consulted.opposes, consulted.supports)
    sentence = desk.refused({**draft.model_dump(mode="json"), authored: value})
    assert f"`{authored}`" in sentence and "computed" in sentence


def test_an_authored_review_on_a_model_draft_is_refused_not_a_crash(consulted: Consulted) -> None:
    desk = consulted.desk
    draft = desk.conclusion(consulted.assessment, consulted.opposes, consulted.supports)
    forged = StoredConclusion(
        **draft.model_dump(), reviewed_by=("alpha",), independent_review_count=9
    )
    desk.refused(forged)


def test_a_plan_whose_selection_is_authored_is_refused(desk: Desk) -> None:
    assessment = desk.assess()
    sentence = desk.refused(
        {"kind": "plan", "assessment": assessment.id, "selected": [{"advisor": "beta"}]}
    )
    assert "`selected`" in sentence


@pytest.mark.loadbearing
def test_a_disagreement_with_one_position_is_refused(consulted: Consulted) -> None:
    one = consulted.disagreement().model_copy(
        update={"positions": consulted.disagreement().positions[:1]}
    )
    sentence = consulted.desk.refused(one)
    assert "`positions`" in sentence


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    "source", ["someone-else", "cs-0000000000", "failed-here", "completed-elsewhere"]
)
def test_a_position_whose_source_is_neither_primary_nor_a_completed_consultation_is_refused(
    consulted: Consulted, source: str
) -> None:
    desk = consulted.desk
    if source == "failed-here":
        source = desk.failure(consulted.plan, "alpha").id
    elif source == "completed-elsewhere":
        other = desk.plan(desk.assess(subject="Cheaper facade panels"))
        source = desk.answer(other, "alpha").id
    draft = DisagreementInput(
        assessment=consulted.assessment.id,
        positions=(
            Position(source="primary", position="shorter piles"),
            Position(source=source, position="longer piles"),
        ),
        deciding_question="Which load test governs?",
    )
    sentence = desk.refused(draft)
    assert repr(source) in sentence and "`primary`" in sentence


def test_a_disagreement_between_the_primary_hypothesis_and_a_consultation_is_admitted(
    consulted: Consulted,
) -> None:
    draft = DisagreementInput(
        assessment=consulted.assessment.id,
        positions=(
            Position(source="primary", position="shorter piles"),
            Position(source=consulted.opposes.id, position="keep the piles"),
        ),
        deciding_question="Does the load test reach 1.5 times the design load?",
    )
    assert consulted.desk.record(draft).kind == "disagreement"


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("field_name", "build"),
    [
        ("assessment", lambda c: PlanInput(assessment="as-0000000000")),
        ("assessment", lambda c: PlanInput(assessment=c.plan.id)),
        (
            "plan",
            lambda c: ConsultationInput(
                plan=c.assessment.id, advisor="alpha", status=ConsultationStatus.TIMEOUT
            ),
        ),
        (
            "conclusion",
            lambda c: ValidationInput(
                conclusion="cn-0000000000", check="x", outcome="pass", evidence=(TEST_EVIDENCE,)
            ),
        ),
        (
            "disagreement",
            lambda c: ResolutionInput(
                disagreement=c.opposes.id,
                experiment="x",
                outcome="y",
                favours="neither",
                evidence=(TEST_EVIDENCE,),
            ),
        ),
        (
            "consultations",
            lambda c: ConclusionInput(
                assessment=c.assessment.id,
                decision="d",
                consultations=(c.opposes.id, c.supports.id, "cs-0000000000"),
                evidence=(TEST_EVIDENCE,),
                validation_plan=("v",),
            ),
        ),
    ],
    ids=[
        "missing-assessment",
        "plan-as-assessment",
        "assessment-as-plan",
        "missing-conclusion",
        "consultation-as-disagreement",
        "missing-consultation",
    ],
)
def test_a_reference_to_a_record_that_does_not_exist_or_is_of_another_kind_is_refused(
    consulted: Consulted, field_name: str, build: Callable[[Consulted], Any]
) -> None:
    sentence = consulted.desk.refused(build(consulted))
    assert f"`{field_name}`" in sentence and "record of the store" in sentence


@pytest.mark.loadbearing
def test_a_reference_to_a_record_of_another_task_is_refused(desk: Desk) -> None:
    elsewhere = desk.assess(task="other-task")
    sentence = desk.refused(PlanInput(assessment=elsewhere.id))
    assert "`assessment`" in sentence and "other-task" in sentence and TASK in sentence


@pytest.mark.loadbearing
@pytest.mark.parametrize("task", ["../escape", "", "with space", ".hidden", "a/b", "x" * 129])
def test_a_bad_task_name_is_refused(desk: Desk, task: str) -> None:
    before = files_under(desk.root)
    with pytest.raises(Refusal) as caught:
        desk.store.record(task, AssessmentInput(subject=SUBJECT), desk.ctx())
    assert "\n" not in str(caught.value) and "not a valid name" in str(caught.value)
    assert files_under(desk.root) == before


def concluded_low(desk: Desk, subject: str = SUBJECT) -> tuple[StoredRecord, StoredRecord]:
    assessment = desk.assess(subject=subject, materiality=Materiality.LOW)
    return assessment, desk.record(desk.conclusion(assessment))


@pytest.mark.loadbearing
def test_a_second_conclusion_on_a_subject_with_a_standing_one_needs_new_evidence(
    desk: Desk,
) -> None:
    _, standing = concluded_low(desk)
    again = desk.assess(subject=SUBJECT.upper(), materiality=Materiality.LOW)
    sentence = desk.refused(desk.conclusion(again))
    assert standing.id in sentence and "`new_evidence`" in sentence


@pytest.mark.loadbearing
def test_a_conclusion_with_new_evidence_must_supersede_the_standing_one(desk: Desk) -> None:
    _, standing = concluded_low(desk)
    review = desk.assess(subject=SUBJECT, materiality=Materiality.LOW, new_evidence=True)
    sentence = desk.refused(desk.conclusion(review))
    assert "`supersedes`" in sentence and standing.id in sentence
    replaced = desk.record(desk.conclusion(review, supersedes=standing.id))
    assert replaced.body.supersedes == standing.id  # type: ignore[union-attr]
    # The replacement now stands: the next review must supersede it, not the old one.
    later = desk.assess(subject=SUBJECT, materiality=Materiality.LOW, new_evidence=True)
    assert replaced.id in desk.refused(desk.conclusion(later, supersedes=standing.id))


@pytest.mark.loadbearing
def test_a_validation_without_evidence_is_refused(desk: Desk) -> None:
    _, conclusion = concluded_low(desk)
    sentence = desk.refused(
        ValidationInput(conclusion=conclusion.id, check="validator", outcome="pass")
    )
    assert "`evidence`" in sentence


def test_a_misspelt_field_is_refused_by_name(desk: Desk) -> None:
    sentence = desk.refused({"kind": "assessment", "subject": SUBJECT, "hypotesis": "typo"})
    assert "`hypotesis`" in sentence


# --- a late answer counts: consultations are judged against the plan's snapshot ------------------


@pytest.mark.loadbearing
def test_a_late_answer_counts_though_the_circuit_opened_after_the_plan(desk: Desk) -> None:
    first = desk.plan(desk.assess())
    assert "alpha" in [s.advisor for s in first.body.selected]  # type: ignore[union-attr]
    second = desk.plan(desk.assess(subject="Cheaper facade panels"))
    desk.failure(second, "alpha")
    desk.failure(second, "alpha", ConsultationStatus.UNAVAILABLE)
    states = {s.advisor: s for s in availability_now(desk.store.load(), desk.ctx())}
    assert states["alpha"].status is AdvisorStatus.TEMPORARILY_FAILED
    # A plan made now would not ask alpha at all ...
    now_plan = desk.plan(desk.assess(subject="Cheaper roofing")).body
    assert isinstance(now_plan, StoredPlan)
    assert "alpha" not in [s.advisor for s in now_plan.selected]
    assert any(e.advisor == "alpha" and "temporarily_failed" in e.reason for e in now_plan.excluded)

    # ... yet its answer to the first plan, arriving now, is admitted against that plan's snapshot.
    late = desk.answer(first, "alpha", Stance.OPPOSES)
    assert late.body.status is ConsultationStatus.COMPLETED  # type: ignore[union-attr]
    assert desk.store.load().by_id(late.id) == late


# --- the writer computes the plan ---------------------------------------------------------------


@pytest.mark.loadbearing
def test_the_writer_computes_the_plan_from_mode_and_availability(desk: Desk) -> None:
    assessment = desk.assess()
    stored = desk.plan(assessment).body
    assert isinstance(stored, StoredPlan)
    assert stored.outcome is PlanOutcome.CONSULT
    assert (stored.mode, stored.mode_source, stored.budget) == (Mode.STANDARD, "env", 2)
    assert [(s.advisor, s.adapter) for s in stored.selected] == [
        ("alpha", "shared-a"),
        ("gamma", "other-b"),
    ]
    assert [e.advisor for e in stored.excluded] == ["beta"]
    assert "budget" in stored.excluded[0].reason
    assert [(s.advisor, s.status) for s in stored.availability] == [
        ("alpha", AdvisorStatus.AVAILABLE),
        ("beta", AdvisorStatus.AVAILABLE),
        ("gamma", AdvisorStatus.AVAILABLE),
    ]
    assert stored.local_review == () and stored.reuse is None


def test_the_plan_snapshot_records_why_an_advisor_was_not_available(desk: Desk) -> None:
    desk.disabled = frozenset({"gamma"})
    stored = desk.plan(desk.assess()).body
    assert isinstance(stored, StoredPlan)
    gamma = next(s for s in stored.availability if s.advisor == "gamma")
    assert gamma.status is AdvisorStatus.DISABLED and "DISABLE" in gamma.reason
    assert [s.advisor for s in stored.selected] == ["alpha", "beta"]


@pytest.mark.loadbearing
def test_in_mode_ci_the_plan_decides_locally_with_the_five_step_local_review(desk: Desk) -> None:
    desk.mode = ModeResolution(Mode.CI, "ci")
    stored = desk.plan(desk.assess(materiality=Materiality.CRITICAL)).body
    assert isinstance(stored, StoredPlan)
    assert stored.outcome is PlanOutcome.DECIDE_LOCALLY
    assert (stored.mode, stored.mode_source, stored.budget) == (Mode.CI, "ci", 0)
    assert stored.selected == ()
    assert len(stored.local_review) == 5 and stored.local_review == LOCAL_REVIEW
    assert {s.status for s in stored.availability} == {AdvisorStatus.DISABLED}


@pytest.mark.loadbearing
def test_a_later_assessment_of_a_concluded_subject_reuses_the_standing_conclusion(
    desk: Desk,
) -> None:
    _, standing = concluded_low(desk)
    respelt = "  " + SUBJECT.upper().replace(" ", "   \t") + "\n"
    stored = desk.plan(desk.assess(subject=respelt)).body
    assert isinstance(stored, StoredPlan)
    assert stored.outcome is PlanOutcome.REUSE_PRIOR
    assert stored.reuse == standing.id and standing.id in stored.reason
    assert stored.selected == ()


@pytest.mark.loadbearing
def test_new_evidence_opens_a_concluded_subject_to_consultation_again(desk: Desk) -> None:
    concluded_low(desk)
    stored = desk.plan(desk.assess(new_evidence=True)).body
    assert isinstance(stored, StoredPlan)
    assert stored.outcome is PlanOutcome.CONSULT and stored.reuse is None


# --- the review is computed from the consultations cited -----------------------------------------


@pytest.mark.loadbearing
def test_two_answers_through_one_adapter_are_one_independent_review(desk: Desk) -> None:
    desk.disabled = frozenset({"gamma"})
    assessment = desk.assess()
    plan = desk.plan(assessment)
    assert [s.adapter for s in plan.body.selected] == ["shared-a", "shared-a"]  # type: ignore[union-attr]
    one = desk.answer(plan, "alpha")
    two = desk.answer(plan, "beta")
    body = desk.record(desk.conclusion(assessment, one, two)).body
    assert isinstance(body, StoredConclusion)
    assert body.reviewed_by == ("alpha", "beta")
    assert body.independent_review_count == 1


@pytest.mark.loadbearing
def test_two_answers_through_different_adapters_are_two_independent_reviews(
    consulted: Consulted,
) -> None:
    desk = consulted.desk
    body = desk.record(
        desk.conclusion(consulted.assessment, consulted.opposes, consulted.supports)
    ).body
    assert isinstance(body, StoredConclusion)
    assert body.reviewed_by == ("alpha", "gamma")
    assert body.independent_review_count == 2


def test_a_failed_consultation_cited_by_a_conclusion_is_no_review(desk: Desk) -> None:
    assessment = desk.assess()
    plan = desk.plan(assessment)
    answered = desk.answer(plan, "alpha")
    failed = desk.failure(plan, "gamma")
    body = desk.record(desk.conclusion(assessment, answered, failed)).body
    assert isinstance(body, StoredConclusion)
    assert (body.reviewed_by, body.independent_review_count) == (("alpha",), 1)


# --- files: one per record, never overwritten -----------------------------------------------------


@pytest.mark.loadbearing
def test_each_record_is_one_json_file_in_its_task_folder_that_reads_back(
    consulted: Consulted, tmp_path: Path
) -> None:
    written = [consulted.assessment, consulted.plan, consulted.opposes, consulted.supports]
    folder = tmp_path / "reasoning" / TASK
    paths = sorted(folder.iterdir())
    assert [p.name for p in paths] == [f"{r.seq:04d}-{r.id}.json" for r in written]
    for path, record in zip(paths, written, strict=True):
        assert StoredRecord.model_validate_json(path.read_bytes()) == record
    assert consulted.desk.store.load().records == tuple(written)


@pytest.mark.loadbearing
def test_writing_never_overwrites_even_the_same_record_at_the_same_instant(desk: Desk) -> None:
    ctx = desk.ctx()
    draft = AssessmentInput(subject=SUBJECT, materiality=Materiality.LOW)
    seen: dict[str, bytes] = {}
    for _ in range(10):
        desk.store.record(TASK, draft, ctx)
        now = {n: b for n, b in files_under(desk.root).items() if n.endswith(".json")}
        for name, data in seen.items():
            assert now[name] == data, f"{name} changed after it was written"
        seen = now
    assert len(seen) == 10
    assert len({StoredRecord.model_validate_json(b).id for b in seen.values()}) == 10


@pytest.mark.loadbearing
def test_a_record_joins_the_store_s_view_even_when_another_read_moved_it_on_meanwhile(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread's read (the committer's, after a batch) takes in another writer's record
    while this one's assessment is admitted: the assessment, staged and in no log yet, must
    still be in the view the plan citing it is admitted against, and numbered before it."""
    store = Store(desk.root)
    ctx = desk.ctx()
    draft = AssessmentInput(subject=SUBJECT, materiality=Materiality.LOW)
    store.record("other-task", draft, ctx)
    real_admit = store_module.admit
    interleaved: list[str] = []

    def admit_while_another_read_moves_on(*args: Any) -> Any:
        body = real_admit(*args)
        if not interleaved:
            interleaved.append("another writer's record, then a read")
            Store(desk.root).record("other-task", args[0], ctx)
            store.load()
        return body

    monkeypatch.setattr(store_module, "admit", admit_while_another_read_moves_on)
    monkeypatch.setattr(store, "_commit_soon", lambda: None)  # staged until the commit
    assessment = store.record(TASK, draft, ctx, durable=False)
    assert interleaved, "the other read came between the admission and the record"
    assert assessment.id in {r.id for r in store.load().records}
    plan = store.record(TASK, PlanInput(assessment=assessment.id), ctx)
    assert (assessment.seq, plan.seq) == (1, 2)
    names = sorted(p.name[:4] for p in (desk.root / "reasoning" / TASK).iterdir())
    assert names == ["0001", "0002"]


@pytest.mark.loadbearing
def test_a_record_another_process_published_but_never_logged_keeps_its_number(
    desk: Desk,
) -> None:
    """A worker published a record in a run's task and died before it logged it: the
    processor's store, whose read came before, numbers its own first record there after it."""
    store = Store(desk.root)
    ctx = desk.ctx()
    draft = AssessmentInput(subject=SUBJECT, materiality=Materiality.LOW)
    elsewhere = store.record("other-task", draft, ctx)  # read once, and the log made
    folder = desk.root / "reasoning" / TASK
    folder.mkdir()
    (folder / f"0007-{elsewhere.id}.json").write_bytes(
        (desk.root / "reasoning" / "other-task" / f"0001-{elsewhere.id}.json").read_bytes()
    )
    assert store.record(TASK, draft, ctx).seq == 8


@pytest.mark.loadbearing
def test_two_stores_taking_turns_in_one_task_number_past_each_other(desk: Desk) -> None:
    """The processor's store and a worker's both write to a run's task, each after it has
    listed the folder once: each one's next record comes after the other's it has read."""
    processor, worker = Store(desk.root), Store(desk.root)
    ctx = desk.ctx()
    draft = AssessmentInput(subject=SUBJECT, materiality=Materiality.LOW)
    numbers = []
    for turn in range(6):
        store = (processor, worker)[turn % 2]
        store.commit()  # what the other one staged is published and logged
        store.load()
        numbers.append(store.record(TASK, draft, ctx).seq)
        store.commit()
    assert numbers == [1, 2, 3, 4, 5, 6]


@pytest.mark.loadbearing
def test_records_made_after_the_store_s_folder_was_deleted_get_numbers_of_their_own(
    desk: Desk,
) -> None:
    store = Store(desk.root)
    ctx = desk.ctx()
    draft = AssessmentInput(subject=SUBJECT, materiality=Materiality.LOW)
    store.record(TASK, draft, ctx)
    shutil.rmtree(desk.root / "reasoning")
    staged = [
        store.record(
            TASK, draft.model_copy(update={"subject": f"{SUBJECT} ({n})"}), ctx, durable=False
        )
        for n in range(2)
    ]
    store.commit()
    assert staged[0].seq != staged[1].seq
    assert len(list((desk.root / "reasoning" / TASK).iterdir())) == 2


@pytest.mark.loadbearing
def test_a_full_listing_while_a_record_is_made_neither_misses_it_nor_calls_it_unreadable(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The committer's read may be the minute's full listing, and may fall between a record
    staged and the record handed to the view."""
    store = Store(desk.root)
    ctx = desk.ctx()
    draft = AssessmentInput(subject=SUBJECT, materiality=Materiality.LOW)
    store.record("other-task", draft, ctx)
    monkeypatch.setattr(reading_module, "FULL_LISTING_S", 0.0)  # every read lists everything
    handed = reading_module.Reader.wrote
    listings: list[Loaded] = []

    def wrote_after_a_listing(reader: reading_module.Reader, *args: Any) -> None:
        listings.append(reader.load())
        handed(reader, *args)

    monkeypatch.setattr(reading_module.Reader, "wrote", wrote_after_a_listing)
    monkeypatch.setattr(store, "_commit_soon", lambda: None)  # staged until the commit
    assessment = store.record(TASK, draft, ctx, durable=False)
    assert [listing.unreadable for listing in listings] == [()], "not read from the disk"
    loaded = store.load()
    assert assessment.id in {r.id for r in loaded.records}
    assert loaded.unreadable == ()


@pytest.mark.loadbearing
def test_a_name_taken_before_the_commit_is_not_overwritten_and_the_commit_says_so(
    desk: Desk,
) -> None:
    first = desk.assess(materiality=Materiality.LOW)
    squatter = b"another writer got here first\n"

    class Squatted(SystemDisk):
        """A second process breaks the one-writer rule as soon as the record is staged."""

        def stage(self, path: Path, data: bytes) -> Path:
            tmp = super().stage(path, data)
            path.write_bytes(squatter)
            return tmp

    store = Store(desk.root, disk=Squatted())
    draft = AssessmentInput(subject="Cheaper facade panels", materiality=Materiality.LOW)
    staged = store.record(TASK, draft, desk.ctx(), durable=False)
    folder = desk.root / "reasoning" / TASK
    taken = folder / f"{staged.seq:04d}-{staged.id}.json"
    with pytest.raises(NameTaken) as caught:
        store.commit()  # the commit in the background may have met it first: this one says so
    assert str(caught.value).startswith(f"{taken}: another writer published a different record")
    assert taken.read_bytes() == squatter, "the other writer's file is untouched"
    assert (folder / f"0001-{first.id}.json").is_file()
    assert not [p for p in folder.iterdir() if p.name.startswith(".")], "no temporary left behind"


@pytest.mark.loadbearing
def test_unreadable_files_are_reported_and_do_not_stop_loading(consulted: Consulted) -> None:
    desk = consulted.desk
    folder = desk.root / "reasoning" / TASK
    (folder / "0090-broken.json").write_bytes(b"{not json at all")
    (folder / "0091-wrong-shape.json").write_text('{"schema": "something else"}', "utf-8")
    (desk.root / "reasoning" / "other-task").mkdir()
    (desk.root / "reasoning" / "other-task" / "0001-truncated.json").write_bytes(b'{"id": "as-')
    loaded = desk.store.load()
    assert [r.id for r in loaded.records] == [
        consulted.assessment.id,
        consulted.plan.id,
        consulted.opposes.id,
        consulted.supports.id,
    ]
    assert sorted(path for path, _ in loaded.unreadable) == [
        f"{TASK}/0090-broken.json",
        f"{TASK}/0091-wrong-shape.json",
        "other-task/0001-truncated.json",
    ]
    assert all(why and "\n" not in why for _, why in loaded.unreadable)
    # The store keeps working beside them.
    later = desk.record(
        desk.conclusion(consulted.assessment, consulted.opposes, consulted.supports)
    )
    assert later.seq == 92


# --- redaction happens before anything is written -------------------------------------------------


def secrets() -> dict[str, str]:
    """Secret-shaped strings assembled at run time, by the kind redaction should name."""
    return {
        "anthropic-key": "sk-" + "ant-" + "bQ7" * 8,
        "github-token": "gh" + "p_" + "a" * 36,
        "aws-access-key-id": "AK" + "IA" + "B" * 16,
        "assignment": "pass" + "word=" + "x" * 12,
    }


def everything_written(root: Path) -> bytes:
    return b"\n".join(files_under(root).values())


@pytest.mark.loadbearing
def test_secrets_in_an_assessment_and_a_diagnostic_never_reach_a_file(desk: Desk) -> None:
    shapes = secrets()
    leaked = " ".join(shapes.values())
    assessment = desk.assess(hypothesis=f"The log shows {leaked} near the pile schedule.")
    plan = desk.plan(assessment)
    failed = desk.record(
        ConsultationInput(
            plan=plan.id,
            advisor="alpha",
            status=ConsultationStatus.AUTH_FAILED,
            diagnostic=f"401 for key {shapes['anthropic-key']}; {shapes['assignment']}",
        )
    )
    on_disk = everything_written(desk.root)
    for secret in shapes.values():
        assert secret.encode() not in on_disk
    assert "x" * 12 not in on_disk.decode()
    assert set(assessment.redacted) == set(shapes)
    assert set(failed.redacted) == {"anthropic-key", "assignment"}
    hypothesis = assessment.body.hypothesis  # type: ignore[union-attr]
    assert "[redacted:anthropic-key]" in hypothesis and "near the pile schedule" in hypothesis
    assert "password=[redacted:assignment]" in hypothesis
    # What load() returns is what was written: redacted.
    reread = desk.store.load().by_id(failed.id)
    assert reread is not None and "[redacted:anthropic-key]" in reread.body.diagnostic  # type: ignore[union-attr,operator]


@pytest.mark.loadbearing
def test_an_escape_sequence_is_stripped_before_writing(desk: Desk) -> None:
    esc = "\x1b"
    record = desk.assess(hypothesis=f"{esc}[31mred{esc}[0m text{esc}]0;owned\x07 end")
    assert record.body.hypothesis == "red text end"  # type: ignore[union-attr]
    assert "control-sequence" in record.redacted
    on_disk = everything_written(desk.root)
    assert b"\x1b" not in on_disk and b"\\u001b" not in on_disk and b"owned" not in on_disk


@pytest.mark.loadbearing
@pytest.mark.parametrize("where", ["hypothesis", "diagnostic"])
def test_a_private_key_with_its_body_is_refused_and_nothing_is_written(
    desk: Desk, where: str
) -> None:
    key = "-----BEGIN " + "RSA PRIVATE " + "KEY-----\n" + "MIIEow" + "IBAAKCAQEA" * 4 + "\n"
    if where == "hypothesis":
        before = files_under(desk.root)
        with pytest.raises(Refusal) as caught:
            desk.store.record(
                TASK, AssessmentInput(subject=SUBJECT, hypothesis=f"see {key}"), desk.ctx()
            )
        assert files_under(desk.root) == before == {}
    else:
        plan = desk.plan(desk.assess())
        before = files_under(desk.root)
        with pytest.raises(Refusal) as caught:
            desk.store.record(
                TASK,
                ConsultationInput(
                    plan=plan.id,
                    advisor="alpha",
                    status=ConsultationStatus.ERROR,
                    diagnostic=key,
                ),
                desk.ctx(),
            )
        assert files_under(desk.root) == before
    assert "private key" in str(caught.value) and "\n" not in str(caught.value)
    assert b"IBAAKCAQEA" not in everything_written(desk.root)


def test_a_subject_that_is_only_control_characters_is_refused_not_a_crash(desk: Desk) -> None:
    desk.refused(AssessmentInput(subject="\x1b[2J\x07", materiality=Materiality.LOW))


def test_records_written_in_one_task_are_not_seen_as_another_tasks(desk: Desk) -> None:
    desk.assess(materiality=Materiality.LOW)
    desk.assess(materiality=Materiality.LOW, task="other-task")
    loaded = desk.store.load()
    assert [r.task for r in loaded.of_task(TASK)] == [TASK]
    assert sorted(p.name for p in (desk.root / "reasoning").iterdir() if p.is_dir()) == [
        "lillevik-school",
        "other-task",
    ]


# --- the store's own writes ---------------------------------------------------------------------


def test_a_store_that_wrote_records_loads_what_a_fresh_store_reads(desk: Desk) -> None:
    """A record the store wrote joins the load it was admitted against, in its place: what the
    same store then loads (nothing parsed again) is what a fresh one reads from the files."""
    store = Store(desk.root)
    written = []
    for task, minutes in (("b-task", 1), ("a-task", 1), ("b-task", -5), ("c-task", 2)):
        desk.now += timedelta(minutes=minutes)  # the clock may even step back
        draft = AssessmentInput(
            subject=f"pile {len(written)}",
            materiality=Materiality.HIGH,
            evidence=(FILE_EVIDENCE,),
            capabilities=REVIEW,
            hypothesis="End-bearing piles can be shortened by two metres.",
        )
        written.append(store.record(task, draft, desk.ctx()))
        assert store.load().records == Store(desk.root).load().records
    assert [r.id for r in written] == [r.id for r in written if r in store.load().records]
