"""``doctor``'s look at one advisor: is it reachable, is its model there, which structured-output
form does it take. One small call, capped at a few tokens, through the adapter's own client.

Decides nothing for a run and records nothing: a run negotiates its own terms from its recorded
consultations (:mod:`~portfolio_optimiser.reasoning.negotiation`); the probe only tells a person
what the next run will meet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from agent_framework import Message

from portfolio_optimiser.reasoning.catalogue import Advisor
from portfolio_optimiser.reasoning.negotiation import Feature, negotiated, step_down
from portfolio_optimiser.reasoning.transport import AdvisorError, UnsupportedForm, diagnostic_of

from .clients._errors import map_sdk_errors, release
from .state import adapter_cap_options, adapter_errors, adapter_module

__all__ = ["Probe", "probe_advisor"]

PROBE_SCHEMA: Final = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
}
PROBE_CAP: Final = 8


@dataclass(frozen=True)
class Probe:
    advisor: str
    reachable: bool
    said: str
    """One sentence for a person: what was found, or what failed and what to do."""
    models: tuple[str, ...] | None = None
    output_mode: str | None = None
    refused: tuple[str, ...] = field(default=())


def _form(mode: str) -> dict[str, Any] | None:
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "Probe", "schema": PROBE_SCHEMA}}
    if mode == "json_object":
        return {"type": "json_object", "schema": PROBE_SCHEMA}
    return None


async def _ask(advisor: Advisor, refused: Iterable[str]) -> Probe:
    module = adapter_module(advisor)
    errors = adapter_errors(advisor)
    listed: tuple[str, ...] | None = None
    list_models = getattr(module, "list_models", None)
    if list_models is not None:
        with map_sdk_errors(advisor.id, errors):
            listed = tuple(await list_models(advisor))
    client = module.chat_client_for(advisor, middleware=[])
    try:
        return await _forms(advisor, client, errors, listed, refused)
    finally:
        await release(client)


async def _forms(
    advisor: Advisor,
    client: Any,
    errors: Any,
    listed: tuple[str, ...] | None,
    refused: Iterable[str],
) -> Probe:
    terms = negotiated(advisor, refused)
    tried: list[str] = []
    while True:
        options: dict[str, Any] = adapter_cap_options(advisor)(PROBE_CAP, terms.cap_field)
        form = _form(terms.output_mode)
        if form is not None:
            options["response_format"] = form
        try:
            with map_sdk_errors(advisor.id, errors):
                await client.get_response(
                    [Message(role="user", contents=['Answer {"ok": true}'])], options=options
                )
        except UnsupportedForm as exc:
            feature: Feature = "cap_field" if exc.feature == "cap_field" else "output_mode"
            tried.append(f"{feature}={terms.value(feature)}")
            lower = step_down(advisor, terms, feature)
            if lower is None:
                raise
            terms = lower
            continue
        break
    model_note = ""
    if listed is not None:
        model_note = (
            f", model {advisor.model} listed"
            if advisor.model in listed
            else f", but model {advisor.model} is not among {', '.join(listed) or 'none'}"
        )
    refusal = f" ({', '.join(tried)} refused)" if tried else ""
    return Probe(
        advisor=advisor.id,
        reachable=True,
        said=f"reachable{model_note}; structured output {terms.output_mode}{refusal}",
        models=listed,
        output_mode=terms.output_mode,
        refused=tuple(tried),
    )


async def probe_advisor(
    advisor: Advisor, *, refused: Iterable[str] = (), timeout_s: float = 20
) -> Probe:
    """Probe once; every failure is a sentence, never an exception."""
    try:
        return await asyncio.wait_for(_ask(advisor, refused), timeout=timeout_s)
    except TimeoutError:
        why = f"no answer within {timeout_s:g} s"
    except AdvisorError as exc:
        why = f"{exc.status}: {diagnostic_of(exc)}"
    except Exception as exc:  # an adapter bug is reported, not raised, here too
        why = f"error: {type(exc).__name__}: {exc}"
    return Probe(
        advisor=advisor.id,
        reachable=False,
        said=(
            f"not reachable ({why}); start its server or fix options.base_url, or switch it off "
            f"with PORTFOLIO_OPTIMISER_ADVISORS_DISABLE={advisor.id}"
        ),
    )
