"""One maker-checker debate's turns: the maker's opening is the proposal, heard by the checker as
the maker's turn without an agent speaking it, and ``max_rounds`` counts it as the first turn."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from agent_framework import Message

from portfolio_optimiser.pipeline.checker import CHECKER, MAKER, ask_checker
from portfolio_optimiser.pipeline.clients.scripted import ScriptedChatClient

OPENING = "Candidate c1: prefabricated walls save 96 000 NOK."
TASK = "Check the reasoning behind candidate c1."


class Side:
    """A scripted participant that keeps every conversation it was asked to answer."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.heard: list[list[tuple[str, str | None, str]]] = []

    async def __call__(self, messages: list[Message], _options: Mapping[str, Any]) -> str:
        self.heard.append([(str(m.role), m.author_name, m.text or "") for m in messages])
        return self.answers[min(len(self.heard), len(self.answers)) - 1]

    def client(self) -> ScriptedChatClient:
        return ScriptedChatClient(handler=self)


def debate(maker: Side, checker: Side, max_rounds: int) -> tuple[Any, Any, list[str]]:
    verdict, reason, turns = asyncio.run(
        ask_checker(
            opening=OPENING,
            maker_client=maker.client(),
            checker_client=checker.client(),
            task=TASK,
            max_rounds=max_rounds,
        )
    )
    return verdict, reason, [t.author for t in turns]


@pytest.mark.loadbearing
def test_the_checker_hears_the_opening_as_the_makers_turn_and_the_maker_is_not_asked() -> None:
    maker, checker = Side("The figures stand."), Side("Sound.\nVERDICT: APPROVE")
    verdict, _reason, authors = debate(maker, checker, max_rounds=4)
    assert (verdict, authors) == ("approve", [CHECKER])
    assert maker.heard == []  # the opening is written, not spoken: no agent turn, no call
    [conversation] = checker.heard
    assert conversation[-2:] == [("user", None, TASK), ("assistant", MAKER, OPENING)]


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("max_rounds", "spoken"),
    [(1, [CHECKER]), (2, [CHECKER]), (3, [CHECKER, MAKER]), (4, [CHECKER, MAKER, CHECKER])],
)
def test_max_rounds_counts_the_opening_as_the_first_turn(
    max_rounds: int, spoken: list[str]
) -> None:
    maker, checker = Side("The drawings are in annex B."), Side("Which drawings?")
    verdict, _reason, authors = debate(maker, checker, max_rounds=max_rounds)
    assert verdict is None
    assert authors == spoken


def test_the_makers_defence_answers_the_checkers_objection_and_the_checker_hears_it() -> None:
    maker = Side("The drawings are in annex B.")
    checker = Side("Which drawings?", "Found them.\nVERDICT: REJECT — the walls are load-bearing")
    verdict, reason, authors = debate(maker, checker, max_rounds=4)
    assert (verdict, reason) == ("reject", "the walls are load-bearing")
    assert authors == [CHECKER, MAKER, CHECKER]
    [asked] = maker.heard
    assert (MAKER, OPENING) in [(author, text) for _role, author, text in asked]
    assert asked[-1][1:] == (CHECKER, "Which drawings?")
    assert checker.heard[1][-1][1:] == (MAKER, "The drawings are in annex B.")
