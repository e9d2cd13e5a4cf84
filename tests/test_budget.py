"""Budgets: the per-run meter, the portfolio ledger, the chat middleware and the spend file.

The middleware runs on the real MAF layer stack over ``ScriptedChatClient``, which reports usage
(about four characters a token), so every charge here is an exact number.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, ChatContext, ChatResponse, Message

from portfolio_optimiser.pipeline.budget import (
    Budget,
    BudgetExceeded,
    BudgetMiddleware,
    PortfolioBudget,
    PortfolioMeter,
    Spend,
    SpendFileError,
    TokenMeter,
    read_spend,
    write_spend,
)
from portfolio_optimiser.pipeline.clients.scripted import ScriptedChatClient

BUDGET = Budget(run_tokens=1000, call_tokens=400, max_rounds=3)


class Handler:
    """A scripted model that counts its calls."""

    def __init__(self, text: str = "four words of reply") -> None:
        self.text = text
        self.calls = 0

    def __call__(self, messages: list[Message], options: Mapping[str, Any]) -> str:
        self.calls += 1
        return self.text


def agent_with(mw: BudgetMiddleware, handler: Handler) -> Agent[Any]:
    return Agent(client=ScriptedChatClient(handler=handler), name="a", middleware=[mw])


def ask(agent: Agent[Any], text: str, options: dict[str, Any] | None = None) -> str:
    async def call() -> str:
        return (await agent.run(text, options=options or {})).text

    return asyncio.run(call())


# --- the per-run meter ------------------------------------------------------------------------


def test_a_budget_without_positive_caps_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="run_tokens"):
        Budget(run_tokens=0, call_tokens=10, max_rounds=1)


def test_charging_records_and_only_check_enforces_the_run_cap() -> None:
    meter = TokenMeter(Budget(run_tokens=10, call_tokens=10, max_rounds=1))
    meter.charge(4, 6)
    meter.check()  # exactly at the cap is allowed
    meter.charge(1, 0)
    assert (meter.used, meter.remaining) == (11, 0)
    with pytest.raises(BudgetExceeded) as caught:
        meter.check()
    assert caught.value.which == "run_tokens"


def test_rounds_past_the_cap_raise() -> None:
    meter = TokenMeter(Budget(run_tokens=10, call_tokens=10, max_rounds=2))
    meter.tick_round()
    meter.tick_round()
    with pytest.raises(BudgetExceeded) as caught:
        meter.tick_round()
    assert caught.value.which == "max_rounds"


# --- the portfolio ledger ---------------------------------------------------------------------


def test_recording_never_raises_and_check_reports_the_portfolio_cap() -> None:
    ledger = PortfolioMeter(PortfolioBudget(total_tokens=100, per_run_claim=50), spent=90)
    ledger.record(30)
    assert (ledger.spent, ledger.remaining) == (120, 0)
    with pytest.raises(BudgetExceeded) as caught:
        ledger.check()
    assert caught.value.which == "portfolio_tokens"


def test_a_negative_record_gives_no_budget_back() -> None:
    ledger = PortfolioMeter(PortfolioBudget(total_tokens=100, per_run_claim=50), spent=10)
    ledger.record(-5)
    assert ledger.spent == 10


@pytest.mark.loadbearing
def test_admission_counts_claims_already_reserved_elsewhere() -> None:
    ledger = PortfolioMeter(PortfolioBudget(total_tokens=300, per_run_claim=100))
    assert ledger.admit_wave(["a", "b", "c"], reserved=100) == (["a", "b"], ["c"])


# --- the middleware ---------------------------------------------------------------------------


def test_a_call_is_charged_its_reported_usage_to_the_run_and_the_portfolio() -> None:
    meter = TokenMeter(BUDGET)
    ledger = PortfolioMeter(PortfolioBudget(total_tokens=10_000, per_run_claim=1000))
    handler = Handler()
    ask(agent_with(BudgetMiddleware(meter, ledger), handler), "hello there")
    # "hello there" is 3 tokens in, "four words of reply" 5 tokens out.
    assert (handler.calls, meter.used, ledger.spent) == (1, 8, 8)


def test_streamed_usage_is_charged_when_the_final_response_arrives() -> None:
    meter = TokenMeter(BUDGET)
    ledger = PortfolioMeter(PortfolioBudget(total_tokens=10_000, per_run_claim=1000))
    agent = agent_with(BudgetMiddleware(meter, ledger), Handler())

    async def stream() -> str:
        updates = agent.run("hello there", stream=True)
        async for _ in updates:
            pass
        return (await updates.get_final_response()).text

    assert asyncio.run(stream()) == "four words of reply"
    assert (meter.used, ledger.spent) == (8, 8)


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("run_used", "portfolio_spent", "max_tokens", "which"),
    [
        (0, 0, 500, "call_tokens"),  # 3 in + 500 out is over the call cap of 400
        (950, 0, None, "run_tokens"),  # 3 in + 100 out is over the run's 50 left
        (0, 9950, None, "portfolio_tokens"),  # ... and over the portfolio's 50 left
    ],
)
def test_the_guard_refuses_a_call_before_the_model_is_called(
    run_used: int, portfolio_spent: int, max_tokens: int | None, which: str
) -> None:
    meter = TokenMeter(BUDGET)
    meter.charge(run_used, 0)
    ledger = PortfolioMeter(
        PortfolioBudget(total_tokens=10_000, per_run_claim=1000), spent=portfolio_spent
    )
    handler = Handler()
    agent = agent_with(BudgetMiddleware(meter, ledger), handler)
    options: dict[str, Any] = {"max_tokens": max_tokens} if max_tokens else {}
    with pytest.raises(BudgetExceeded) as caught:
        ask(agent, "hello there", options)
    assert caught.value.which == which
    assert handler.calls == 0
    assert (meter.used, ledger.spent) == (run_used, portfolio_spent)


def test_the_guard_counts_agent_instructions_as_input() -> None:
    meter = TokenMeter(Budget(run_tokens=1000, call_tokens=110, max_rounds=1))
    handler = Handler()
    mw = BudgetMiddleware(meter)
    # 100 tokens of output allowance (call_tokens // 4 would be 27) plus 3 of prompt fits; the
    # 40-character instructions add 10 and do not.
    agent = Agent(
        client=ScriptedChatClient(handler=handler),
        name="a",
        instructions="x" * 40,
        middleware=[mw],
    )
    with pytest.raises(BudgetExceeded, match="call cap of 110"):
        ask(agent, "hello there", {"max_tokens": 100})
    assert handler.calls == 0


def test_a_call_that_breaks_the_run_cap_stops_the_run_after_it_is_charged() -> None:
    meter = TokenMeter(Budget(run_tokens=100, call_tokens=100, max_rounds=1))
    handler = Handler("x" * 400)  # 100 tokens out: the guard's estimate could not know
    with pytest.raises(BudgetExceeded) as caught:
        ask(agent_with(BudgetMiddleware(meter), handler), "hello there")
    assert caught.value.which == "run_tokens"
    assert (handler.calls, meter.used) == (1, 103)


def test_a_response_without_usage_is_charged_by_estimate() -> None:
    meter = TokenMeter(BUDGET)
    context = ChatContext(
        client=ScriptedChatClient(handler=Handler()),
        messages=[Message(role="user", contents=["hello there"])],
        options={},
    )

    async def call_next() -> None:
        context.result = ChatResponse(messages=[Message(role="assistant", contents=["12345678"])])

    asyncio.run(BudgetMiddleware(meter).process(context, call_next))
    assert meter.used == 3 + 2


# --- the spend file ---------------------------------------------------------------------------


def spend_text(**overrides: Any) -> str:
    data: dict[str, Any] = {"schema_version": 1, "spent_tokens": 5, "runs": [], "stamp": "t0"}
    return json.dumps({**data, **overrides})


def test_a_missing_spend_file_is_a_fresh_ledger(tmp_path: Path) -> None:
    assert read_spend(tmp_path / "spend.json") == Spend.empty()


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"schema_version": 1,', "not valid JSON (line 1"),
        ("", "not valid JSON"),
        ("{}", "schema_version"),
        ("[]", "top level"),
        (spend_text(spent_tokens="5"), "spent_tokens"),
        (spend_text(spent_tokens=True), "spent_tokens"),
        (spend_text(spent_tokens=-1), "spent_tokens"),
        (spend_text(schema_version=2), "schema_version"),
        (spend_text(runs={}), "runs"),
        (spend_text(stamp=7), "stamp"),
        (spend_text(runs=[{"run_id": "r", "project_id": "p", "tokens": -3}]), "runs.0.tokens"),
        (spend_text(runs=[{"run_id": "r", "project_id": "p", "tokens": 9}]), "below its runs"),
    ],
)
def test_a_corrupt_spend_file_raises_naming_the_file_and_the_fault(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "spend.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(SpendFileError) as caught:
        read_spend(path)
    assert str(path) in str(caught.value)
    assert problem in str(caught.value)
    assert "never read as zero" in str(caught.value)


def test_a_written_spend_reads_back_with_its_stamp(tmp_path: Path) -> None:
    path = tmp_path / "outbox" / "spend.json"
    spend = Spend.empty().add_run(run_id="r1", project_id="p1", tokens=40, budget_stop="run_tokens")
    written = write_spend(path, spend, stamp="2025-03-01T09:00:00Z")
    assert read_spend(path) == written
    assert (written.spent_tokens, written.stamp) == (40, "2025-03-01T09:00:00Z")


def test_the_same_spend_gives_the_same_bytes(tmp_path: Path) -> None:
    spend = Spend.empty().add_run(run_id="r1", project_id="p1", tokens=40)
    write_spend(tmp_path / "a.json", spend, stamp="s")
    write_spend(tmp_path / "b.json", spend, stamp="s")
    first = (tmp_path / "a.json").read_bytes()
    assert first == (tmp_path / "b.json").read_bytes()
    assert first.endswith(b"}\n")
    assert first.startswith(b'{\n  "runs"')  # sorted keys, two-space indent


def test_write_spend_has_no_clock_default_for_its_stamp(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_spend(tmp_path / "spend.json", Spend.empty())  # type: ignore[call-arg]
    assert not (tmp_path / "spend.json").exists()


def test_adding_a_run_leaves_the_old_ledger_as_it_was() -> None:
    before = Spend.empty()
    after = before.add_run(run_id="r", project_id="p", tokens=7)
    assert (before.spent_tokens, len(before.runs)) == (0, 0)
    assert (after.spent_tokens, after.runs[0].tokens) == (7, 7)


# --- waves ------------------------------------------------------------------------------------


def ledger_of(total: int, claim: int = 100, spent: int = 0) -> PortfolioMeter:
    return PortfolioMeter(PortfolioBudget(total_tokens=total, per_run_claim=claim), spent=spent)
