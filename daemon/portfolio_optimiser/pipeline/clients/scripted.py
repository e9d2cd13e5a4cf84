"""Adapter ``scripted``, and the deterministic chat client built on MAF's layered base: middleware and tools run as they do on
the real clients (a bare ``BaseChatClient`` silently drops both), and every call reports usage.

The maker's side of a debate speaks through it, and tests drive the real pipeline with it. A *handler* sees the messages
of each call (instructions prepended as a system message, as the real clients do) and returns the
reply: text, or a ready ``ChatResponse`` (for tool calls or structured output).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

from agent_framework import (
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    Message,
    ResponseStream,
    UsageDetails,
    prepend_instructions_to_messages,
)
from agent_framework.observability import ChatTelemetryLayer

from portfolio_optimiser.reasoning.catalogue import Advisor

__all__ = ["ChatHandler", "ScriptedChatClient", "chat_client_for", "estimate_tokens", "reply"]

Reply: TypeAlias = "str | ChatResponse[Any]"
ChatHandler: TypeAlias = Callable[[list[Message], Mapping[str, Any]], "Reply | Awaitable[Reply]"]


def estimate_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: about four characters a token."""
    return max(1, (len(text) + 3) // 4)


def _text_of(messages: Sequence[Message]) -> str:
    return "\n".join(m.text or "" for m in messages)


def reply(text: str, *, input_tokens: int = 0) -> ChatResponse[Any]:
    """A plain assistant reply with usage figures."""
    return ChatResponse(
        messages=[Message(role="assistant", contents=[text])],
        usage_details=UsageDetails(
            input_token_count=input_tokens,
            output_token_count=estimate_tokens(text),
            total_token_count=input_tokens + estimate_tokens(text),
        ),
    )


class _RawScriptedChatClient(BaseChatClient[Any]):
    OTEL_PROVIDER_NAME = "scripted"

    def __init__(self, *, handler: ChatHandler, model: str = "scripted", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.handler = handler
        self.model = model
        self.calls: list[list[Message]] = []

    async def _answer(
        self, messages: Sequence[Message], options: Mapping[str, Any]
    ) -> ChatResponse[Any]:
        prepared = prepend_instructions_to_messages(
            list(messages), options.get("instructions"), role="system"
        )
        self.calls.append(prepared)
        produced = self.handler(prepared, options)
        if inspect.isawaitable(produced):
            produced = await produced
        input_tokens = estimate_tokens(_text_of(prepared))
        if isinstance(produced, ChatResponse):
            response = produced
            if not response.usage_details:
                text = response.text or ""
                response.usage_details = UsageDetails(
                    input_token_count=input_tokens,
                    output_token_count=estimate_tokens(text),
                    total_token_count=input_tokens + estimate_tokens(text),
                )
        else:
            response = reply(str(produced), input_tokens=input_tokens)
        response.model = self.model
        if response._response_format is None:
            # As the real clients do: the value is parsed from the text when it is first read.
            response._response_format = options.get("response_format")
        return response

    def _inner_get_response(
        self,
        *,
        messages: Sequence[Message],
        stream: bool,
        options: Mapping[str, Any],
        **kwargs: Any,
    ) -> Awaitable[ChatResponse[Any]] | ResponseStream[ChatResponseUpdate, ChatResponse[Any]]:
        if not stream:
            return self._answer(messages, options)

        async def updates() -> AsyncIterator[ChatResponseUpdate]:
            response = await self._answer(messages, options)
            for message in response.messages:
                yield ChatResponseUpdate(
                    role="assistant",
                    contents=list(message.contents),
                    author_name=message.author_name,
                )
            if response.usage_details:
                yield ChatResponseUpdate(
                    role="assistant", contents=[Content.from_usage(response.usage_details)]
                )

        return self._build_response_stream(
            updates(), response_format=options.get("response_format")
        )


class ScriptedChatClient(
    FunctionInvocationLayer[Any],
    ChatMiddlewareLayer[Any],
    ChatTelemetryLayer[Any],
    _RawScriptedChatClient,
):
    """``ScriptedChatClient(handler=...)``: the real layer stack on a scripted model."""


def chat_client_for(
    advisor: Advisor, *, handler: ChatHandler | None = None, **kwargs: Any
) -> ScriptedChatClient:
    """A scripted client for a catalogue advisor; without a handler it approves with a fixed line."""
    return ScriptedChatClient(handler=handler or _default_handler, model=advisor.model, **kwargs)


def _default_handler(messages: list[Message], options: Mapping[str, Any]) -> str:
    # No VERDICT line and no proposal: a scripted advisor never pretends to have judged.
    return "scripted advisor: no independent judgement was made"
