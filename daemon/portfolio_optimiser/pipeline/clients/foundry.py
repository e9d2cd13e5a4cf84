"""Adapter ``foundry``: a model deployment in an Azure AI Foundry project, through MAF's
``FoundryChatClient`` (a Responses-API client with the same middleware and tool layers).

``agent-framework-foundry`` and ``azure-identity`` are optional: imported only when a Foundry
advisor is used; their absence makes the advisor unavailable with the install command. The project
endpoint comes from ``FOUNDRY_PROJECT_ENDPOINT`` (``options.endpoint_env`` renames it), the
deployment from ``options.deployment``, else the advisor's model. Authentication is Entra ID via
``DefaultAzureCredential``. The client is built on the openai SDK, so the shared table maps its
failures; its SDK retries are the library's default, as the project client builds it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from agent_framework import ChatAndFunctionMiddlewareTypes

from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.transport import AdvisorUnavailable

from ._errors import optional_attr

__all__ = ["INSTALL", "chat_client_for"]

INSTALL: Final = "agent-framework-foundry azure-identity"


def _endpoint(advisor: Advisor) -> str:
    variable = str(advisor.options.get("endpoint_env") or "FOUNDRY_PROJECT_ENDPOINT")
    value = os.environ.get(variable)
    if not value:
        raise AdvisorUnavailable(advisor.id, f"the variable {variable} is not set")
    return value


def chat_client_for(
    advisor: Advisor, *, middleware: Sequence[ChatAndFunctionMiddlewareTypes] | None = None
) -> Any:
    """A ``FoundryChatClient`` for ``advisor``; AdvisorUnavailable when a package is missing."""
    client_class = optional_attr(
        "agent_framework.foundry", "FoundryChatClient", advisor_id=advisor.id, install=INSTALL
    )
    credential_class = optional_attr(
        "azure.identity.aio", "DefaultAzureCredential", advisor_id=advisor.id, install=INSTALL
    )
    return client_class(
        project_endpoint=_endpoint(advisor),
        model=str(advisor.options.get("deployment") or advisor.model),
        credential=credential_class(),
        middleware=middleware,
    )
