"""A run's candidates are reviewed beside each other's checker calls, and the calls are made one
at a time, in the candidates' order (``pipeline/turns.py``)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.learning import VerdictStore
from portfolio_optimiser.pipeline import debate
from portfolio_optimiser.pipeline.outcome import RunResult
from portfolio_optimiser.pipeline.run import run_project
from portfolio_optimiser.pipeline.turns import ModelTurn, in_turns
from portfolio_optimiser.reasoning.records import (
    AssessmentInput,
    ConsultationInput,
    StoredPlan,
    StoredRecord,
)

from .pipeline_helpers import (
    CHECKER,
    PROPOSER,
    budget,
    factory,
    measure,
    proposal,
    session,
    settings,
    small_bundle,
)

MEASURES = (
    measure(),
    measure(saving=96000, codes=("01",), measure_type="scope", title="Smaller site"),
    measure(saving=48000, measure_type="procurement", title="Framework agreement"),
)


BUILT: list[object] = []


@pytest.fixture(autouse=True)
def _count_debates_built(monkeypatch: pytest.MonkeyPatch) -> None:
    BUILT.clear()
    build = debate.build_debate

    def counted(**kwargs: Any) -> Any:
        BUILT.append(built := build(**kwargs))
        return built

    monkeypatch.setattr(debate, "build_debate", counted)


class Checker:
    """A checker that takes a while to answer, and counts how many of its calls overlap."""

    def __init__(self, answer: str = "Figures hold.\nVERDICT: APPROVE") -> None:
        self.answer = answer
        self.in_flight = 0
        self.most = 0
        self.calls = 0
        self.built: list[int] = []
        """How many debates had been built as each call returned."""

    async def __call__(self, _messages: Any, _options: Any) -> str:
        self.calls += 1
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(0.05)
        finally:
            self.in_flight -= 1
        self.built.append(len(BUILT))
        return self.answer


def _run(tmp_path: Path, checker: Checker, **kwargs: Any) -> tuple[RunResult, list[StoredRecord]]:
    reasoning = session(tmp_path, PROPOSER, CHECKER)
    result = asyncio.run(
        run_project(
            small_bundle(tmp_path / "b", kuttliste=False),
            verdicts=VerdictStore(),
            budget=kwargs.pop("budget", budget()),
            settings=settings(),
            reasoning=reasoning,
            run_id="r1",
            client_factory=factory({"p1": lambda m, o: proposal(*MEASURES), "k1": checker}),
        )
    )
    reasoning.store.commit()
    records = sorted(reasoning.store.load().of_task(result.task), key=lambda r: r.seq)
    return result, records


def _by_candidate(records: list[StoredRecord], kind: type[Any]) -> dict[str, int]:
    """The seq of each candidate's record of ``kind``, by the candidate its assessment names."""
    subject = {
        r.id: r.body.subject.split()[1]
        for r in records
        if isinstance(r.body, AssessmentInput) and r.body.subject.startswith("candidate ")
    }
    plans = {r.id: r.body.assessment for r in records if isinstance(r.body, StoredPlan)}
    found = {}
    for r in records:
        body = r.body
        if kind is AssessmentInput and r.id in subject:
            found[subject[r.id]] = r.seq
        consulted = isinstance(body, ConsultationInput) and plans.get(body.plan) in subject
        if kind is ConsultationInput and consulted:
            assert isinstance(body, ConsultationInput)
            found[subject[plans[body.plan]]] = r.seq
    return found


@pytest.mark.loadbearing
def test_the_next_candidate_is_assessed_while_a_checker_call_is_in_flight(tmp_path: Path) -> None:
    checker = Checker()
    result, records = _run(tmp_path, checker)
    order = [c.candidate.id for c in result.candidates]
    assert len(order) == 3 and checker.calls == 3
    assessed = _by_candidate(records, AssessmentInput)
    consulted = _by_candidate(records, ConsultationInput)
    # Each next candidate was assessed before the call of the one before it had returned.
    for before, after in itertools.pairwise(order):
        assert assessed[after] < consulted[before], (before, after)
    assert all(c.checker.outcome == "approved" for c in result.candidates)


@pytest.mark.loadbearing
def test_the_next_candidates_debate_is_built_while_a_checker_call_is_in_flight(
    tmp_path: Path,
) -> None:
    checker = Checker()
    _run(tmp_path, checker)
    # As the first call returns, the second candidate's group chat is built already; the last
    # candidate's is built during the second call.
    assert checker.built == [2, 3, 3]
    assert len(BUILT) == 3


@pytest.mark.loadbearing
def test_a_run_asks_its_checker_one_candidate_at_a_time_in_their_order(tmp_path: Path) -> None:
    checker = Checker()
    result, records = _run(tmp_path, checker)
    consulted = _by_candidate(records, ConsultationInput)
    assert checker.most == 1
    assert [consulted[c.candidate.id] for c in result.candidates] == sorted(consulted.values())


def test_a_budget_spent_mid_review_keeps_the_reviews_that_ended_before_it(tmp_path: Path) -> None:
    # Long answers: the proposal and two debates fit the run's tokens, the third call does not.
    checker = Checker("The figures hold. " * 105 + "\nVERDICT: APPROVE")
    result, _records = _run(tmp_path, checker, budget=budget(run_tokens=2450))
    assert result.budget_stop == "run_tokens"
    assert [bool(c.conclusion) for c in result.candidates] == [True, True, False]
    assert [c.checker.outcome for c in result.candidates[:2]] == ["approved", "approved"]
    assert checker.calls == 2


def test_a_review_that_takes_no_turn_starts_the_next_once_it_ends() -> None:
    async def main() -> list[str]:
        turn, ended = ModelTurn(), []

        def review(name: str, wait_s: float) -> Any:
            async def one() -> None:
                await asyncio.sleep(wait_s)
                ended.append(name)

            return one

        await in_turns(turn, [review("a", 0.03), review("b", 0.0), review("c", 0.01)])
        return ended

    # None takes a turn, so each starts once the one before it ended: they end in order.
    assert asyncio.run(main()) == ["a", "b", "c"]


def test_a_review_that_raises_stops_the_ones_after_it_and_cancels_those_running() -> None:
    async def main() -> tuple[list[str], str]:
        turn, started = ModelTurn(), []

        def review(name: str, fails: bool) -> Any:
            async def one() -> None:
                started.append(name)
                async with turn.held():
                    if fails:
                        raise RuntimeError(name)
                    await asyncio.sleep(0.05)

            return one

        try:
            await in_turns(turn, [review("a", False), review("b", True), review("c", False)])
        except RuntimeError as exc:
            return started, str(exc)
        return started, ""

    started, raised = asyncio.run(main())
    assert raised == "b" and "c" not in started
