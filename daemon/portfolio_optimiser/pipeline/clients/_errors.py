"""The failure edge every model adapter shares: foreign exceptions become the transport's typed errors.

One table, built lazily from the SDKs' exception classes, maps what a client library raises to
what the caller does next (``reasoning.transport``). The most specific entry wins: the lookup walks
the exception's own class hierarchy, so ``APITimeoutError`` is a timeout although it is also an
``APIConnectionError``. MAF's chat clients wrap every SDK failure in their own exception
(``ChatClientException``, raised ``from`` the SDK error); the wrapper is looked through to the
cause. Anything the table does not know is re-raised untouched, and every translation is
``raise mapped(...) from exc`` so the original stays on the chain.

| raised (openai SDK unless said) | becomes |
|---|---|
| APITimeoutError, builtin TimeoutError | AdvisorTimeout |
| RateLimitError (429) | AdvisorRateLimited, retry_after_s from Retry-After (seconds or HTTP date) |
| AuthenticationError (401), PermissionDeniedError (403) | AdvisorAuthFailed |
| InternalServerError (5xx), APIConnectionError, builtin ConnectionError | AdvisorUnavailable |
| APIResponseValidationError, JSONDecodeError, pydantic ValidationError | MalformedAnswer |
| any other APIStatusError | by its status code (408 timeout, else AdvisorError) |
| any other APIError | AdvisorError |
| a 400/422/500 that names response_format or a max-tokens field | UnsupportedForm (a refused request form) |

An adapter whose SDK raises other classes passes them as ``extra`` entries (one small table of
its own, loaded lazily too; ``sdk_errors()`` in its module).

Never reads a credential and never retries: a failure is reported once, as it happened.
"""

from __future__ import annotations

import contextlib
import email.utils
import importlib
import inspect
import json
import math
import re
import ssl
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cache
from typing import Any, Final, Literal, TypeAlias

from agent_framework.exceptions import AgentFrameworkException

from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.transport import (
    AdvisorAuthFailed,
    AdvisorError,
    AdvisorRateLimited,
    AdvisorTimeout,
    AdvisorUnavailable,
    MalformedAnswer,
    UnsupportedForm,
)

__all__ = [
    "BY_STATUS",
    "ErrorTable",
    "ExtraErrors",
    "map_sdk_errors",
    "optional_attr",
    "parse_retry_after",
    "release",
    "timeout_s",
    "translate",
]

BY_STATUS: Final = "by_status"
"""A table target: classify by the exception's HTTP ``status_code`` (see :func:`_by_status`)."""

Target: TypeAlias = type[AdvisorError] | Literal["by_status"]
ErrorTable: TypeAlias = Mapping[type[BaseException], Target]
ExtraErrors: TypeAlias = "ErrorTable | Callable[[], ErrorTable] | None"
"""An adapter's own entries, or a function that loads them (called only when something failed)."""

DEFAULT_TIMEOUT_S: Final = 60.0
_MAX_UNWRAP: Final = 8


@cache
def _sdk_table() -> dict[type[BaseException], Target]:
    """The shared table. Built on first use, so importing an adapter costs no SDK import."""
    import pydantic

    table: dict[type[BaseException], Target] = {
        TimeoutError: AdvisorTimeout,
        ConnectionError: AdvisorUnavailable,
        json.JSONDecodeError: MalformedAnswer,
        pydantic.ValidationError: MalformedAnswer,
    }
    try:
        import openai
    except ImportError:  # an install without the OpenAI SDK still maps the rest
        return table
    table.update(
        {
            openai.APITimeoutError: AdvisorTimeout,
            openai.RateLimitError: AdvisorRateLimited,
            openai.AuthenticationError: AdvisorAuthFailed,
            openai.PermissionDeniedError: AdvisorAuthFailed,
            openai.InternalServerError: AdvisorUnavailable,
            openai.APIConnectionError: AdvisorUnavailable,
            openai.APIResponseValidationError: MalformedAnswer,
            openai.APIStatusError: BY_STATUS,
            openai.APIError: AdvisorError,
        }
    )
    return table


def _by_status(exc: BaseException) -> type[AdvisorError]:
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        return AdvisorError
    if status in (401, 403):
        return AdvisorAuthFailed
    if status == 408:
        return AdvisorTimeout
    if status == 429:
        return AdvisorRateLimited
    if status >= 500:
        return AdvisorUnavailable
    return AdvisorError


MAX_RETRY_AFTER_S: Final = 86_400.0
"""The longest wait a server may ask for: a day. ``inf`` or ``1e400`` is a server's mistake, and
taken as it is it would overflow every later cooldown computed from the records."""


def _bounded(seconds: float) -> float | None:
    if not math.isfinite(seconds):
        return None
    return min(MAX_RETRY_AFTER_S, max(0.0, seconds))


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delta-seconds or an HTTP date; else None.

    Bounded to ``MAX_RETRY_AFTER_S``; a value that is not a finite number is no value.
    """
    if value is None or not value.strip():
        return None
    try:
        return _bounded(float(value.strip()))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return _bounded((when - (now or datetime.now(UTC))).total_seconds())


def _retry_after_of(exc: BaseException) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        with contextlib.suppress(ValueError):
            return _bounded(float(milliseconds) / 1000)
    raw = headers.get("retry-after")
    return parse_retry_after(raw if isinstance(raw, str) else None)


def _unwrap(exc: BaseException) -> BaseException:
    """Look through MAF's wrapper exceptions to the library error that caused them."""
    current = exc
    for _ in range(_MAX_UNWRAP):
        if not isinstance(current, AgentFrameworkException):
            break
        inner = current.__cause__ or next(
            (a for a in current.args if isinstance(a, BaseException)), None
        )
        if inner is None:
            break
        current = inner
    return current


