"""Adapter ``azure-openai``: an Azure OpenAI deployment through ``OpenAIChatCompletionClient``.

MAF has no separate Azure class any more; the OpenAI chat-completion client routes to Azure when it
is given ``azure_endpoint=``. The SDK client (``AsyncAzureOpenAI``) is built here so that retries
are off (``max_retries=0``) and the timeout is the advisor's. Settings, each from the environment
unless the option names another variable:

| setting | variable (option to rename it) | notes |
|---|---|---|
| endpoint | AZURE_OPENAI_ENDPOINT (``endpoint_env``) | required |
| key | AZURE_OPENAI_API_KEY (``api_key_env``) | required; Entra ID credentials are not wired here |
| API version | AZURE_OPENAI_API_VERSION (``api_version_env``) | else ``options.api_version``, else MAF's default |
| deployment | ``options.deployment`` | else the advisor's model |
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

from agent_framework import ChatAndFunctionMiddlewareTypes
from agent_framework.openai import OpenAIChatCompletionClient

from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.transport import AdvisorUnavailable

from ._errors import http_client, timeout_s
from .openai_compatible import cap_options  # the same API, the same fields

__all__ = ["DEFAULT_API_VERSION", "cap_options", "chat_client_for"]

DEFAULT_API_VERSION: Final = "2024-12-01-preview"
"""agent-framework-openai 1.17's default chat-completions API version for Azure."""


def _setting(advisor: Advisor, option: str, default_variable: str) -> str | None:
    variable = str(advisor.options.get(option) or default_variable)
    return os.environ.get(variable) or None


def _required(advisor: Advisor, option: str, default_variable: str) -> str:
    value = _setting(advisor, option, default_variable)
    if value is None:
        variable = advisor.options.get(option) or default_variable
        raise AdvisorUnavailable(advisor.id, f"the variable {variable} is not set")
    return value


def chat_client_for(
    advisor: Advisor, *, middleware: Sequence[ChatAndFunctionMiddlewareTypes] | None = None
) -> OpenAIChatCompletionClient:
    """A chat-completions client on the advisor's Azure deployment, SDK retries off."""
    from openai import AsyncAzureOpenAI

    endpoint = _required(advisor, "endpoint_env", "AZURE_OPENAI_ENDPOINT")
    api_key = _required(advisor, "api_key_env", "AZURE_OPENAI_API_KEY")
    api_version = (
        _setting(advisor, "api_version_env", "AZURE_OPENAI_API_VERSION")
        or advisor.options.get("api_version")
        or DEFAULT_API_VERSION
    )
    deployment = str(advisor.options.get("deployment") or advisor.model)
    sdk = AsyncAzureOpenAI(
        azure_endpoint=endpoint,
        azure_deployment=deployment,
        api_key=api_key,
        api_version=str(api_version),
        max_retries=0,
        timeout=timeout_s(advisor),
        http_client=http_client(advisor),
    )
    return OpenAIChatCompletionClient(
        model=deployment,
        azure_endpoint=endpoint,
        api_version=str(api_version),
        async_client=sdk,
        middleware=middleware,
    )
