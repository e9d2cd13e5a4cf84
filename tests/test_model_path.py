"""The model path with real MAF clients against loopback fakes: a model only adds, what leaves is
redacted and capped, request forms are negotiated, and every failure is the right advisor's.

The fast counterpart of ``test_real_model.py``: every server behaviour here is scripted, so each
claim is checked exactly, and each load-bearing test goes red when its mechanism is detached.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.learning import VerdictStore
from portfolio_optimiser.pipeline.budget import Budget
from portfolio_optimiser.pipeline.clients.scripted import ScriptedChatClient
from portfolio_optimiser.pipeline.outcome import RunResult
from portfolio_optimiser.pipeline.run import ReasoningSession, default_client_factory, run_project
from portfolio_optimiser.reasoning.availability import AdvisorStatus
from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.records import ConsultationInput
from portfolio_optimiser.reasoning.store import availability_now

from .fakes.llm_server import FakeLLMServer, Mode
from .pipeline_helpers import budget, measure, proposal, session, settings, small_bundle, write

PROPOSAL = proposal(measure(measure_type="prefabrication", saving=96000, title="Prefab walls"))


@pytest.fixture(autouse=True)
def _no_ambient_client_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("OPENAI", "AZURE", "OLLAMA")) or name.lower().endswith("_proxy"):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
def servers() -> Iterator[tuple[FakeLLMServer, FakeLLMServer]]:
    with (
        FakeLLMServer(content=PROPOSAL, slow_s=3.0) as proposer,
        FakeLLMServer(content="The figures hold.\nVERDICT: APPROVE") as checker,
    ):
        yield proposer, checker


def advisor(
    advisor_id: str, base_url: str, capabilities: tuple[str, ...], **options: Any
) -> Advisor:
    return Advisor(
        id=advisor_id,
        name=advisor_id,
        adapter="openai-compatible",
        provider="self-hosted",
        model=f"model-of-{advisor_id}",
        local=True,
        capabilities=capabilities,
        options={"base_url": base_url, "timeout_seconds": 2, **options},
    )


def reasoning_for(
    tmp: Path, servers: tuple[FakeLLMServer, FakeLLMServer], **proposer_options: Any
) -> ReasoningSession:
    proposer, checker = servers
    return session(
        tmp,
        advisor("prop", proposer.base_url, ("propose",), **proposer_options),
        advisor("check", checker.base_url, ("cost_review", "independent_reasoning")),
    )


def run(tmp: Path, reasoning: ReasoningSession, run_id: str = "r1", **overrides: Any) -> RunResult:
    bundle = tmp / f"bundle-{run_id}"
    if not bundle.exists():
        small_bundle(bundle)
    return asyncio.run(
        run_project(
            bundle,
            verdicts=VerdictStore(),
            budget=budget(),
            settings=settings(consult_deadline_s=1.5, **overrides),
            reasoning=reasoning,
            run_id=run_id,
        )
    )


UNUSED = "http://unused.invalid/v1"


def run_scripted(
    tmp: Path,
    proposer: Any,
    checker: Any,
    *,
    bundle: Path | None = None,
    run_budget: Budget | None = None,
    **overrides: Any,
) -> tuple[RunResult, ReasoningSession]:
    """One run with scripted clients for the proposer and the checker (handlers of messages)."""

    def factory(adv: Advisor, middleware: Any) -> Any:
        handler = proposer if adv.id == "prop" else checker
        return ScriptedChatClient(handler=handler, middleware=list(middleware))

    reasoning = session(
        tmp,
        advisor("prop", UNUSED, ("propose",)),
        advisor("check", UNUSED, ("cost_review", "independent_reasoning")),
    )
    result = asyncio.run(
        run_project(
            bundle or small_bundle(tmp / "bundle-r1"),
            verdicts=VerdictStore(),
            budget=run_budget or budget(),
            settings=settings(**overrides),
            reasoning=reasoning,
            run_id="r1",
            client_factory=factory,
        )
    )
    return result, reasoning


def consultations(reasoning: ReasoningSession, advisor_id: str) -> list[ConsultationInput]:
    return [
        r.body
        for r in reasoning.store.load().of_kind("consultation")
        if isinstance(r.body, ConsultationInput) and r.body.advisor == advisor_id
    ]


def origins(result: RunResult) -> list[str]:
    return [c.candidate.origin for c in result.candidates]


def test_a_working_proposer_adds_to_the_planners_list(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    reasoning = reasoning_for(tmp_path, servers)
    result = run(tmp_path, reasoning)
    assert origins(result) == ["measure-option:k-01", "model:prop"]
    assert result.proposer == "prop" and not result.ran_locally
    assert all(c.validator.outcome == "accepted" for c in result.candidates)


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("mode", "status"),
    [
        ("server_error", "unavailable"),
        ("slow", "timeout"),
        ("unauthorized", "auth_failed"),
        ("rate_limited", "rate_limited"),
        ("malformed", "malformed"),
        ("empty", "empty"),
    ],
)
def test_a_failing_proposer_leaves_the_run_with_the_local_rules_candidates(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer], mode: Mode, status: str
) -> None:
    servers[0].mode = mode
    reasoning = reasoning_for(tmp_path, servers)
    result = run(tmp_path, reasoning)
    assert origins(result) == ["measure-option:k-01"]  # the planner's item, checked all the same
    assert result.candidates[0].validator.outcome == "accepted"
    assert {str(c.status) for c in consultations(reasoning, "prop")} == {status}
    assert result.proposer is None
    if status in {"malformed", "empty"}:  # an answer came: the next attempt is told why
        assert result.stop_reason == "max_attempts"
    else:
        assert result.stop_reason == "proposer_failed"
    assert result.local_because and status in result.local_because  # the run says why
    # The proposer's failure is the proposer's: the checker still answered, and is not blamed.
    assert [str(c.status) for c in consultations(reasoning, "check")] == ["completed"]


def test_a_run_closes_the_clients_it_opened(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Any] = []

    def keep(adv: Advisor, middleware: Any) -> Any:
        client = default_client_factory(adv, middleware)
        opened.append(client)
        return client

    servers[0].mode = "slow"  # the proposer's call is cut off by the deadline: it must close too
    reasoning = reasoning_for(tmp_path, servers)
    small_bundle(tmp_path / "bundle-r1")
    asyncio.run(
        run_project(
            tmp_path / "bundle-r1",
            verdicts=VerdictStore(),
            budget=budget(),
            settings=settings(consult_deadline_s=0.5, max_attempts=1),
            reasoning=reasoning,
            run_id="r1",
            client_factory=keep,
        )
    )
    assert len(opened) == 2
    assert all(client.client.is_closed() for client in opened)


def test_a_proposer_that_refuses_the_connection_is_unavailable_and_the_run_goes_on(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    dead = FakeLLMServer()  # bound, never started: the port refuses nothing but answers nothing
    dead._httpd.server_close()
    reasoning = session(
        tmp_path,
        advisor("prop", dead.base_url, ("propose",)),
        advisor("check", servers[1].base_url, ("cost_review", "independent_reasoning")),
    )
    result = run(tmp_path, reasoning)
    assert origins(result) == ["measure-option:k-01"]
    [failed] = consultations(reasoning, "prop")
    assert str(failed.status) == "unavailable" and failed.diagnostic


def test_two_runs_with_a_dead_proposer_open_its_breaker_only(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    servers[0].mode = "server_error"
    reasoning = reasoning_for(tmp_path, servers)
    run(tmp_path, reasoning, "r1")
    run(tmp_path, reasoning, "r2")
    states = {s.advisor: s for s in availability_now(reasoning.store.load(), reasoning.ctx)}
    assert states["prop"].status is AdvisorStatus.TEMPORARILY_FAILED
    assert states["check"].status is AdvisorStatus.AVAILABLE
    before = len(servers[0].requests)
    third = run(tmp_path, reasoning, "r3")
    assert len(servers[0].requests) == before  # the open breaker keeps the dead proposer out
    assert origins(third) == ["measure-option:k-01"]


@pytest.mark.loadbearing
@pytest.mark.parametrize("retry_after", ["inf", "1e400", "1e12"])
def test_a_wild_retry_after_does_not_break_the_runs_after_it(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer], retry_after: str
) -> None:
    # Found in review: a Retry-After of inf was stored, and every later plan overflowed.
    servers[0].mode = "rate_limited"
    servers[0].retry_after = retry_after
    reasoning = reasoning_for(tmp_path, servers)
    run(tmp_path, reasoning, "r1")
    second = run(tmp_path, reasoning, "r2")
    assert origins(second) == ["measure-option:k-01"]
    states = {s.advisor: s for s in availability_now(reasoning.store.load(), reasoning.ctx)}
    assert states["prop"].status is AdvisorStatus.RATE_LIMITED


@pytest.mark.loadbearing
def test_nothing_secret_reaches_a_model(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    secret = "sk-proj-" + secrets.token_hex(16) + "Q7"
    bundle = small_bundle(tmp_path / "bundle-r1")
    write(
        bundle,
        "cost/02.3.md",
        (bundle / "cost" / "02.3.md").read_text() + f'\napi_key = "{secret}"\n',
    )
    reasoning = reasoning_for(tmp_path, servers)
    result = run(tmp_path, reasoning)
    bodies = [str(r.body) for server in servers for r in server.requests]
    assert bodies and result.proposer == "prop"
    assert not any(secret in body for body in bodies)
    assert "openai-key" in result.withheld


@pytest.mark.loadbearing
def test_every_call_carries_an_output_cap_in_both_fields(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    servers[1].content = "Hm."  # no verdict: the debate goes two rounds, the maker speaks again
    reasoning = reasoning_for(tmp_path, servers)
    run(tmp_path, reasoning, max_rounds=4)
    caps = {
        "prop": settings().propose_output_tokens,
        "check": settings().check_output_tokens,
    }
    for server, cap in zip(servers, caps.values(), strict=True):
        assert server.requests
        for request in server.requests:
            assert 0 < request.body["max_tokens"] <= cap  # the field llama.cpp servers read
            assert request.body["max_completion_tokens"] == request.body["max_tokens"]


@pytest.mark.loadbearing
def test_a_tool_result_is_priced_in_the_next_calls_cap(tmp_path: Path) -> None:
    # Found in review: Message.text leaves tool results out, so a call carrying a large concept
    # was still sent the role's whole cap, past what call_tokens allows.
    from agent_framework import ChatResponse, Content, Message

    caps: list[int] = []

    def proposer(_messages: Any, options: Any) -> Any:
        caps.append(int(options["max_tokens"]))
        if len(caps) == 1:
            call = Content.from_function_call("c1", "read_concept", arguments={"path": "notes.md"})
            return ChatResponse(messages=[Message(role="assistant", contents=[call])])
        return PROPOSAL

    bundle = small_bundle(tmp_path / "bundle-r1")
    write(bundle, "notes.md", "---\ntype: note\ntitle: Notes\n---\n" + "Site notes. " * 1800)
    index = bundle / "index.md"
    index.write_text(index.read_text() + "* [Notes](notes.md)\n")
    run_scripted(
        tmp_path,
        proposer,
        lambda m, o: "VERDICT: APPROVE",
        bundle=bundle,
        run_budget=Budget(run_tokens=100_000, call_tokens=6_500, max_rounds=20),
        max_attempts=1,
        context_chars=2000,
    )
    first, second = caps[:2]
    assert first == settings().propose_output_tokens
    assert second < first  # the opened concept (~5 400 tokens) is priced before the cap is set


def test_an_answer_without_an_output_count_is_measured_by_its_text(tmp_path: Path) -> None:
    from agent_framework import ChatResponse, Message, UsageDetails

    def proposer(_messages: Any, _options: Any) -> Any:
        text = PROPOSAL + " " * 1 + "x" * 40_000  # far past the cap, and no completion count
        return ChatResponse(
            messages=[Message(role="assistant", contents=[text])],
            usage_details=UsageDetails(input_token_count=10),
        )

    result, reasoning = run_scripted(tmp_path, proposer, lambda m, o: "VERDICT: APPROVE")
    [over] = consultations(reasoning, "prop")
    assert str(over.status) == "error" and "where the output cap was" in (over.diagnostic or "")
    assert result.tokens["output_tokens"] > 10_000  # charged for what was sent, not for nothing


def test_the_cap_field_can_be_fixed_per_advisor(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    reasoning = reasoning_for(tmp_path, servers, output_cap_field="max_completion_tokens")
    run(tmp_path, reasoning)
    [request] = servers[0].requests
    assert "max_tokens" not in request.body and request.body["max_completion_tokens"] > 0


@pytest.mark.loadbearing
def test_an_answer_past_its_cap_is_the_servers_fault(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    servers[0].mode = "ignores_cap"
    reasoning = reasoning_for(tmp_path, servers)
    result = run(tmp_path, reasoning)
    [over] = consultations(reasoning, "prop")
    assert str(over.status) == "error" and "ignores the cap field" in (over.diagnostic or "")
    assert origins(result) == ["measure-option:k-01"]  # its answer was not used


@pytest.mark.loadbearing
def test_a_refused_json_schema_steps_down_and_the_next_run_remembers(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    servers[0].mode = "refuses_json_schema"
    reasoning = reasoning_for(tmp_path, servers)
    first = run(tmp_path, reasoning, "r1")
    assert origins(first) == ["measure-option:k-01", "model:prop"]
    [answered] = consultations(reasoning, "prop")
    assert (str(answered.status), answered.output_mode) == ("completed", "json_object")
    assert answered.refused == ("output_mode=json_schema",)
    kinds = [r.body["response_format"]["type"] for r in servers[0].requests]
    assert kinds == ["json_schema", "json_object"]
    servers[0].clear()
    run(tmp_path, reasoning, "r2")
    assert [r.body["response_format"]["type"] for r in servers[0].requests] == ["json_object"]
    states = {s.advisor: s for s in availability_now(reasoning.store.load(), reasoning.ctx)}
    assert states["prop"].status is AdvisorStatus.AVAILABLE  # a refusal is no failure


def test_the_prompt_mode_sends_no_response_format_and_puts_the_schema_in_the_prompt(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    reasoning = reasoning_for(tmp_path, servers, structured_output="prompt")
    result = run(tmp_path, reasoning)
    [request] = servers[0].requests
    assert "response_format" not in request.body
    assert "JSON Schema" in request.body["messages"][0]["content"]
    assert "model:prop" in origins(result)


@pytest.mark.loadbearing
def test_whatever_text_a_model_writes_the_run_records_it_safely(tmp_path: Path) -> None:
    # Seen against a real server: a measure whose evidence was "" stopped a run (the record store
    # refuses an empty reference). Empty links, control sequences, a made-up private key.
    key = "-----BEGIN PRIVATE KEY-----\n" + "A" * 64 + "\n-----END PRIVATE KEY-----"
    hostile = proposal(
        {**measure(measure_type="prefabrication", saving=50000), "evidence": ["", "\x1b[31m"]},
        {**measure(measure_type="reuse", saving=40000, title=key), "rationale": "\x1b]0;x\x07"},
        measure(codes=[key], measure_type="phasing", saving=30000),  # a key as a cost code
        measure(measure_type="\x1b[2Jwipe", saving=20000),
    )

    result, reasoning = run_scripted(
        tmp_path, lambda m, o: hostile, lambda m, o: "VERDICT: REJECT — \x1b[31m", max_attempts=1
    )
    titles = [c.candidate.title for c in result.candidates]
    assert len(titles) == 3 and not any("PRIVATE KEY" in t or "\x1b" in t for t in titles)
    refused = [n for n in result.notes if "is not a candidate" in n]
    assert len(refused) == 2 and not any("BEGIN" in n for n in refused)  # said, never repeated
    empty_links = next(c for c in result.candidates if c.candidate.measure_type == "prefabrication")
    assert empty_links.validator.outcome == "rejected"  # the validator judged what the model said
    records = reasoning.store.load()
    assert not records.unreadable and records.of_kind("conclusion")


def test_a_model_repeating_the_planners_item_uses_none_of_max_candidates(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    # Found in review: a skipped duplicate used up the cap, and the conclusion counted it.
    servers[0].content = proposal(measure(), measure(measure_type="prefabrication", saving=50000))
    reasoning = reasoning_for(tmp_path, servers)
    result = run(tmp_path, reasoning, max_candidates=1)
    assert origins(result) == ["measure-option:k-01", "model:prop"]
    [conclusion] = [
        r.body
        for r in reasoning.store.load().of_kind("conclusion")
        if "model candidate" in r.body.decision
    ]
    assert conclusion.decision.startswith("add 1 model candidate")


def test_max_candidates_bounds_the_models_additions_never_the_planners_list(
    tmp_path: Path, servers: tuple[FakeLLMServer, FakeLLMServer]
) -> None:
    servers[0].content = proposal(
        *(measure(measure_type=f"type-{i}", saving=10000 + i) for i in range(3))
    )
    reasoning = reasoning_for(tmp_path, servers)
    result = run(tmp_path, reasoning, max_candidates=1)
    assert origins(result) == ["measure-option:k-01", "model:prop"]
    assert any("past max_candidates" in note for note in result.notes)


@pytest.mark.loadbearing
@pytest.mark.parametrize(("failure", "status"), [("dies", "unavailable"), ("hangs", "timeout")])
def test_a_failing_maker_turn_is_the_proposers_never_the_checkers(
    tmp_path: Path, failure: str, status: str
) -> None:
    calls = {"prop": 0}

    async def proposer(_messages: Any, _options: Any) -> str:
        calls["prop"] += 1
        if calls["prop"] > 1 and failure == "dies":  # proposes, then dies before defending it
            raise ConnectionError("the proposer's server went away")
        if calls["prop"] > 1:  # or hangs: its own deadline must fire before the checker's
            await asyncio.sleep(30)
        return PROPOSAL

    def factory(adv: Advisor, middleware: Any) -> Any:
        if adv.id == "prop":
            return ScriptedChatClient(handler=proposer, middleware=list(middleware))
        return default_client_factory(adv, middleware)

    with FakeLLMServer(content="Which drawings?") as checker:  # no verdict: the maker must answer
        reasoning = session(
            tmp_path,
            advisor("prop", "http://unused.invalid/v1", ("propose",)),
            advisor("check", checker.base_url, ("cost_review", "independent_reasoning")),
        )
        small_bundle(tmp_path / "bundle-r1")
        result = asyncio.run(
            run_project(
                tmp_path / "bundle-r1",
                verdicts=VerdictStore(),
                budget=budget(),
                settings=settings(max_rounds=4, consult_deadline_s=2.0),
                reasoning=reasoning,
                run_id="r1",
                client_factory=factory,
            )
        )
    model = next(c for c in result.candidates if c.candidate.origin == "model:prop")
    assert model.checker.outcome == "no_verdict"
    statuses = [(str(c.status), c.question) for c in consultations(reasoning, "prop")]
    assert statuses[0][0] == "completed"
    assert (status, f"the maker's defence of candidate {model.candidate.id}") in statuses
    assert {str(c.status) for c in consultations(reasoning, "check")} == {"completed"}
