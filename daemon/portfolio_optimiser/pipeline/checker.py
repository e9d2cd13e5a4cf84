"""Maker-checker: a MAF group chat per candidate that checks the reasoning behind its numbers.

Decides: the checker's outcome for one candidate and one checker advisor. A fresh workflow is built
for every candidate (a reused workflow keeps the orchestrator's history and round counter). The
maker's opening is the conversation's first maker message, given with the task: no agent speaks
it (it is the proposal, already written), so the chat starts at the checker. The speakers then
alternate round-robin, ``max_rounds`` turns bound it (the opening counts as the first), and it
ends as soon as the checker writes its ``VERDICT:`` line. Every participant turn is captured
(``output_from="all"``), because the verdict lives in the checker's turn and the default output
is only the orchestrator's closing message. An explicit ``VERDICT: REJECT — reason`` blocks the
candidate; no verdict line fails open (``no_verdict``). The validator's decision is never touched
here: the two falsifiers are reported apart.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from agent_framework import Agent, Message
from agent_framework.orchestrations import GroupChatBuilder, GroupChatState
from pydantic import BaseModel, ConfigDict

from .prompts import CHECKER_INSTRUCTIONS, MAKER_INSTRUCTIONS

__all__ = ["CheckerOutcome", "Heard", "Turn", "ask_checker", "critique_of", "parse_verdict_line"]

MAKER, CHECKER = "maker", "checker"
_VERDICT = re.compile(
    r"^\s*\**VERDICT:\s*(APPROVE|REJECT)\b\**\s*(?:[—–:-]+\s*)?(.*?)\s*$",
    re.IGNORECASE | re.MULTILINE,
)


class Heard(BaseModel):
    """What one checker consultation said, normalised for the expert: never the raw answer."""

    model_config = ConfigDict(frozen=True)

    advisor: str
    model: str | None = None
    status: str
    position: str | None = None
    """``approve``, ``reject`` or ``no verdict`` when it answered; None when it did not."""
    reasons: tuple[str, ...] = ()
    diagnostic: str | None = None
    """Why no answer came (one line), when none did."""


class CheckerOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    outcome: Literal["approved", "rejected", "no_verdict", "not_run"]
    reason: str | None = None
    advisors: tuple[str, ...] = ()
    heard: tuple[Heard, ...] = ()


@dataclass(frozen=True)
class Turn:
    author: str
    text: str
    input_tokens: int = 0
    output_tokens: int = 0


MAX_REASONS: Final = 4
MAX_REASON_CHARS: Final = 280


def critique_of(text: str) -> tuple[str, ...]:
    """A checker turn's reasons: its sentences without the VERDICT line, few and short.

    Bounded so that a rambling answer cannot flood a report, and taken from the turn's own words
    so the expert reads what the checker argued, not a summary of it.
    """
    body = _VERDICT.sub("", text)
    pieces = [p.strip(" -*#\t") for p in re.split(r"(?<=[.!?])\s+|\n+", body)]
    reasons: list[str] = []
    for piece in pieces:
        words = " ".join(piece.split())
        if len(words) < 3 or words in reasons:
            continue
        reasons.append(
            words if len(words) <= MAX_REASON_CHARS else words[: MAX_REASON_CHARS - 1] + "…"
        )
        if len(reasons) == MAX_REASONS:
            break
    return tuple(reasons)


def parse_verdict_line(text: str) -> tuple[str | None, str | None]:
    """The last ``VERDICT:`` line of a turn: ("approve" | "reject" | None, reason)."""
    matches = list(_VERDICT.finditer(text))
    if not matches:
        return None, None
    last = matches[-1]
    return last.group(1).lower(), (last.group(2) or None)


def _round_robin(state: GroupChatState) -> str:
    """Maker and checker in turn, the checker first: the maker's opening came with the task."""
    names = list(state.participants)
    return names[(state.current_round + 1) % len(names)]


async def ask_checker(
    *,
    opening: str,
    maker_client: Any,
    checker_client: Any,
    task: str,
    max_rounds: int,
    checker_options: dict[str, Any] | None = None,
) -> tuple[str | None, str | None, list[Turn]]:
    """Run one maker-checker debate that opens with the maker's ``opening``; return (verdict,
    reason, every turn spoken after it, in order)."""
    maker = Agent(client=maker_client, name=MAKER, instructions=MAKER_INSTRUCTIONS)
    checker = Agent(
        client=checker_client,
        name=CHECKER,
        instructions=CHECKER_INSTRUCTIONS,
        default_options=checker_options or {},
    )

    def checker_has_spoken(conversation: list[Message]) -> bool:
        last = conversation[-1] if conversation else None
        return bool(
            last is not None
            and last.author_name == CHECKER
            and parse_verdict_line(last.text or "")[0]
        )

    workflow = GroupChatBuilder(
        participants=[maker, checker],
        selection_func=_round_robin,
        orchestrator_name="moderator",
        termination_condition=checker_has_spoken,
        # The opening is the first of the debate's turns.
        max_rounds=max(max_rounds - 1, 1),
        output_from="all",
    ).build()
    result = await workflow.run(
        [
            Message(role="user", contents=[task]),
            Message(role="assistant", author_name=MAKER, contents=[opening]),
        ]
    )
    turns = [_turn(output) for output in result.get_outputs()]
    turns = [t for t in turns if t.author in {MAKER, CHECKER}]
    verdict, reason = None, None
    for turn in reversed(turns):
        if turn.author == CHECKER:
            verdict, reason = parse_verdict_line(turn.text)
            if verdict:
                break
    return verdict, reason, turns


def _turn(output: Any) -> Turn:
    messages: Sequence[Message] = getattr(output, "messages", None) or []
    author = (
        next((m.author_name for m in messages if m.author_name), None)
        or getattr(output, "author_name", "")
        or ""
    )
    text = (
        "\n".join(m.text or "" for m in messages)
        if messages
        else str(getattr(output, "text", output))
    )
    usage = getattr(output, "usage_details", None) or {}
    return Turn(
        author=author,
        text=text,
        input_tokens=int(usage.get("input_token_count") or 0),
        output_tokens=int(usage.get("output_token_count") or 0),
    )
