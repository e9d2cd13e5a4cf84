"""The transport contract: concurrent asking, plan-ordered records, typed failures, opinions marked.

No network and no pytest-asyncio: each test drives its coroutine with ``asyncio.run``. The fake
transports answer from memory; the only waits are ``asyncio.sleep(0.05)`` in the concurrency test
and ``asyncio.Event``s elsewhere. Every test pins mode ``standard`` in its ``Admission``: CI sets
``CI=true``, which would otherwise mean mode ``ci`` and no advisor at all.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.cli import main
from portfolio_optimiser.config import load_config
from portfolio_optimiser.context.models import Project
from portfolio_optimiser.learning import VerdictStore
from portfolio_optimiser.pipeline.budget import Budget, TokenMeter
from portfolio_optimiser.pipeline.run import ReasoningSession, RunSettings, run_project
from portfolio_optimiser.pipeline.state import RunState
from portfolio_optimiser.reasoning.availability import ConsultationStatus
from portfolio_optimiser.reasoning.catalogue import Advisor, Catalogue, Presence
from portfolio_optimiser.reasoning.environment import admission_for
from portfolio_optimiser.reasoning.modes import Mode, ModeResolution
from portfolio_optimiser.reasoning.negotiation import negotiated, refused_by
from portfolio_optimiser.reasoning.policy import Confidence, Materiality
from portfolio_optimiser.reasoning.records import (
    AssessmentInput,
    ConsultationInput,
    Evidence,
    EvidenceKind,
    PlanInput,
    Stance,
    StoredPlan,
    StoredRecord,
    Usage,
)
from portfolio_optimiser.reasoning.store import Admission, Store
from portfolio_optimiser.reasoning.transport import (
    AdvisorAuthFailed,
    AdvisorError,
    AdvisorRateLimited,
    AdvisorTimeout,
    AdvisorUnavailable,
    Answer,
    EmptyAnswer,
    MalformedAnswer,
    Question,
    Transport,
    consult,
)

from .conftest import REPO
from .pipeline_helpers import small_bundle

NOW = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
TASK = "lillevik-school"
REVIEW = ("cost_review", "independent_reasoning")
EVIDENCE = Evidence(kind=EvidenceKind.FILE, reference="bundles/lillevik/ir/costs.json")
QUESTION = Question(
    subject="Shorter piles at Lillevik school",
    hypothesis="End-bearing piles can be two metres shorter.",
    evidence=(EVIDENCE,),
)


def _advisor(ident: str, adapter: str, **extra: Any) -> Advisor:
    return Advisor(
        id=ident,
        name=ident.title(),
        adapter=adapter,
        provider="test-provider",
        model="test-model",
        capabilities=REVIEW,
        **extra,
    )


CATALOGUE = Catalogue((_advisor("alpha", "shared-a"), _advisor("gamma", "other-b")))


def admission(catalogue: Catalogue = CATALOGUE) -> Admission:
    return Admission(
        catalogue=catalogue,
        mode=ModeResolution(Mode.STANDARD, "env"),
        now=NOW,
        presence=Presence(env_names=frozenset(), has_executable=lambda _name: True),
    )


def planned(root: Path, ctx: Admission) -> tuple[Store, StoredRecord]:
    store = Store(root)
    assessment = store.record(
        TASK,
        AssessmentInput(
            subject=QUESTION.subject,
            materiality=Materiality.HIGH,
            hypothesis=QUESTION.hypothesis,
            evidence=(EVIDENCE,),
            capabilities=REVIEW,
        ),
        ctx,
    )
    plan = store.record(TASK, PlanInput(assessment=assessment.id), ctx)
    return store, plan


def selected(plan: StoredRecord) -> list[str]:
    assert isinstance(plan.body, StoredPlan)
    return [s.advisor for s in plan.body.selected]


def body(record: StoredRecord) -> ConsultationInput:
    assert isinstance(record.body, ConsultationInput)
    return record.body


def answer(conclusion: str = "the piles hold", stance: Stance = Stance.SUPPORTS) -> Answer:
    return Answer(
        stance=stance,
        conclusion=conclusion,
        confidence=Confidence.MEDIUM,
        usage=Usage(input_tokens=100, output_tokens=20),
    )


def run_consult(
    root: Path,
    transports: Mapping[str, Transport] | None,
    *,
    deadline_s: float = 5.0,
    ctx: Admission | None = None,
) -> list[StoredRecord]:
    ctx = ctx or admission()
    store, plan = planned(root, ctx)
    assert selected(plan) == ["alpha", "gamma"]

    async def go() -> list[StoredRecord]:
        # The outer bound keeps a broken deadline from hanging the suite.
        return await asyncio.wait_for(
            consult(store, TASK, plan, QUESTION, ctx, deadline_s=deadline_s, transports=transports),
            timeout=10,
        )

    records = asyncio.run(go())
    store.commit()  # as the run that consulted does before it returns: then others read them
    return records


@dataclass
class Timed:
    """Answers after ``delay`` seconds and notes when it started and finished."""

    delay: float
    reply: Answer
    spans: list[tuple[float, float]] = field(default_factory=list)

    async def exchange(self, question: Question, *, deadline_s: float) -> Answer:
        started = time.monotonic()
        await asyncio.sleep(self.delay)
        self.spans.append((started, time.monotonic()))
        return self.reply


@dataclass
class Raising:
    error: BaseException

    async def exchange(self, question: Question, *, deadline_s: float) -> Answer:
        raise self.error


class Silent:
    """Never answers."""

    async def exchange(self, question: Question, *, deadline_s: float) -> Answer:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


@dataclass
class Fixed:
    reply: Any

    async def exchange(self, question: Question, *, deadline_s: float) -> Any:
        return self.reply


# --- concurrency and order ----------------------------------------------------------------------


@pytest.mark.loadbearing
def test_selected_advisors_are_asked_concurrently(tmp_path: Path) -> None:
    first = Timed(0.05, answer("alpha holds"))
    second = Timed(0.05, answer("gamma holds"))
    records = run_consult(tmp_path, {"alpha": first, "gamma": second})
    (a_start, a_end), (g_start, g_end) = first.spans[0], second.spans[0]
    assert a_start < g_end and g_start < a_end, "the two exchanges overlap"
    # Wall time of the asking (not of writing the records): less than asking one after the other.
    assert max(a_end, g_end) - min(a_start, g_start) < first.delay + second.delay
    assert [body(r).status for r in records] == [ConsultationStatus.COMPLETED] * 2


@pytest.mark.loadbearing
def test_results_are_recorded_in_plan_order_when_the_second_advisor_answers_first(
    tmp_path: Path,
) -> None:
    arrivals: list[str] = []

    @dataclass
    class Ordered:
        name: str
        wait_for: asyncio.Event | None = None
        then_set: asyncio.Event | None = None

        async def exchange(self, question: Question, *, deadline_s: float) -> Answer:
            if self.wait_for is not None:
                await self.wait_for.wait()
            arrivals.append(self.name)
            if self.then_set is not None:
                self.then_set.set()
            return answer(f"{self.name} answers")

    gamma_answered = asyncio.Event()
    records = run_consult(
        tmp_path,
        {
            "alpha": Ordered("alpha", wait_for=gamma_answered),
            "gamma": Ordered("gamma", then_set=gamma_answered),
        },
    )
    assert arrivals == ["gamma", "alpha"]
    assert [body(r).advisor for r in records] == ["alpha", "gamma"]
    assert [r.seq for r in records] == sorted(r.seq for r in records)
    on_disk = [r for r in Store(tmp_path).load().records if r.kind == "consultation"]
    assert [body(r).advisor for r in on_disk] == ["alpha", "gamma"]


@pytest.mark.loadbearing
def test_a_completed_consultation_keeps_the_normalised_answer_and_its_evidence(
    tmp_path: Path,
) -> None:
    reply = Answer(
        stance=Stance.OPPOSES,
        conclusion="the soil is too soft",
        assumptions=("the borehole is representative",),
        risks=("settlement",),
        falsifiers=("a load test above 1.5x",),
        confidence=Confidence.HIGH,
        usage=Usage(input_tokens=321, output_tokens=45),
    )
    records = run_consult(tmp_path, {"alpha": Fixed(reply), "gamma": Fixed(answer())})
    alpha = body(records[0])
    assert (alpha.status, alpha.stance, alpha.conclusion) == (
        ConsultationStatus.COMPLETED,
        Stance.OPPOSES,
        "the soil is too soft",
    )
    assert alpha.falsifiers == ("a load test above 1.5x",)
    assert alpha.usage == Usage(input_tokens=321, output_tokens=45)
    assert alpha.question == f"Subject: {QUESTION.subject}"
    assert alpha.evidence == (EVIDENCE,)


# --- failures are typed and recorded ------------------------------------------------------------


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("error", "status"),
    [
        (AdvisorTimeout("alpha", "no answer in 90 s"), ConsultationStatus.TIMEOUT),
        (AdvisorUnavailable("alpha", "connection refused"), ConsultationStatus.UNAVAILABLE),
        (
            AdvisorRateLimited("alpha", "429 slow down", retry_after_s=30),
            ConsultationStatus.RATE_LIMITED,
        ),
        (AdvisorAuthFailed("alpha", "401 credential refused"), ConsultationStatus.AUTH_FAILED),
        (MalformedAnswer("alpha", "not JSON"), ConsultationStatus.MALFORMED),
        (EmptyAnswer("alpha", "nothing came back"), ConsultationStatus.EMPTY),
        (AdvisorError("alpha", "the adapter gave up"), ConsultationStatus.ERROR),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_each_typed_error_is_recorded_with_its_status(
    tmp_path: Path, error: AdvisorError, status: ConsultationStatus
) -> None:
    records = run_consult(tmp_path, {"alpha": Raising(error), "gamma": Fixed(answer())})
    failed, answered = body(records[0]), body(records[1])
    assert failed.status is status
    assert failed.stance is None and failed.conclusion is None
    assert failed.diagnostic == error.message
    expected_retry = 30 if status is ConsultationStatus.RATE_LIMITED else None
    assert failed.retry_after_seconds == expected_retry
    assert answered.status is ConsultationStatus.COMPLETED


@pytest.mark.loadbearing
def test_an_exchange_slower_than_the_deadline_is_recorded_as_timeout(tmp_path: Path) -> None:
    records = run_consult(tmp_path, {"alpha": Silent(), "gamma": Fixed(answer())}, deadline_s=0.02)
    timed_out = body(records[0])
    assert timed_out.status is ConsultationStatus.TIMEOUT
    assert timed_out.duration_ms == 20
    assert timed_out.diagnostic is not None and "0.02 s" in timed_out.diagnostic
    assert body(records[1]).status is ConsultationStatus.COMPLETED


@pytest.mark.loadbearing
def test_an_unexpected_exception_in_an_adapter_is_an_error_outcome_not_a_crash(
    tmp_path: Path,
) -> None:
    boom = KeyError("choices")
    records = run_consult(tmp_path, {"alpha": Raising(boom), "gamma": Fixed(answer())})
    failed = body(records[0])
    assert failed.status is ConsultationStatus.ERROR
    assert failed.diagnostic == "KeyError: 'choices'"
    assert body(records[1]).status is ConsultationStatus.COMPLETED


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    "error",
    [
        AdvisorUnavailable("alpha", "upstream said:\n  502 Bad Gateway\n  retry later\n"),
        RuntimeError("line one\nline two"),
    ],
    ids=["typed", "unexpected"],
)
def test_the_diagnostic_is_one_line(tmp_path: Path, error: BaseException) -> None:
    records = run_consult(tmp_path, {"alpha": Raising(error), "gamma": Fixed(answer())})
    diagnostic = body(records[0]).diagnostic
    assert diagnostic and "\n" not in diagnostic and "\r" not in diagnostic


def test_a_diagnostic_carrying_a_secret_is_redacted_in_the_record(tmp_path: Path) -> None:
    secret = "sk-" + "ant-" + "kQ7" * 8
    records = run_consult(
        tmp_path,
        {"alpha": Raising(AdvisorAuthFailed("alpha", f"key {secret} refused")), "gamma": Silent()},
        deadline_s=0.01,
    )
    assert body(records[0]).diagnostic == "key [redacted:anthropic-key] refused"
    assert "anthropic-key" in records[0].redacted
    assert all(secret.encode() not in p.read_bytes() for p in tmp_path.rglob("*.json"))


def test_a_selected_advisor_without_an_exchange_is_recorded_as_unavailable(tmp_path: Path) -> None:
    records = run_consult(tmp_path, {"gamma": Fixed(answer())})
    missing = body(records[0])
    assert missing.status is ConsultationStatus.UNAVAILABLE
    assert missing.diagnostic == "no exchange was given for it"
    assert body(records[1]).status is ConsultationStatus.COMPLETED


class NotTheAdvisors(Exception):
    """Stands for a budget refusal: the run's limit, not the advisor's failure."""


@pytest.mark.loadbearing
def test_an_exception_that_is_not_the_advisors_is_recorded_as_cancelled_then_raised(
    tmp_path: Path,
) -> None:
    ctx = admission()
    store, plan = planned(tmp_path, ctx)
    transports = {"alpha": Raising(NotTheAdvisors("over budget")), "gamma": Fixed(answer())}
    with pytest.raises(NotTheAdvisors):
        asyncio.run(
            consult(
                store,
                TASK,
                plan,
                QUESTION,
                ctx,
                deadline_s=5,
                transports=transports,
                passthrough=(NotTheAdvisors,),
            )
        )
    consultations = [body(r) for r in store.load().records if r.kind == "consultation"]
    assert [(c.advisor, c.status) for c in consultations] == [
        ("alpha", ConsultationStatus.CANCELLED),  # never counted against the advisor
        ("gamma", ConsultationStatus.COMPLETED),
    ]


def test_an_answer_the_store_refuses_is_recorded_as_malformed_not_raised(tmp_path: Path) -> None:
    key = "-----BEGIN PRIVATE KEY-----\n" + "Q" * 64 + "\n-----END PRIVATE KEY-----"
    records = run_consult(
        tmp_path, {"alpha": Fixed(answer(conclusion=key)), "gamma": Fixed(answer())}
    )
    refused = body(records[0])
    assert refused.status is ConsultationStatus.MALFORMED and refused.conclusion is None
    assert refused.diagnostic and "cannot be recorded" in refused.diagnostic
    assert body(records[1]).status is ConsultationStatus.COMPLETED


def test_the_forms_an_advisor_refused_are_recorded_with_the_mode_that_answered(
    tmp_path: Path,
) -> None:
    refused = Answer(
        stance=Stance.SUPPORTS,
        conclusion="ok",
        output_mode="json_object",
        refused=("output_mode=json_schema",),
        reasons=("the piles hold",),
    )
    records = run_consult(tmp_path, {"alpha": Fixed(refused), "gamma": Fixed(answer())})
    first = body(records[0])
    assert (first.output_mode, first.refused, first.reasons) == (
        "json_object",
        ("output_mode=json_schema",),
        ("the piles hold",),
    )
    assert first.model == "test-model"


def test_a_refusal_older_than_the_memory_is_asked_for_again(tmp_path: Path) -> None:
    """A refused form is remembered from the records for ``refusal_memory_hours``; after that the
    better form is tried again (a server upgraded since may accept it)."""
    refused = Answer(
        stance=Stance.SUPPORTS,
        conclusion="ok",
        output_mode="json_object",
        refused=("output_mode=json_schema",),
    )
    records = run_consult(tmp_path, {"alpha": Fixed(refused), "gamma": Fixed(answer())})
    at = records[0].recorded_at
    alpha = CATALOGUE.advisors[0]
    remembered = refused_by(records, "alpha", since=at - timedelta(hours=1))
    assert remembered == {"output_mode=json_schema"}
    assert negotiated(alpha, remembered).output_mode == "json_object"
    forgotten = refused_by(records, "alpha", since=at + timedelta(seconds=1))
    assert forgotten == frozenset()
    assert negotiated(alpha, forgotten).output_mode == "json_schema"
    settings = RunSettings.from_config(load_config())
    assert settings.refusal_memory_s == 168 * 3600

    def opened_at(now: datetime) -> str:
        """The mode a run opening ``now`` asks the advisor for first."""
        state = RunState(
            project=Project(id="p", name="p"),
            bundle=tmp_path,
            run_id="r",
            task="p--r",
            settings=settings,
            reasoning=ReasoningSession(Store(tmp_path), replace(admission(), now=now)),
            meter=TokenMeter(Budget(run_tokens=1000, call_tokens=100, max_rounds=2)),
            middleware=[],
            client_factory=lambda *_a: None,
        )
        return state.terms_for(alpha).terms.output_mode

    assert opened_at(at + timedelta(hours=167)) == "json_object"
    assert opened_at(at + timedelta(hours=169)) == "json_schema"


def test_a_refusal_is_forgotten_only_when_the_server_named_another_build_since(
    tmp_path: Path,
) -> None:
    schema = "output_mode=json_schema"

    def said(server: str | None, *refused: str) -> Answer:
        return Answer(stance=Stance.SUPPORTS, conclusion="ok", refused=refused, server=server)

    def remembered(case: str, first: Answer, then: Answer) -> frozenset[str]:
        run_consult(tmp_path / case, {"alpha": Fixed(first), "gamma": Fixed(answer())})
        run_consult(tmp_path / case, {"alpha": Fixed(then), "gamma": Fixed(answer())})
        return refused_by(Store(tmp_path / case).load().records, "alpha")

    assert remembered("same", said("b1", schema), said("b1")) == {schema}
    assert remembered("upgraded", said("b1", schema), said("b2")) == frozenset()
    assert remembered("unnamed-since", said("b1", schema), said(None)) == {schema}
    assert remembered("unnamed-then", said(None, schema), said("b2")) == {schema}


def test_a_cancelled_consult_records_cancelled_consultations_and_goes_on_cancelling(
    tmp_path: Path,
) -> None:
    ctx = admission()
    store, plan = planned(tmp_path, ctx)

    async def go() -> None:
        task = asyncio.ensure_future(
            consult(
                store,
                TASK,
                plan,
                QUESTION,
                ctx,
                deadline_s=5,
                transports={"alpha": Silent(), "gamma": Silent()},
            )
        )
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    consultations = [body(r) for r in store.load().records if r.kind == "consultation"]
    assert [(c.advisor, c.status) for c in consultations] == [
        ("alpha", ConsultationStatus.CANCELLED),
        ("gamma", ConsultationStatus.CANCELLED),
    ]


def test_an_exchange_that_returns_nothing_is_an_error_outcome_not_a_crash(tmp_path: Path) -> None:
    records = run_consult(tmp_path, {"alpha": Fixed(None), "gamma": Fixed(answer())})
    assert body(records[0]).status is ConsultationStatus.ERROR


# --- a new advisor needs nothing but its config entry and its adapter module ----------------------

PIGEON_ADAPTER = '''
"""A transport no one planned for: it exists only in this test's temporary folder."""

