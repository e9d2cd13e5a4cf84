"""The global token cap's three teeth, each held by a test that goes red when the tooth is pulled.

One test per mutation in DESIGN §4 "Budgets": detach the wave check, the pre-call guard, the wave
reservation or the start-up refusal; check the run cap before the global credit; read the spend
file tolerantly. The portfolio total and claims are chosen so each tooth alone decides the result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, ChatResponse, Message

from portfolio_optimiser.pipeline.budget import (
    Budget,
    BudgetExceeded,
    BudgetMiddleware,
    BudgetRefused,
    PortfolioBudget,
    PortfolioMeter,
    SpendFileError,
    TokenMeter,
    read_spend,
    run_waves,
)
from portfolio_optimiser.pipeline.clients.scripted import ScriptedChatClient, reply

pytestmark = pytest.mark.loadbearing

CLAIM = 100


@dataclass(frozen=True)
class Result:
    project: str
    tokens: int
    budget_stop: str | None = None


class Runs:
    """A run_one that spends a whole claim and remembers which projects it started."""

    def __init__(self) -> None:
        self.started: list[str] = []

    async def __call__(self, project: str) -> Result:
        self.started.append(project)
        await asyncio.sleep(0)
        return Result(project, CLAIM)


def ask(agent: Agent[Any], text: str) -> str:
    async def call() -> str:
        return (await agent.run(text)).text

    return asyncio.run(call())


def ledger_of(total: int) -> PortfolioMeter:
    return PortfolioMeter(PortfolioBudget(total_tokens=total, per_run_claim=CLAIM))


def test_start_up_refuses_a_remainder_that_cannot_fund_one_run_before_anything_runs() -> None:
    runs = Runs()
    with pytest.raises(BudgetRefused):
        asyncio.run(run_waves(["a", "b"], runs, meter=ledger_of(CLAIM - 1), concurrency=2))
    assert runs.started == []


def test_a_project_that_cannot_be_funded_is_never_started_and_the_pass_stops_structured() -> None:
    runs = Runs()
    # One at a time: after two runs 50 tokens are left, less than the third's claim.
    outcome = asyncio.run(run_waves(list("abcd"), runs, meter=ledger_of(250), concurrency=1))
    assert runs.started == ["a", "b"]
    assert [r.project for r in outcome.completed] == ["a", "b"]
    assert outcome.never_started == ("c", "d")
    assert (outcome.budget_stop, outcome.stopped_early) == ("portfolio_tokens", True)


def test_a_wave_reserves_each_members_claim_against_the_same_remainder() -> None:
    assert ledger_of(250).admit_wave(list("abcde")) == (["a", "b"], ["c", "d", "e"])
    runs = Runs()
    # Five at once against 250 tokens: without reservation all five would start.
    outcome = asyncio.run(run_waves(list("abcde"), runs, meter=ledger_of(250), concurrency=5))
    assert runs.started == ["a", "b"]
    assert outcome.never_started == ("c", "d", "e")
    assert outcome.spent_tokens == 200


def test_the_guard_refuses_a_call_the_portfolio_cannot_pay_before_the_model_is_called() -> None:
    calls: list[int] = []

    def handler(messages: list[Message], options: Mapping[str, Any]) -> str:
        calls.append(1)
        return "ok"

    meter = TokenMeter(Budget(run_tokens=1000, call_tokens=400, max_rounds=1))
    ledger = PortfolioMeter(PortfolioBudget(total_tokens=10_000, per_run_claim=1000), spent=9_950)
    agent = Agent(
        client=ScriptedChatClient(handler=handler),
        name="a",
        middleware=[BudgetMiddleware(meter, ledger)],
    )
    with pytest.raises(BudgetExceeded) as caught:
        ask(agent, "hello there")  # may use 3 + 100 tokens, 50 are left
    assert caught.value.which == "portfolio_tokens"
    assert calls == []
    assert ledger.spent == 9_950


def test_a_charge_that_breaks_the_run_cap_still_reaches_the_portfolio_ledger() -> None:
    def handler(messages: list[Message], options: Mapping[str, Any]) -> ChatResponse[Any]:
        return reply("done", input_tokens=150)  # billed 151, over the run cap of 100

    meter = TokenMeter(Budget(run_tokens=100, call_tokens=100, max_rounds=1))
    ledger = PortfolioMeter(PortfolioBudget(total_tokens=10_000, per_run_claim=100))
    agent = Agent(
        client=ScriptedChatClient(handler=handler),
        name="a",
        middleware=[BudgetMiddleware(meter, ledger)],
    )
    with pytest.raises(BudgetExceeded) as caught:
        ask(agent, "go")
    assert caught.value.which == "run_tokens"
    assert ledger.spent == 151


def test_a_corrupt_spend_file_is_an_error_never_zero(tmp_path: Path) -> None:
    path = tmp_path / "spend.json"
    path.write_text('{"schema_version": 1, "spent_tokens": 9000, "runs": [', encoding="utf-8")
    with pytest.raises(SpendFileError, match=r"spend\.json"):
        read_spend(path)
