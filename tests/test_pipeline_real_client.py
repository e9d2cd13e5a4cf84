"""The pipeline with a real MAF chat-completions client against a loopback fake server.

Every failure mode of the server maps to its typed consultation status, the breaker opens where
the records say so, and the run still finishes (locally when it must). No credential, no network
beyond 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.learning import VerdictStore
from portfolio_optimiser.pipeline.run import ReasoningSession, default_client_factory, run_project
from portfolio_optimiser.reasoning.availability import AdvisorStatus, ConsultationStatus
from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.records import ConsultationInput
from portfolio_optimiser.reasoning.store import availability_now

from .fakes.llm_server import FakeLLMServer
from .pipeline_helpers import budget, measure, proposal, session, settings, small_bundle

VERDICT = "The figures hold.\nVERDICT: APPROVE"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    for name in list(os.environ):
        if name.startswith(("OPENAI", "AZURE", "OLLAMA")) or name.lower().endswith("_proxy"):
            monkeypatch.delenv(name, raising=False)
    with FakeLLMServer(content=VERDICT, slow_s=3.0) as fake:
        yield fake


def advisors(server: FakeLLMServer) -> tuple[Advisor, Advisor]:
    proposer = Advisor(
        id="prop",
        name="p",
        adapter="scripted",
        provider="test",
        model="m",
        local=True,
        capabilities=("propose",),
    )
    return proposer, loopback(server, "loopback", ("cost_review", "independent_reasoning"))


def loopback(
    server: FakeLLMServer, advisor_id: str, capabilities: tuple[str, ...], timeout_s: float = 2
) -> Advisor:
    """An advisor on the loopback server, through the real chat-completions client."""
    return Advisor(
        id=advisor_id,
        name=f"{advisor_id} (loopback)",
        adapter="openai-compatible",
        provider="self-hosted",
        model="fake-model",
        local=True,
        capabilities=capabilities,
        options={"base_url": server.base_url, "timeout_seconds": timeout_s},
    )


def factory_for(*savings: int) -> Any:
    def factory(advisor: Advisor, middleware: Any) -> Any:
        if advisor.adapter == "scripted":
            from portfolio_optimiser.pipeline.clients.scripted import ScriptedChatClient

            answer = proposal(
                *(measure(saving=s, measure_type=f"type-{i}") for i, s in enumerate(savings))
            )
            return ScriptedChatClient(handler=lambda m, o: answer, middleware=list(middleware))
        return default_client_factory(advisor, middleware)

    return factory


def run_once(
    tmp: Path, reasoning: ReasoningSession, run_id: str, savings: tuple[int, ...] = (144000,)
) -> Any:
    return asyncio.run(
        run_project(
            small_bundle(tmp / run_id, kuttliste=False),
            verdicts=VerdictStore(),
            budget=budget(),
            settings=settings(max_rounds=2, consult_deadline_s=1.0),
            reasoning=reasoning,
            run_id=run_id,
            client_factory=factory_for(*savings),
        )
    )


def consultations(
    reasoning: ReasoningSession, advisor: str = "loopback"
) -> list[ConsultationInput]:
    """The checker's consultations (the scripted proposer's are not under test here)."""
    return [
        r.body
        for r in reasoning.store.load().of_kind("consultation")
        if isinstance(r.body, ConsultationInput) and r.body.advisor == advisor
    ]


@pytest.mark.loadbearing
def test_a_real_client_checker_approves_through_the_group_chat(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    reasoning = session(tmp_path, *advisors(server))
    result = run_once(tmp_path, reasoning, "r1")
    [only] = result.candidates
    assert only.checker.outcome == "approved"
    assert [c.status for c in consultations(reasoning)] == [ConsultationStatus.COMPLETED]
    assert all(path.endswith("/chat/completions") for path in server.paths)


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("mode", "status"),
    [
        ("slow", ConsultationStatus.TIMEOUT),
        ("rate_limited", ConsultationStatus.RATE_LIMITED),
        ("server_error", ConsultationStatus.UNAVAILABLE),
        ("malformed", ConsultationStatus.MALFORMED),
        ("empty", ConsultationStatus.EMPTY),
        ("unauthorized", ConsultationStatus.AUTH_FAILED),
    ],
)
def test_each_failure_maps_to_its_status_and_the_run_still_finishes(
    tmp_path: Path, server: FakeLLMServer, mode: Any, status: ConsultationStatus
) -> None:
    server.mode = mode
    reasoning = session(tmp_path, *advisors(server))
    result = run_once(tmp_path, reasoning, "r1")
    assert [c.status for c in consultations(reasoning)] == [status]
    [only] = result.candidates
    assert only.validator.outcome == "accepted"
    assert only.conclusion is not None  # reviewed locally when no checker answered
    assert result.budget_stop is None


@pytest.mark.loadbearing
def test_two_server_errors_open_the_breaker_and_the_next_run_decides_locally(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    server.mode = "server_error"
    reasoning = session(tmp_path, *advisors(server))
    run_once(tmp_path, reasoning, "r1", savings=(144000, 100000))  # two candidates, two failures
    states = {s.advisor: s for s in availability_now(reasoning.store.load(), reasoning.ctx)}
    assert states["loopback"].status is AdvisorStatus.TEMPORARILY_FAILED
    requests_before = len(server.requests)
    third = run_once(tmp_path, reasoning, "r2", savings=(50000,))
    assert len(server.requests) == requests_before  # nobody asked the failing advisor
    assert third.candidates[0].plan_outcome == "decide_locally"
    assert third.candidates[0].conclusion is not None


@pytest.mark.loadbearing
def test_a_refused_form_is_asked_for_again_once_the_server_names_a_new_build(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    """llama-cpp-python refuses ``json_schema``; an upgrade may accept it. The refusal is kept
    while the server names the build it was made under, and tried again once it names another."""
    proposer = loopback(server, "loopback-proposer", ("propose",), timeout_s=5)
    server.slow_s, server.content = 0.0, proposal(measure(saving=144000, measure_type="t"))
    server.mode, server.fingerprint = "refuses_json_schema", "b4100-aaaa"
    reasoning = session(tmp_path, proposer)

    def run(run_id: str) -> list[str]:
        before = len(server.requests)
        asyncio.run(
            run_project(
                small_bundle(tmp_path / run_id, kuttliste=False),
                verdicts=VerdictStore(),
                budget=budget(),
                settings=settings(max_rounds=2),
                reasoning=reasoning,
                run_id=run_id,
            )
        )
        return [
            (r.body.get("response_format") or {}).get("type", "none")
            for r in server.requests[before:]
            if r.path.endswith("/chat/completions")
        ]

    assert run("r1") == ["json_schema", "json_object"]  # refused, stepped down
    server.mode, server.fingerprint = "normal", "b4200-bbbb"  # upgraded
    assert run("r2") == ["json_object"]  # the newest build it named is still the old one
    assert run("r3") == ["json_schema"]  # it named a new build: the better form again
    assert [c.server for c in consultations(reasoning, "loopback-proposer")] == [
        "b4100-aaaa",
        "b4200-bbbb",
        "b4200-bbbb",
    ]
