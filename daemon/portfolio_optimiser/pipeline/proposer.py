"""One proposer attempt as one exchange of the transport contract.

Decides: what the proposer model is asked (the hypothesis prompt, its tools, the output cap, the
structured-output form its terms name) and whether its answer is a proposal. The answer is read
as JSON and validated by pydantic here, before any candidate exists: a model's answer that is not
a proposal is ``malformed`` with the reason (the next attempt is told it), an empty one ``empty``,
and whatever the client library raises is typed by the adapter's table. It never gates a
candidate: the validator does that, after.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agent_framework import Agent
from pydantic import BaseModel, Field, ValidationError

from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.negotiation import Terms
from portfolio_optimiser.reasoning.records import Stance, Usage
from portfolio_optimiser.reasoning.redaction import safe_text
from portfolio_optimiser.reasoning.transport import Answer, EmptyAnswer, MalformedAnswer, Question

from .clients._errors import ExtraErrors, map_sdk_errors
from .outbound import TermsHolder, negotiate
from .prompts import PROPOSER_INSTRUCTIONS

__all__ = ["Proposal", "ProposedMeasure", "ProposerExchange", "parse_proposal", "response_format"]


class ProposedMeasure(BaseModel):
    title: str
    affected_codes: list[str] = Field(min_length=1)
    measure_type: str = Field(min_length=1)
    claimed_saving_nok: int | float
    quantity: int | float | None = None
    unit: str | None = None
    unit_price_nok: int | float | None = None
    rationale: str = ""
    evidence: list[str] = Field(default_factory=list)


class Proposal(BaseModel):
    candidates: list[ProposedMeasure]


_FENCED: Final = re.compile(r"```(?:json)?\s*(\{.*\})\s*```", re.DOTALL)


@functools.cache
def _proposal_schema() -> str:
    """The proposal's JSON Schema, made once (0.6 ms a run when made for each)."""
    return json.dumps(Proposal.model_json_schema(), separators=(",", ":"))


def response_format(mode: str) -> dict[str, Any] | None:
    """The ``response_format`` an output mode sends; ``prompt`` sends none. Each a copy of its
    own: the client it is handed may change it."""
    schema = json.loads(_proposal_schema())
    if mode == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": "Proposal", "schema": schema, "strict": False},
        }
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


def _schema_in_prompt() -> str:
    return (
        "Answer with one JSON object and nothing else, matching this JSON Schema:\n"
        + _proposal_schema()
    )


def parse_proposal(advisor_id: str, text: str) -> Proposal:
    """The proposal in a model's answer, or the typed error saying why there is none."""
    if not text.strip():
        raise EmptyAnswer(advisor_id, "the proposer returned no text")
    fenced = _FENCED.search(text)
    body = fenced.group(1) if fenced else text[text.find("{") : text.rfind("}") + 1]
    if not body:
        raise MalformedAnswer(
            advisor_id, "the answer holds no JSON object; answer with the proposal only"
        )
    try:
        return Proposal.model_validate_json(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "the top level"
        raise MalformedAnswer(
            advisor_id, f"the proposal does not match its format at {where}: {error['msg']}"
        ) from None


@dataclass
class ProposerExchange:
    """``exchange`` runs one attempt; ``proposal`` holds what the last successful one proposed."""

    advisor: Advisor
    client: Callable[[], Any]
    """Builds (or returns) the advisor's chat client; called inside the exchange, so a client
    that cannot be built is this consultation's outcome, not the run's exception."""
    tools: Sequence[Any]
    prompt: str
    terms: TermsHolder
    output_cap: int
    errors: ExtraErrors = None
    proposal: Proposal | None = field(default=None, init=False)

    async def exchange(self, question: Question, *, deadline_s: float) -> Answer:
        return await negotiate(self.advisor, self.terms, self._attempt)

    async def _attempt(self, terms: Terms) -> Answer:
        prompt_mode = terms.output_mode == "prompt"
        agent = Agent(
            client=self.client(),
            name="proposer",
            instructions=PROPOSER_INSTRUCTIONS
            + ("\n\n" + _schema_in_prompt() if prompt_mode else ""),
            tools=list(self.tools),
        )
        options: dict[str, Any] = {"max_tokens": self.output_cap}
        form = response_format(terms.output_mode)
        if form is not None:
            options["response_format"] = form
        with map_sdk_errors(self.advisor.id, self.errors):
            response = await agent.run(self.prompt, options=options)
        proposal = parse_proposal(self.advisor.id, response.text or "")
        self.proposal = proposal
        usage = response.usage_details or {}
        titles = "; ".join(safe_text(m.title) for m in proposal.candidates[:5])
        return Answer(
            stance=Stance.SUPPORTS if proposal.candidates else Stance.INCONCLUSIVE,
            conclusion=(
                f"proposed {len(proposal.candidates)} measure(s)"
                + (f": {titles}" if titles else "")
            )[:500],
            usage=Usage(
                input_tokens=int(usage.get("input_token_count") or 0),
                output_tokens=int(usage.get("output_token_count") or 0),
            ),
        )
