"""What leaves the machine for a model: redacted, capped, and held to its cap.

Decides: the text and the output cap of every model call. One chat middleware per advisor client,
placed first (before the budget guard, so the guard prices what is really sent):

1. every message's text and every tool result passes :func:`scrub`, the same table the record
   writer and the logs use; a text carrying a private key is withheld whole. The kinds withheld
   are collected for the run's provenance, never the values;
2. the call gets an output cap: the role's cap (``options["max_tokens"]`` as the agent set it),
   lowered to what ``call_tokens`` leaves after the prompt, sent in the field the advisor honours
   (its adapter's ``cap_options``, the field negotiated in :mod:`~portfolio_optimiser.reasoning.negotiation`);
3. an answer longer than the cap is the server's fault (it ignored the field): an ``error``
   outcome naming the option to set, never an answer used.

Never decides whom to ask or what a reply means.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, Final

from agent_framework import ChatContext, ChatMiddleware, ChatResponse, Content, Message

from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.negotiation import Feature, Terms, step_down
from portfolio_optimiser.reasoning.redaction import RedactionRefused, scrub
from portfolio_optimiser.reasoning.transport import AdvisorError, Answer, UnsupportedForm

from .budget import estimate_tokens, prompt_text

__all__ = [
    "CapOptions",
    "OutboundMiddleware",
    "TermsHolder",
    "default_cap_options",
    "negotiate",
    "redacted",
]

CapOptions = Callable[[int, str], dict[str, Any]]
"""(cap, cap field) → the chat options that carry the cap to this adapter's server."""

OVERRUN_SLACK: Final = 8
"""Tokens past the cap still taken as honoured (servers count a stop token differently)."""
WITHHELD: Final = "[withheld: the text carried a private key]"


def default_cap_options(cap: int, _field: str) -> dict[str, Any]:
    """MAF's own option: each client translates ``max_tokens`` into its API's field."""
    return {"max_tokens": cap}


class TermsHolder:
    """The terms in force for one advisor in one run, which the exchanges step down on a
    refusal, and the build the server last named, which its consultations record."""

    def __init__(self, terms: Terms) -> None:
        self.terms = terms
        self.server: str | None = None
        """The build the server last said it runs (``system_fingerprint``)."""


async def negotiate(
    advisor: Advisor,
    holder: TermsHolder,
    attempt: Callable[[Terms], Awaitable[Answer]],
    *,
    asks_structured_output: bool = True,
) -> Answer:
    """Run ``attempt`` on the terms in force, stepping down a ladder each time a form is refused.

    Bounded by the ladders' lengths. What was refused travels on the answer (or on the error that
    ended the exchange), so the consultation records it and the next run starts past it.
    """
    refused: list[str] = []
    while True:
        terms = holder.terms
        mode = terms.output_mode if asks_structured_output else None
        try:
            answer = await attempt(terms)
        except UnsupportedForm as exc:
            feature: Feature = "cap_field" if exc.feature == "cap_field" else "output_mode"
            refused.append(f"{feature}={terms.value(feature)}")
            lower = step_down(advisor, terms, feature)
            if lower is None:
                exc.refused, exc.output_mode = tuple(refused), mode
                raise
            holder.terms = lower
            continue
        except AdvisorError as exc:
            exc.refused, exc.output_mode = tuple(refused), mode
            raise
        return replace(answer, refused=tuple(refused), output_mode=mode, server=holder.server)


def _clean(text: str, withheld: set[str]) -> str:
    try:
        result = scrub(text)
    except RedactionRefused:
        withheld.add("private-key")
        return WITHHELD
    withheld.update(result.kinds)
    return result.text


def _clean_content(content: Content, withheld: set[str]) -> Content:
    if content.type == "text" and content.text:
        clean = copy.copy(content)
        clean.text = _clean(content.text, withheld)
        return clean
    if content.type == "function_result":
        clean = copy.copy(content)
        if isinstance(content.result, str):
            clean.result = _clean(content.result, withheld)
        items = getattr(content, "items", None)
        if items:
            clean.items = [_clean_content(item, withheld) for item in items]
        return clean
    return content


def redacted(message: Message, withheld: set[str]) -> Message:
    """A call-local copy of ``message`` with every text and tool result scrubbed."""
    return Message(
        role=message.role,
        contents=[_clean_content(c, withheld) for c in message.contents],
        author_name=message.author_name,
        message_id=message.message_id,
        additional_properties=message.additional_properties,
    )


class OutboundMiddleware(ChatMiddleware):
    def __init__(
        self,
        *,
        advisor_id: str,
        terms: TermsHolder,
        call_tokens: int,
        withheld: set[str],
        cap_options: CapOptions = default_cap_options,
        default_cap: int = 1024,
    ) -> None:
        self.advisor_id = advisor_id
        self.terms = terms
        self.call_tokens = call_tokens
        self.withheld = withheld
        self.cap_options = cap_options
        self.default_cap = default_cap

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        context.messages = [redacted(m, self.withheld) for m in context.messages]
        options: dict[str, Any] = dict(context.options or {})
        instructions = options.get("instructions")
        if isinstance(instructions, str):
            options["instructions"] = _clean(instructions, self.withheld)
        prompt = prompt_text(context.messages, options)
        role_cap = int(options.pop("max_tokens", None) or self.default_cap)
        # What the per-call cap leaves after the prompt; at least one token, so a call the budget
        # cannot pay for is refused by the budget guard with its own sentence, not sent uncapped.
        cap = max(1, min(role_cap, self.call_tokens - estimate_tokens(prompt)))
        options.update(self.cap_options(cap, self.terms.terms.cap_field))
        context.options = options
        context.metadata["output_cap"] = cap
        if context.stream:
            context.stream_result_hooks.append(lambda final: self._held_to(final, cap))
        await call_next()
        if not context.stream and isinstance(context.result, ChatResponse):
            self._held_to(context.result, cap)

    def _held_to(self, response: ChatResponse[Any], cap: int) -> ChatResponse[Any]:
        build = (response.additional_properties or {}).get("system_fingerprint")
        if isinstance(build, str) and build.strip():
            self.terms.server = build.strip()[:120]
        usage: Mapping[str, Any] = response.usage_details or {}
        # A server that reports no output count is measured by what it sent.
        produced = int(usage.get("output_token_count") or 0) or estimate_tokens(response.text or "")
        if produced > cap + OVERRUN_SLACK:
            raise AdvisorError(
                self.advisor_id,
                f"answered {produced} tokens where the output cap was {cap}: the server ignores "
                f"the cap field ({self.terms.terms.cap_field}); set options.output_cap_field to "
                "one it honours",
            )
        return response
