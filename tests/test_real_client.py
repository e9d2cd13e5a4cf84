"""The real MAF chat-completion client against a loopback fake: every failure is one typed error.

Each exchange here is the pipeline's own (a proposer attempt, :class:`ProposerExchange`), run on
the adapter's real chat client, so what is tested is what a run does.

No credential and no network: the fake binds 127.0.0.1, every vendor variable is removed from the
environment first, and the mode is pinned (CI sets CI=true, which would otherwise mean mode ci).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, ChatContext, ChatMiddleware
from agent_framework.exceptions import ChatClientException

from portfolio_optimiser.pipeline.clients import azure_openai, foundry, ollama, openai_compatible
from portfolio_optimiser.pipeline.clients._errors import map_sdk_errors, parse_retry_after
from portfolio_optimiser.pipeline.outbound import TermsHolder
from portfolio_optimiser.pipeline.proposer import ProposerExchange
from portfolio_optimiser.reasoning.availability import AdvisorStatus, ConsultationStatus
from portfolio_optimiser.reasoning.catalogue import Advisor, Catalogue
from portfolio_optimiser.reasoning.modes import Mode, ModeResolution
from portfolio_optimiser.reasoning.negotiation import negotiated
from portfolio_optimiser.reasoning.policy import Materiality, PlanOutcome
from portfolio_optimiser.reasoning.records import (
    AssessmentInput,
    ConclusionInput,
    ConsultationInput,
    Evidence,
    EvidenceKind,
    PlanInput,
    Stance,
    StoredPlan,
    StoredRecord,
)
from portfolio_optimiser.reasoning.store import Admission, Store, availability_now
from portfolio_optimiser.reasoning.transport import (
    AdvisorAuthFailed,
    AdvisorError,
    AdvisorRateLimited,
    AdvisorTimeout,
    AdvisorUnavailable,
    EmptyAnswer,
    MalformedAnswer,
    Question,
    consult,
)

from .fakes.llm_server import COMPLETION_TOKENS, PROMPT_TOKENS, FakeLLMServer
from .pipeline_helpers import measure, proposal

VENDOR_PREFIXES = ("OPENAI_", "AZURE_", "OLLAMA_", "FOUNDRY_")
NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
QUESTION = Question(
    subject="cancel the unused licences",
    hypothesis="forty seats are unused and can be cancelled",
    evidence=(Evidence(kind=EvidenceKind.FILE, reference="costs/licences.csv"),),
)


@pytest.fixture(autouse=True)
def _no_vendor_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Routing must not depend on the machine: no vendor variables and no proxy for loopback."""
    for name in list(os.environ):
        if name.upper().startswith(VENDOR_PREFIXES) or name.lower().endswith("_proxy"):
            monkeypatch.delenv(name, raising=False)


PROPOSAL = proposal(measure())
PROMPT = "Propose up to 3 savings measures for the project below."


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(slow_s=2.0, content=PROPOSAL) as fake:
        yield fake


def local_advisor(server: FakeLLMServer, **options: Any) -> Advisor:
    return Advisor(
        id="local-test",
        name="t",
        adapter="openai-compatible",
        provider="self-hosted",
        model="fake-model",
        capabilities=("cost_review",),
        local=True,
        options={"base_url": server.base_url, "timeout_seconds": 2, **options},
    )


def proposer_exchange(advisor: Advisor, module: Any = openai_compatible) -> ProposerExchange:
    return ProposerExchange(
        advisor=advisor,
        client=lambda: module.chat_client_for(advisor, middleware=[]),
        tools=[],
        prompt=PROMPT,
        terms=TermsHolder(negotiated(advisor)),
        output_cap=64,
    )


def exchange(advisor: Advisor, module: Any = openai_compatible) -> Any:
    return asyncio.run(proposer_exchange(advisor, module).exchange(QUESTION, deadline_s=2.0))


# --- one exchange, one request, one typed outcome -------------------------------------------


