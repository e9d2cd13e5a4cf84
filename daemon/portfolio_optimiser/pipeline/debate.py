"""One maker-checker debate as one exchange of the transport contract, for one checker advisor.

Decides: who speaks for the candidate, and what the checker's consultation records. The maker's
opening is the proposal itself, as the validator left it (no model call and no agent turn: the
candidate already says what it claims), so a checker that approves on its first turn costs one
call. The seed's debate intent — the proposer defends its measure and concedes what the checker
proves — holds from the second maker turn on: the maker then speaks through the proposer's model
when one answered in this run, else it restates the recomputed figures. A maker turn that fails
is recorded against the *proposer* (``on_maker_failure``), never against the checker, and the
debate goes on with the restated figures. The checker's answer is recorded normalised: its position and
a few of its own sentences as reasons (:func:`critique_of`), never the raw answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent_framework import ChatResponse, Message

from portfolio_optimiser._text import strip_control
from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.negotiation import Terms
from portfolio_optimiser.reasoning.records import Stance, Usage
from portfolio_optimiser.reasoning.redaction import safe_text
from portfolio_optimiser.reasoning.transport import (
    AdvisorError,
    AdvisorTimeout,
    Answer,
    EmptyAnswer,
    Question,
)

from .budget import BudgetExceeded
from .checker import CHECKER, ask_checker, critique_of
from .clients._errors import ExtraErrors, map_sdk_errors, translate
from .clients.scripted import ScriptedChatClient
from .outbound import TermsHolder, negotiate

__all__ = ["DebateExchange", "MakerFailure", "maker_client"]

MakerFailure = Callable[[AdvisorError], Awaitable[None]]
"""Records a failed maker turn against the proposer that spoke it."""


def maker_client(
    *,
    defence: str,
    proposer: tuple[str, Any, ExtraErrors] | None,
    on_failure: MakerFailure,
    output_cap: int,
    deadline_s: float,
) -> ScriptedChatClient:
    """The maker's voice after its opening: the proposer's model (id, client, errors), or the
    figures once it has failed or when none proposed.

    It carries no middleware of its own: the proposer's client meters and redacts its own calls.
    """
    live = {"proposer": proposer}

    async def speak(messages: list[Message], options: Mapping[str, Any]) -> str | ChatResponse[Any]:
        voice = live["proposer"]
        if voice is None:
            return defence
        advisor_id, client, errors = voice
        try:
            with map_sdk_errors(advisor_id, errors):
                # A deadline of its own: a hanging proposer must time out as the proposer, before
                # the checker's consultation deadline would charge the hang to the checker.
                response: ChatResponse[Any] = await asyncio.wait_for(
                    client.get_response(messages, options={"max_tokens": output_cap}),
                    timeout=deadline_s,
                )
            if not (response.text or "").strip():
                raise EmptyAnswer(advisor_id, "the maker's turn was empty")
            return response
        except BudgetExceeded:
            raise
        except TimeoutError:
            await on_failure(
                AdvisorTimeout(advisor_id, f"the maker's turn took over {deadline_s:g} s")
            )
            live["proposer"] = None
            return defence
        except Exception as exc:
            typed = exc if isinstance(exc, AdvisorError) else translate(advisor_id, exc, errors)
            await on_failure(typed or AdvisorError(advisor_id, f"{type(exc).__name__}: {exc}"))
            live["proposer"] = None  # one failure per debate is enough to know
            return defence

    return ScriptedChatClient(handler=speak)


@dataclass
class DebateExchange:
    advisor: Advisor
    checker_client: Callable[[], Any]
    """Builds (or returns) the checker's chat client; called inside the exchange, so a client
    that cannot be built is this consultation's outcome, not the run's exception."""
    maker: Callable[[], ScriptedChatClient]
    opening: str
    """The maker's first turn: the proposal as the validator left it."""
    task: str
    max_rounds: int
    terms: TermsHolder
    output_cap: int
    errors: ExtraErrors = None

    async def exchange(self, question: Question, *, deadline_s: float) -> Answer:
        # A debate asks for no structured output: only its cap field is negotiated.
        return await negotiate(
            self.advisor, self.terms, self._attempt, asks_structured_output=False
        )

    async def _attempt(self, terms: Terms) -> Answer:
        with map_sdk_errors(self.advisor.id, self.errors):
            verdict, reason, turns = await ask_checker(
                opening=self.opening,
                maker_client=self.maker(),
                checker_client=self.checker_client(),
                task=self.task,
                max_rounds=self.max_rounds,
                checker_options={"max_tokens": self.output_cap},
            )
        spoken = [t for t in turns if t.author == CHECKER and strip_control(t.text).strip()]
        # What reaches a record is the model's text: control characters alone are no reason.
        reason = safe_text(strip_control(reason or "")).strip() or None
        if not spoken:
            raise EmptyAnswer(self.advisor.id, "the checker's turns were empty")
        last = spoken[-1]
        if verdict == "approve":
            stance, position = Stance.SUPPORTS, "VERDICT: APPROVE"
        elif verdict == "reject":
            stance, position = Stance.OPPOSES, reason or "rejected without a reason"
        else:
            stance, position = Stance.INCONCLUSIVE, "no VERDICT line; the gate fails open"
        return Answer(
            stance=stance,
            conclusion=position[:500],
            # Redacted whole before it is cut into sentences: a key split across two reasons
            # would pass a pattern that needs it in one piece.
            reasons=critique_of(safe_text(strip_control(last.text))),
            usage=Usage(
                input_tokens=sum(t.input_tokens for t in spoken),
                output_tokens=sum(t.output_tokens for t in spoken),
            ),
        )
