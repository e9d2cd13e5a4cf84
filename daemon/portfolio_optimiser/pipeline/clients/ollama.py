"""Adapter ``ollama``: Ollama's native API (``/api/chat``) through MAF's ``OllamaChatClient``.

``agent-framework-ollama`` is optional (still beta): it is imported only when an Ollama advisor is
used, and its absence makes the advisor unavailable with the install command, not a crash. The
host comes from ``options.host``, else ``OLLAMA_HOST``, else Ollama's default. The Ollama SDK does
not retry; its timeout is ``options.timeout_seconds``. Its own exceptions are mapped by a small
table of this adapter, added to the shared one:

| raised | becomes |
|---|---|
| ollama.ResponseError | by its status code (401/403 auth, 429 rate limited, 5xx unavailable) |
| httpx.TimeoutException | AdvisorTimeout |
| httpx.TransportError | AdvisorUnavailable |
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from functools import cache
from typing import Any, Final

from agent_framework import ChatAndFunctionMiddlewareTypes

from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.transport import AdvisorTimeout, AdvisorUnavailable

from ._errors import BY_STATUS, ErrorTable, optional_attr, timeout_s

__all__ = ["INSTALL", "chat_client_for", "sdk_errors"]

INSTALL: Final = "agent-framework-ollama"


def _host(advisor: Advisor) -> str | None:
    return str(advisor.options.get("host") or "") or os.environ.get("OLLAMA_HOST") or None


def chat_client_for(
    advisor: Advisor, *, middleware: Sequence[ChatAndFunctionMiddlewareTypes] | None = None
) -> Any:
    """An ``OllamaChatClient`` for ``advisor``; AdvisorUnavailable when the package is missing."""
    client_class = optional_attr(
        "agent_framework.ollama", "OllamaChatClient", advisor_id=advisor.id, install=INSTALL
    )
    sdk_class = optional_attr("ollama", "AsyncClient", advisor_id=advisor.id, install=INSTALL)
    return client_class(
        model=advisor.model,
        host=_host(advisor),
        client=sdk_class(host=_host(advisor), timeout=timeout_s(advisor)),
        middleware=middleware,
    )


@cache
def sdk_errors() -> ErrorTable:
    """This adapter's table; loaded only once something failed, so only when the SDK is there."""
    httpx = importlib.import_module("httpx")
    return {
        importlib.import_module("ollama").ResponseError: BY_STATUS,
        httpx.TimeoutException: AdvisorTimeout,
        httpx.TransportError: AdvisorUnavailable,
    }