@pytest.mark.loadbearing
def test_a_normal_answer_is_completed_with_its_usage(server: FakeLLMServer) -> None:
    attempt = proposer_exchange(local_advisor(server))
    answer = asyncio.run(attempt.exchange(QUESTION, deadline_s=2.0))

    assert answer.stance is Stance.SUPPORTS
    assert answer.conclusion == "proposed 1 measure(s): Standard panels"
    assert attempt.proposal is not None
    assert attempt.proposal.candidates[0].claimed_saving_nok == 144000
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (
        PROMPT_TOKENS,
        COMPLETION_TOKENS,
    )
    [request] = server.requests
    assert request.path == "/v1/chat/completions"  # chat completions, not the Responses API
    assert request.body["model"] == "fake-model"
    assert request.body["messages"][-1]["content"] == PROMPT
    assert request.body["response_format"]["type"] == "json_schema"
    assert not request.body.get("stream")


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("mode", "error", "status"),
    [
        ("rate_limited", AdvisorRateLimited, ConsultationStatus.RATE_LIMITED),
        ("server_error", AdvisorUnavailable, ConsultationStatus.UNAVAILABLE),
        ("malformed", MalformedAnswer, ConsultationStatus.MALFORMED),
        ("empty", EmptyAnswer, ConsultationStatus.EMPTY),
        ("unauthorized", AdvisorAuthFailed, ConsultationStatus.AUTH_FAILED),
    ],
)
def test_each_failure_is_one_typed_error_after_exactly_one_request(
    server: FakeLLMServer, mode: Any, error: type[AdvisorError], status: ConsultationStatus
) -> None:
    server.mode = mode
    with pytest.raises(error) as caught:
        exchange(local_advisor(server))

    assert type(caught.value) is error
    assert caught.value.status is status
    assert caught.value.advisor == "local-test"
    assert server.paths == ["/v1/chat/completions"]  # one request: the SDK's retries are off


@pytest.mark.loadbearing
def test_a_rate_limit_carries_the_servers_retry_after(server: FakeLLMServer) -> None:
    server.mode = "rate_limited"
    with pytest.raises(AdvisorRateLimited) as caught:
        exchange(local_advisor(server))

    assert caught.value.retry_after_s == 7
    assert isinstance(caught.value.__cause__, ChatClientException)  # the original stays chained