from portfolio_optimiser.pipeline.clients.scripted import ScriptedChatClient

CALLS = []


def chat_client_for(advisor, *, middleware=None):
    CALLS.append(("chat_client_for", advisor.id, advisor.options.get("loft")))

    def fly(messages, options):
        CALLS.append(("fly", advisor.id, options.get("max_tokens")))
        return "The message arrived: shorter panels hold.\\nVERDICT: APPROVE"

    return ScriptedChatClient(handler=fly, model=advisor.model, middleware=middleware)
'''


def pigeon_config(path: Path) -> Path:
    """A config with the default's stop and budget sections and one advisor on a new adapter."""
    default = tomllib.loads((REPO / "config" / "portfolio-optimiser.toml").read_text("utf-8"))
    sections = []
    for name in ("stop", "budget"):
        values = "\n".join(f"{key} = {value!r}" for key, value in default[name].items())
        sections.append(f"[{name}]\n{values}\n")
    advisor = textwrap.dedent(
        """
        [[advisors]]
        id = "pigeon"
        name = "A carrier pigeon"
        adapter = "carrier-pigeon"
        module = "pigeon_adapter"
        provider = "the-loft"
        model = "homing-1"
        capabilities = ["cost_review"]
        options = { loft = "north" }
        """
    )
    path.write_text("\n".join(sections) + advisor, "utf-8")
    return path


@pytest.fixture
def pigeon_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    adapters = tmp_path / "adapters"
    adapters.mkdir()
    (adapters / "pigeon_adapter.py").write_text(PIGEON_ADAPTER, "utf-8")
    monkeypatch.delitem(sys.modules, "pigeon_adapter", raising=False)
    monkeypatch.syspath_prepend(str(adapters))
    yield adapters
    sys.modules.pop("pigeon_adapter", None)


@pytest.mark.loadbearing
def test_a_new_advisor_needs_no_other_edit(
    tmp_path: Path,
    pigeon_module: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PORTFOLIO_OPTIMISER_REASONING_MODE", "standard")
    for name in ("CI", "STATE_DIRECTORY", "PORTFOLIO_OPTIMISER_ADVISORS_DISABLE"):
        monkeypatch.delenv(name, raising=False)
    config_path = pigeon_config(tmp_path / "pigeon.toml")
    workspace = tmp_path / "ws"
    (workspace / "inbox" / "projects").mkdir(parents=True)
    cli = ["--config", str(config_path), "--workspace", str(workspace)]

    assert main([*cli, "advisors", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["mode"] == "standard"
    assert [(a["id"], a["adapter"], a["status"]) for a in listed["advisors"]] == [
        ("pigeon", "carrier-pigeon", "available")
    ]

    assert (
        main([*cli, "plan", "--materiality", "high", "--capabilities", "cost_review", "--json"])
        == 0
    )
    preview = json.loads(capsys.readouterr().out)
    assert preview["outcome"] == "consult"
    assert [s["advisor"] for s in preview["selected"]] == ["pigeon"]
    assert preview["recorded"] is False

    config = load_config(config_path)
    ctx = admission_for(
        config,
        now=NOW,
        environ={"PORTFOLIO_OPTIMISER_REASONING_MODE": "standard"},
        presence=Presence(env_names=frozenset(), has_executable=lambda _name: True),
    )
    reasoning = ReasoningSession(Store(workspace / ".state"), ctx)
    result = asyncio.run(
        run_project(
            small_bundle(tmp_path / "bundle"),
            verdicts=VerdictStore(),
            budget=Budget(run_tokens=50_000, call_tokens=16_000, max_rounds=20),
            settings=RunSettings.from_config(config),
            reasoning=reasoning,
            run_id="r1",
        )
    )

    calls = sys.modules["pigeon_adapter"].CALLS
    assert calls[0] == ("chat_client_for", "pigeon", "north")
    assert calls[1][:2] == ("fly", "pigeon") and 0 < calls[1][2] <= 512  # capped like any other
    [candidate] = result.candidates
    assert candidate.checker.outcome == "approved"
    assert candidate.checker.advisors == ("pigeon",)
    [record] = reasoning.store.load().of_kind("consultation")
    assert body(record).advisor == "pigeon" and body(record).model == "homing-1"
    assert body(record).status is ConsultationStatus.COMPLETED