def _describe(cause: BaseException) -> str:
    text = " ".join(str(cause).split()) or "no detail"
    return f"{type(cause).__name__}: {text}"


def _load(extra: ExtraErrors) -> ErrorTable:
    if not callable(extra):
        return extra or {}
    try:
        return extra()
    except ImportError:  # the adapter's SDK is absent, so none of its classes can have been raised
        return {}


# A server that refuses the form of a request says which part in its error: llama-cpp-python's
# 500 "('body', 'response_format', 'type') ... Input should be 'text' or 'json_object'", OpenAI's
# 400 "Unsupported parameter: 'max_tokens' ... Use 'max_completion_tokens' instead".
_REFUSED_FORMS: Final = (
    ("output_mode", re.compile(r"response_format|json_schema", re.IGNORECASE)),
    ("cap_field", re.compile(r"max_(?:completion_)?tokens", re.IGNORECASE)),
)
# Only the words of a refused *form*: "max_tokens is too large" names the field but refuses the
# value, and stepping down the ladder for it would be remembered as a refusal for ever.
_REFUSAL_WORDS: Final = re.compile(
    r"unsupported|not supported|unrecognized|unrecognised|unknown (?:field|parameter|argument)"
    r"|extra (?:inputs|fields)|not permitted|input should be|use '?[a-z_]+'? instead",
    re.IGNORECASE,
)
_FORM_STATUSES: Final = frozenset({400, 422, 500})


def _refused_form(cause: BaseException) -> str | None:
    """The negotiable feature a status error refused, if it names one in a refusal's words."""
    if getattr(cause, "status_code", None) not in _FORM_STATUSES:
        return None
    said = f"{cause} {getattr(cause, 'body', '') or ''}"
    if not _REFUSAL_WORDS.search(said):
        return None
    return next((feature for feature, pattern in _REFUSED_FORMS if pattern.search(said)), None)


def translate(
    advisor_id: str, exc: BaseException, extra: ExtraErrors = None
) -> AdvisorError | None:
    """The typed error for ``exc``, or None when no table entry matches it."""
    if isinstance(exc, AdvisorError):
        return None
    cause = _unwrap(exc)
    feature = _refused_form(cause)
    if feature is not None:
        return UnsupportedForm(advisor_id, _describe(cause), feature=feature)
    table = {**_sdk_table(), **_load(extra)}
    target = next((table[c] for c in type(cause).__mro__ if c in table), None)
    if target is None:
        return None
    mapped = _by_status(cause) if target == BY_STATUS else target
    assert not isinstance(mapped, str)
    message = _describe(cause)
    if issubclass(mapped, AdvisorRateLimited):
        return mapped(advisor_id, message, retry_after_s=_retry_after_of(cause))
    return mapped(advisor_id, message)


@contextmanager
def map_sdk_errors(advisor_id: str, extra: ExtraErrors = None) -> Iterator[None]:
    """Translate what a client library raises in the block; also usable around ``await``."""
    try:
        yield
    except Exception as exc:
        mapped = translate(advisor_id, exc, extra)
        if mapped is None:
            raise
        raise mapped from exc


def optional_attr(module: str, name: str, *, advisor_id: str, install: str) -> Any:
    """``module.name`` from an optional package, or AdvisorUnavailable saying what to install."""
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise AdvisorUnavailable(
            advisor_id,
            f"{module}.{name} is not installed ({exc}); install {install} "
            f"(`uv add {install}` or `pip install {install}`)",
        ) from None


def timeout_s(advisor: Advisor) -> float:
    """The client's own per-request timeout: ``options.timeout_seconds``, else 60 s."""
    value = advisor.options.get("timeout_seconds")
    return float(value) if isinstance(value, int | float) and value > 0 else DEFAULT_TIMEOUT_S


async def release(client: object) -> None:
    """Close the SDK client a MAF chat client holds (``.client``), if it can be closed."""
    close = getattr(getattr(client, "client", None), "close", None)
    if not callable(close):
        return
    with contextlib.suppress(Exception):
        result = close()
        if inspect.isawaitable(result):
            await result


@cache
def shared_tls_context() -> ssl.SSLContext:
    """One verified TLS context for every client of the process.

    Building one parses the whole CA bundle (tens of milliseconds of CPU that block the event
    loop); the SDK would build a fresh one for every client, even for a plain-http local server.
    """
    import httpx2  # the OpenAI SDK's HTTP library: its default context, built once

    context: ssl.SSLContext = httpx2.create_ssl_context()
    return context


def http_client(advisor: Advisor) -> Any:
    """The SDK's own async HTTP client, sharing the process-wide TLS context."""
    from openai import DefaultAsyncHttpxClient

    return DefaultAsyncHttpxClient(verify=shared_tls_context(), timeout=timeout_s(advisor))