def test_a_retry_after_given_as_an_http_date_is_read_as_seconds(server: FakeLLMServer) -> None:
    server.mode = "rate_limited"
    server.retry_after = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    with pytest.raises(AdvisorRateLimited) as caught:
        exchange(local_advisor(server))

    assert caught.value.retry_after_s is not None
    assert 20 <= caught.value.retry_after_s <= 31


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        (" 2.5 ", 2.5),
        ("-3", 0.0),
        ("Sun, 01 Mar 2026 09:00:30 GMT", 30.0),
        ("Sun, 01 Mar 2026 08:00:00 GMT", 0.0),
        ("soon", None),
        ("", None),
        (None, None),
        ("inf", None),  # not a finite number: no value
        ("1e400", None),
        ("1e12", 86_400.0),  # bounded to a day
    ],
)
def test_retry_after_is_seconds_or_an_http_date(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == seconds


@pytest.mark.loadbearing
def test_a_deadline_that_passes_is_a_timeout(server: FakeLLMServer, tmp_path: Path) -> None:
    server.mode = "slow"
    advisor = local_advisor(server)
    store, ctx = Store(tmp_path), admission(advisor)
    _assessment, plan_record = assess_and_plan(store, ctx, "cancel the unused licences")
    started = time.monotonic()
    [written] = asyncio.run(
        consult(
            store,
            "run-1",
            plan_record,
            QUESTION,
            ctx,
            deadline_s=0.5,
            transports={advisor.id: proposer_exchange(advisor)},
        )
    )
    assert isinstance(written.body, ConsultationInput)
    assert written.body.status is ConsultationStatus.TIMEOUT
    assert time.monotonic() - started < 1.5
    assert len(server.requests) == 1


def test_the_clients_own_timeout_is_a_timeout_too(server: FakeLLMServer) -> None:
    server.mode = "slow"
    with pytest.raises(AdvisorTimeout) as caught:
        exchange(local_advisor(server, timeout_seconds=0.3))

    assert "APITimeoutError" in caught.value.message
    assert len(server.requests) == 1


def test_a_refused_connection_is_unavailable() -> None:
    with FakeLLMServer() as gone:
        advisor = local_advisor(gone)
    with pytest.raises(AdvisorUnavailable):
        exchange(advisor)


class AlreadyTyped(AdvisorError):
    """An error that is already one of ours: the mapping leaves it as it is."""


def test_an_exception_the_table_does_not_know_passes_untouched() -> None:
    with pytest.raises(KeyError), map_sdk_errors("local-test"):
        raise KeyError("not an SDK error")
    with pytest.raises(AlreadyTyped), map_sdk_errors("local-test"):
        raise AlreadyTyped("local-test", "already typed")


def test_a_missing_base_url_is_reported_as_unavailable_with_what_to_set() -> None:
    advisor = Advisor(
        id="local-test",
        name="t",
        adapter="openai-compatible",
        provider="self-hosted",
        model="fake-model",
        capabilities=("cost_review",),
        options={"base_url_env": "PORTFOLIO_OPTIMISER_TEST_UNSET_URL"},
    )
    with pytest.raises(AdvisorUnavailable, match="PORTFOLIO_OPTIMISER_TEST_UNSET_URL"):
        openai_compatible.chat_client_for(advisor)


# --- middleware and streaming on the real client --------------------------------------------


class CountingMiddleware(ChatMiddleware):
    def __init__(self) -> None:
        self.calls = 0

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        self.calls += 1
        await call_next()


@pytest.mark.loadbearing
def test_chat_middleware_runs_on_the_real_client_through_an_agent(server: FakeLLMServer) -> None:
    counter = CountingMiddleware()
    client = openai_compatible.chat_client_for(local_advisor(server), middleware=[counter])
    agent = Agent(client=client, name="reviewer", instructions="Answer in JSON.")

    async def both() -> tuple[Any, Any]:
        plain = await agent.run("first")
        stream = agent.run("second", stream=True)
        async for _update in stream:
            pass
        return plain, await stream.get_final_response()

    plain, streamed = asyncio.run(both())

    assert counter.calls == 2
    assert json.loads(plain.text)["candidates"][0]["measure_type"] == "standardisation"
    assert json.loads(streamed.text)["candidates"][0]["measure_type"] == "standardisation"
    assert streamed.usage_details["input_token_count"] == PROMPT_TOKENS
    first, second = server.requests
    assert first.body["messages"][0] == {"role": "system", "content": "Answer in JSON."}
    assert second.body["stream"] is True
    assert second.body["stream_options"] == {"include_usage": True}


# --- the other adapters ----------------------------------------------------------------------


def test_the_azure_adapter_speaks_to_its_deployment_without_retries(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_DEPLOYMENT_URL", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("TEST_DEPLOYMENT_KEY", "test-key-not-secret")
    advisor = Advisor(
        id="cloud-test",
        name="t",
        adapter="azure-openai",
        provider="cloud",
        model="fake-model",
        capabilities=("cost_review",),
        options={
            "deployment": "fake-deployment",
            "endpoint_env": "TEST_DEPLOYMENT_URL",
            "api_key_env": "TEST_DEPLOYMENT_KEY",
            "timeout_seconds": 2,
        },
    )
    answer = exchange(advisor, azure_openai)
    server.mode = "server_error"
    with pytest.raises(AdvisorUnavailable):
        exchange(advisor, azure_openai)

    assert answer.stance is Stance.SUPPORTS
    assert [r.path.split("?")[0] for r in server.requests] == [
        "/openai/deployments/fake-deployment/chat/completions"
    ] * 2
    assert "api-version=" in server.requests[0].path
    assert server.requests[0].headers["api-key"] == "test-key-not-secret"


def test_the_azure_adapter_without_its_settings_is_unavailable() -> None:
    advisor = Advisor(
        id="cloud-test",
        name="t",
        adapter="azure-openai",
        provider="cloud",
        model="fake-model",
        capabilities=("cost_review",),
        options={"endpoint_env": "TEST_UNSET_DEPLOYMENT_URL"},
    )
    with pytest.raises(AdvisorUnavailable, match="TEST_UNSET_DEPLOYMENT_URL"):
        azure_openai.chat_client_for(advisor)


@pytest.mark.skipif(
    importlib.util.find_spec("agent_framework_ollama") is not None,
    reason="the optional package is installed here",
)
def test_without_its_optional_package_the_ollama_adapter_says_what_to_install() -> None:
    advisor = Advisor(
        id="ollama-test",
        name="t",
        adapter="ollama",
        provider="self-hosted",
        model="fake-model",
        capabilities=("cost_review",),
        local=True,
        options={"host": "http://127.0.0.1:9"},
    )
    with pytest.raises(AdvisorUnavailable, match="agent-framework-ollama"):
        ollama.chat_client_for(advisor)


@pytest.mark.skipif(
    importlib.util.find_spec("agent_framework_foundry") is not None,
    reason="the optional package is installed here",
)
def test_without_its_optional_package_the_foundry_adapter_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_PROJECT_URL", "https://project.invalid")
    advisor = Advisor(
        id="foundry-test",
        name="t",
        adapter="foundry",
        provider="cloud",
        model="fake-model",
        capabilities=("cost_review",),
        options={"endpoint_env": "TEST_PROJECT_URL"},
    )
    with pytest.raises(AdvisorUnavailable, match="agent-framework-foundry"):
        foundry.chat_client_for(advisor)


# --- end to end with the reasoning layer -----------------------------------------------------


def admission(advisor: Advisor) -> Admission:
    # Pinned: CI=true in the environment must not turn this into mode ci.
    return Admission(
        catalogue=Catalogue((advisor,)), mode=ModeResolution(Mode.STANDARD, "env"), now=NOW
    )


def assess_and_plan(
    store: Store, ctx: Admission, subject: str
) -> tuple[StoredRecord, StoredRecord]:
    assessment = store.record(
        "run-1",
        AssessmentInput(
            subject=subject,
            materiality=Materiality.HIGH,
            hypothesis=QUESTION.hypothesis,
            evidence=QUESTION.evidence,
            capabilities=("cost_review",),
        ),
        ctx,
    )
    return assessment, store.record("run-1", PlanInput(assessment=assessment.id), ctx)


def consult_once(
    store: Store, plan_record: StoredRecord, ctx: Admission, advisor: Advisor
) -> list[StoredRecord]:
    transports = {advisor.id: proposer_exchange(advisor)}
    return asyncio.run(
        consult(store, "run-1", plan_record, QUESTION, ctx, deadline_s=1, transports=transports)
    )


def state_of(store: Store, ctx: Admission) -> Any:
    [state] = availability_now(store.load(), ctx)
    return state


@pytest.mark.loadbearing
def test_two_failed_consultations_open_the_breaker_and_the_next_plan_decides_locally(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    advisor = local_advisor(server)
    store, ctx = Store(tmp_path), admission(advisor)
    _assessment, plan_record = assess_and_plan(store, ctx, "cancel the unused licences")
    assert isinstance(plan_record.body, StoredPlan)
    assert plan_record.body.outcome is PlanOutcome.CONSULT
    assert [s.advisor for s in plan_record.body.selected] == ["local-test"]

    server.mode = "server_error"
    first = consult_once(store, plan_record, ctx, advisor)
    assert state_of(store, ctx).status is AdvisorStatus.AVAILABLE  # one failure does not open it
    second = consult_once(store, plan_record, ctx, advisor)

    for written in (*first, *second):
        assert isinstance(written.body, ConsultationInput)
        assert written.body.status is ConsultationStatus.UNAVAILABLE
        assert written.body.diagnostic and "InternalServerError" in written.body.diagnostic
    state = state_of(store, ctx)
    assert state.status is AdvisorStatus.TEMPORARILY_FAILED
    assert state.circuit is not None and state.circuit.failures == 2
    assert len(server.requests) == 2  # one request per consultation, no hidden retries

    # The run goes on: a new question is planned without the advisor and decided locally.
    assessment, local_plan = assess_and_plan(store, ctx, "merge the two hosting contracts")
    assert isinstance(local_plan.body, StoredPlan)
    assert local_plan.body.outcome is PlanOutcome.DECIDE_LOCALLY
    assert local_plan.body.selected == ()
    assert "temporarily_failed" in local_plan.body.excluded[0].reason
    assert local_plan.body.local_review
    assert consult_once(store, local_plan, ctx, advisor) == []
    assert len(server.requests) == 2  # nobody was asked
    concluded = store.record(
        "run-1",
        ConclusionInput(
            assessment=assessment.id,
            decision="merge the contracts after the local review",
            evidence=QUESTION.evidence,
            validation_plan=("compare the next two invoices",),
        ),
        ctx,
    )
    assert concluded.kind == "conclusion"


def test_a_rate_limit_cools_the_advisor_for_the_servers_retry_after(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    advisor = local_advisor(server)
    store, ctx = Store(tmp_path), admission(advisor)
    _assessment, plan_record = assess_and_plan(store, ctx, "cancel the unused licences")

    server.mode = "rate_limited"
    [written] = consult_once(store, plan_record, ctx, advisor)

    assert isinstance(written.body, ConsultationInput)
    assert written.body.retry_after_seconds == 7
    state = state_of(store, ctx)
    assert state.status is AdvisorStatus.RATE_LIMITED
    assert state.circuit is not None and state.circuit.until == NOW + timedelta(seconds=7)
