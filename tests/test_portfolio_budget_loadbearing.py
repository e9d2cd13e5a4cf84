"""The global token cap's three teeth, each held by a test that goes red when the tooth is pulled.

One test per mutation in DESIGN §4 "Budgets": detach the wave check, the pre-call guard, the wave
reservation or the start-up refusal; check the run cap before the global credit; read the spend
file tolerantly. The portfolio total and claims are chosen so each tooth alone decides the result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, ChatResponse, Message

from portfolio_optimiser.pipeline.budget import (
    Budget,
    BudgetExceeded,
    BudgetMiddleware,
    PortfolioBudget,
    PortfolioMeter,
    SpendFileError,
    TokenMeter,
    read_spend,
)
from portfolio_optimiser.pipeline.clients.scripted import ScriptedChatClient, reply

pytestmark = pytest.mark.loadbearing

CLAIM = 100


def ask(agent: Agent[Any], text: str) -> str:
    async def call() -> str:
        return (await agent.run(text)).text

    return asyncio.run(call())


def ledger_of(total: int) -> PortfolioMeter:
    return PortfolioMeter(PortfolioBudget(total_tokens=total, per_run_claim=CLAIM))


def test_a_wave_reserves_each_members_claim_against_the_same_remainder() -> None:
    # Five ready against 250 tokens: without reservation all five would start.
    assert ledger_of(250).admit_wave(list("abcde")) == (["a", "b"], ["c", "d", "e"])


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
