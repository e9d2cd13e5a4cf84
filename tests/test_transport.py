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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.cli import main
from portfolio_optimiser.config import load_config
from portfolio_optimiser.reasoning.availability import ConsultationStatus
from portfolio_optimiser.reasoning.catalogue import Advisor, Catalogue, Presence
from portfolio_optimiser.reasoning.environment import admission_for
from portfolio_optimiser.reasoning.modes import Mode, ModeResolution
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
    parse_answer,
)

from .conftest import REPO

NOW = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
TASK = "lillevik-school"
REVIEW = ("cost_review", "independent_reasoning")
EVIDENCE = Evidence(kind=EvidenceKind.FILE, reference="bundles/lillevik/ir/costs.json")
QUESTION = Question(
    subject="Shorter piles at Lillevik school",
    hypothesis="End-bearing piles can be two metres shorter.",
    evidence=(EVIDENCE,),
    prior_opinions=(("cs-0123456789", "The soil report rules it out."),),
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

    return asyncio.run(go())


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
def test_a_completed_consultation_keeps_the_normalised_answer_and_marks_opinions(
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
    kinds = [e.kind for e in alpha.evidence]
    assert kinds == [EvidenceKind.FILE, EvidenceKind.PRIOR_EXTERNAL_OPINION]


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
    secret = "sk-" + "ant-" + "k" * 24
    records = run_consult(
        tmp_path,
        {"alpha": Raising(AdvisorAuthFailed("alpha", f"key {secret} refused")), "gamma": Silent()},
        deadline_s=0.01,
    )
    assert body(records[0]).diagnostic == "key [redacted:anthropic-key] refused"
    assert "anthropic-key" in records[0].redacted
    assert all(secret.encode() not in p.read_bytes() for p in tmp_path.rglob("*.json"))


def test_a_missing_adapter_module_is_recorded_as_unavailable(tmp_path: Path) -> None:
    catalogue = Catalogue(
        (
            _advisor("alpha", "shared-a", module="portfolio_optimiser_no_such_adapter"),
            _advisor("gamma", "other-b"),
        )
    )
    records = run_consult(tmp_path, {"gamma": Fixed(answer())}, ctx=admission(catalogue))
    missing = body(records[0])
    assert missing.status is ConsultationStatus.UNAVAILABLE
    assert missing.diagnostic and "portfolio_optimiser_no_such_adapter" in missing.diagnostic
    assert body(records[1]).status is ConsultationStatus.COMPLETED


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


def test_an_adapter_whose_factory_fails_is_an_error_outcome_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_factory_adapter.py").write_text(
        "def transport_for(advisor):\n    raise KeyError('base_url')\n", "utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "broken_factory_adapter", raising=False)
    catalogue = Catalogue(
        (_advisor("alpha", "shared-a", module="broken_factory_adapter"), _advisor("gamma", "b"))
    )
    try:
        records = run_consult(
            tmp_path / "state", {"gamma": Fixed(answer())}, ctx=admission(catalogue)
        )
    finally:
        sys.modules.pop("broken_factory_adapter", None)
    assert body(records[0]).status is ConsultationStatus.ERROR
    assert body(records[1]).status is ConsultationStatus.COMPLETED


def test_an_exchange_that_returns_nothing_is_an_error_outcome_not_a_crash(tmp_path: Path) -> None:
    records = run_consult(tmp_path, {"alpha": Fixed(None), "gamma": Fixed(answer())})
    assert body(records[0]).status is ConsultationStatus.ERROR


# --- parse_answer ---------------------------------------------------------------------------------


ANSWER_JSON = {
    "stance": "Opposes",
    "conclusion": "The soil is too soft.",
    "assumptions": ["the borehole is representative"],
    "risks": "settlement",
    "falsifiers": ["a load test above 1.5x"],
    "confidence": "HIGH",
}


@pytest.mark.parametrize(
    "text",
    [
        "Here is my answer:\n```json\n" + json.dumps(ANSWER_JSON, indent=2) + "\n```\nThanks.",
        "```\n" + json.dumps(ANSWER_JSON) + "\n```",
        json.dumps(ANSWER_JSON),
        "Sure. " + json.dumps(ANSWER_JSON) + " Hope that helps.",
    ],
    ids=["fenced-json", "fenced-plain", "bare", "bare-in-prose"],
)
def test_parse_answer_reads_fenced_and_bare_json(text: str) -> None:
    usage = Usage(input_tokens=10, output_tokens=5)
    parsed = parse_answer("alpha", text, usage)
    assert parsed == Answer(
        stance=Stance.OPPOSES,
        conclusion="The soil is too soft.",
        assumptions=("the borehole is representative",),
        risks=("settlement",),
        falsifiers=("a load test above 1.5x",),
        confidence=Confidence.HIGH,
        usage=usage,
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", EmptyAnswer),
        ("   \n\t ", EmptyAnswer),
        ("I think the piles are fine.", MalformedAnswer),
        ("{stance: opposes, conclusion: soft}", MalformedAnswer),
        ("[1, 2, 3]", MalformedAnswer),
        (json.dumps({"stance": "maybe", "conclusion": "x"}), MalformedAnswer),
        (json.dumps({"conclusion": "x"}), MalformedAnswer),
        (json.dumps({"stance": "supports"}), EmptyAnswer),
        (json.dumps({"stance": "supports", "conclusion": "   "}), EmptyAnswer),
    ],
    ids=[
        "empty",
        "blank",
        "prose",
        "not-json",
        "not-an-object",
        "unknown-stance",
        "no-stance",
        "no-conclusion",
        "blank-conclusion",
    ],
)
def test_parse_answer_raises_the_typed_error(text: str, error: type[AdvisorError]) -> None:
    with pytest.raises(error) as caught:
        parse_answer("alpha", text)
    assert type(caught.value) is error
    assert caught.value.advisor == "alpha"
    assert caught.value.status is error.status


def test_an_unknown_confidence_is_dropped_not_invented() -> None:
    parsed = parse_answer("alpha", json.dumps({**ANSWER_JSON, "confidence": "certain"}))
    assert parsed.confidence is None


# --- the question --------------------------------------------------------------------------------


@pytest.mark.loadbearing
def test_the_question_marks_the_hypothesis_and_prior_answers_as_opinions() -> None:
    text = QUESTION.text()
    hypothesis_line = next(line for line in text.splitlines() if QUESTION.hypothesis in line)
    assert "an opinion, not a fact" in hypothesis_line
    prior_line = next(line for line in text.splitlines() if "The soil report rules it out" in line)
    assert "prior_external_opinion" in prior_line and "an opinion, not a fact" in prior_line
    assert "cs-0123456789" in prior_line
    evidence_block = text.split("Evidence (facts you may check):", 1)[1].split("\n\n", 1)[0]
    assert EVIDENCE.reference in evidence_block
    assert "rules it out" not in evidence_block, "an opinion is never listed among the facts"


@pytest.mark.loadbearing
def test_the_question_asks_for_counter_argument_assumptions_and_a_refuting_experiment() -> None:
    text = QUESTION.text().lower()
    assert "strongest counter-argument" in text
    assert "hidden assumptions" in text
    assert "experiment that would refute" in text
    assert "json" in text


def test_a_question_without_evidence_or_hypothesis_says_so() -> None:
    text = Question(subject="s", hypothesis="").text()
    assert "- none" in text and "(none stated)" in text


@pytest.mark.loadbearing
def test_evidence_with_opinions_tags_prior_answers_as_prior_external_opinion() -> None:
    evidence = QUESTION.evidence_with_opinions()
    assert evidence[0] == EVIDENCE
    assert evidence[1] == Evidence(
        kind=EvidenceKind.PRIOR_EXTERNAL_OPINION,
        reference="cs-0123456789",
        note="The soil report rules it out.",
    )
    assert len(evidence) == 2


# --- a new advisor needs nothing but its config entry and its adapter module ----------------------

PIGEON_ADAPTER = '''
"""A transport no one planned for: it exists only in this test's temporary folder."""

from portfolio_optimiser.reasoning.records import Stance, Usage
from portfolio_optimiser.reasoning.transport import Answer

CALLS = []


class Pigeon:
    def __init__(self, advisor):
        self.advisor = advisor

    async def exchange(self, question, *, deadline_s):
        CALLS.append(("exchange", self.advisor.id, question.subject, deadline_s))
        return Answer(
            stance=Stance.SUPPORTS,
            conclusion="The message arrived: shorter piles hold.",
            usage=Usage(input_tokens=7, output_tokens=3),
        )


def transport_for(advisor):
    CALLS.append(("transport_for", advisor.id, advisor.options.get("loft")))
    return Pigeon(advisor)
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
    workspace.mkdir()
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
    store = Store(workspace / ".state")
    assessment = store.record(
        TASK,
        AssessmentInput(
            subject=QUESTION.subject,
            materiality=Materiality.HIGH,
            evidence=(EVIDENCE,),
            capabilities=("cost_review",),
        ),
        ctx,
    )
    plan = store.record(TASK, PlanInput(assessment=assessment.id), ctx)
    assert selected(plan) == ["pigeon"]
    records = asyncio.run(consult(store, TASK, plan, QUESTION, ctx, deadline_s=5))

    calls = sys.modules["pigeon_adapter"].CALLS
    assert calls == [
        ("transport_for", "pigeon", "north"),
        ("exchange", "pigeon", QUESTION.subject, 5),
    ]
    [record] = records
    assert body(record).advisor == "pigeon"
    assert body(record).status is ConsultationStatus.COMPLETED
    assert body(record).stance is Stance.SUPPORTS
    assert body(record).usage == Usage(input_tokens=7, output_tokens=3)
    assert store.load().by_id(record.id) == record
