"""Adapter ``openai-compatible``: any server that speaks ``/v1/chat/completions`` (vLLM, llama.cpp,
LM Studio, Ollama's OpenAI mode, a loopback fake in the tests).

Uses ``OpenAIChatCompletionClient`` (chat completions), never ``OpenAIChatClient`` (the Responses
API, ``/responses``, which these servers do not serve). The SDK client is built here with
``max_retries=0``: a retry inside the SDK is invisible to middleware and to the breaker, so a
failure is reported once, as it happened. Options:

| option | meaning |
|---|---|
| base_url | the server's base URL, ending in ``/v1`` |
| base_url_env | else: the variable holding it (its value is read only here) |
| api_key_env | the variable holding a key; without one the key is ``not-needed`` (local servers ignore it, and the client needs some key or it falls back to Azure routing) |
| timeout_seconds | the SDK's per-request timeout; 60 s by default |
| structured_output | ``auto`` (negotiated), ``json_schema``, ``json_object`` or ``prompt`` |
| output_cap_field | ``auto`` (negotiated), ``both``, ``max_completion_tokens`` or ``max_tokens`` |

MAF sends the output cap as ``max_completion_tokens``; llama.cpp-family servers ignore that field
and read ``max_tokens``, which some hosted reasoning models refuse. ``cap_options`` sends the
field the advisor's negotiated terms name (``both`` by default: MAF's field plus ``max_tokens``
in the request body).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from agent_framework import ChatAndFunctionMiddlewareTypes
from agent_framework.openai import OpenAIChatCompletionClient

from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.transport import AdvisorUnavailable

from ._errors import http_client, timeout_s

__all__ = ["cap_options", "chat_client_for", "list_models"]

NO_KEY: Final = "not-needed"


def _base_url(advisor: Advisor) -> str:
    options = advisor.options
    if options.get("base_url"):
        return str(options["base_url"])
    variable = options.get("base_url_env")
    if variable and os.environ.get(str(variable)):
        return os.environ[str(variable)]
    where = f"the variable {variable} is not set" if variable else "no base_url is configured"
    raise AdvisorUnavailable(
        advisor.id,
        f"{where}; set options.base_url, or options.base_url_env and that variable",
    )


def _api_key(advisor: Advisor) -> str:
    variable = advisor.options.get("api_key_env")
    key = os.environ.get(str(variable)) if variable else None
    return key or NO_KEY


def chat_client_for(
    advisor: Advisor, *, middleware: Sequence[ChatAndFunctionMiddlewareTypes] | None = None
) -> OpenAIChatCompletionClient:
    """A chat-completions client for ``advisor``, with SDK retries off and its timeout set."""
    from openai import AsyncOpenAI

    sdk = AsyncOpenAI(
        base_url=_base_url(advisor),
        api_key=_api_key(advisor),
        max_retries=0,
        timeout=timeout_s(advisor),
        http_client=http_client(advisor),
    )
    return OpenAIChatCompletionClient(model=advisor.model, async_client=sdk, middleware=middleware)


def cap_options(cap: int, field: str) -> dict[str, Any]:
    """The chat options that carry ``cap`` in ``field`` (see the module docstring)."""
    if field == "max_completion_tokens":
        return {"max_tokens": cap}
    if field == "max_tokens":
        return {"extra_body": {"max_tokens": cap}}
    return {"max_tokens": cap, "extra_body": {"max_tokens": cap}}


async def list_models(advisor: Advisor) -> list[str]:
    """The model ids the server lists (``GET /models``): ``doctor`` checks the advisor's is there."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(
        base_url=_base_url(advisor),
        api_key=_api_key(advisor),
        max_retries=0,
        timeout=timeout_s(advisor),
        http_client=http_client(advisor),
    ) as sdk:
        page = await sdk.models.list()
        return [model.id for model in page.data]
